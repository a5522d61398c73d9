# The README's two quick-start commands, `make demo` and `make test`, and `make test-fast`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Test processes: the suite waits on runners, services and a browser, so more than the cores.
# Measured on two cores: the whole suite took 641 s with 4 workers, 454 s with 6.
TEST_WORKERS ?= 6
# The fast tier computes rather than waits, and every worker first collects the whole suite (about
# 10 s of CPU): one worker per core. Measured on two busy cores: 104 s of CPU and 178 s with 2
# workers, 159 s and 258 s with 6.
TEST_FAST_WORKERS ?= 2

.PHONY: demo test test-fast setup setup-dev lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install --quiet -e .

setup-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'

## Run the bundled real training workload under qos and under fifo on this machine, and compare.
demo: setup
	$(BIN)/qosched demo

## Lint and run the whole test suite, in parallel.
test: setup-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

## The quick loop while developing: no slow, process, network or browser tests.
test-fast: setup-dev
	$(BIN)/python -m pytest -n $(TEST_FAST_WORKERS) -m "not slow and not process and not network and not browser"

clean:
	rm -rf $(VENV) qosched-out .pytest_cache .ruff_cache

## Build the container image the Kubernetes manifests name (Docker or a compatible engine).
IMAGE ?= ghcr.io/qosched/qosched:0.1.0
.PHONY: image
image:
	docker build -t $(IMAGE) .
