"""bench/fgd_inflation.py: FGD's reduction against the best baseline, and the paper's
artifact results read back as unallocated % per level."""

from pathlib import Path

import pytest

from bench_scripts import bench_script


@pytest.fixture(scope="module")
def bench():
    with bench_script("fgd_inflation") as module:
        yield module


def test_the_reduction_is_against_the_least_unallocated_baseline(bench) -> None:
    # (7.0 - 4.2) / 7.0 = 40%
    best, cut = bench.reduction(4.2, {"dot-product": 9.0, "best-fit": 7.0})
    assert best == "best-fit"
    assert cut == pytest.approx(0.4)


def test_the_artifact_results_are_read_as_unallocated_per_level(bench, tmp_path: Path) -> None:
    levels = [str(i) for i in range(131)]
    head = "workload,sc_policy,tune,seed,total_gpus," + ",".join(levels)

    def row(policy: str, seed: int, at100: float) -> str:
        cells = ["50.0"] * 131
        cells[100] = str(at100)
        return f"openb_pod_list_default,{policy},1.3,{seed},6212," + ",".join(cells)

    path = tmp_path / "analysis_allo_discrete.csv"
    path.write_text("\n".join([head, row("06-FGD", 42, 95.0), row("06-FGD", 43, 96.0),
                               row("05-BestFit", 42, 93.0)]) + "\n")  # fmt: skip
    got = bench.expected(path, "openb_pod_list_default", [0.5, 1.0])
    # 100 - mean(95, 96) = 4.5 at 100%; 100 - 50 at 50%.
    assert got == {"06-FGD": [50.0, 4.5], "05-BestFit": [50.0, 7.0]}
