"""Deprecation notices raised inside PyTorch and the other libraries stay out of a command's
output; qosched's own warnings, and a library's other warnings, still show."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from qosched.cli.main import main
from qosched.core.third_party import ignore_library_notices
from qosched.placement.program import export_program, load_program, save_program


def _shown(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # over pytest's own filters (pyproject.toml)
        call()
    return list(caught)


def test_exporting_and_loading_a_program_shows_no_pytorch_deprecation():
    # The cheapest path to the LeafSpec FutureWarning that `infer run` printed: torch.export
    # deep-copies and unpickles pytree specs, attributed to copyreg, not to torch.
    program = None

    def export() -> None:
        nonlocal program
        program = export_program(nn.Linear(2, 2), (torch.zeros(1, 2),))

    assert [str(w.message) for w in _shown(export)] == []
    data = save_program(program)
    assert [str(w.message) for w in _shown(lambda: load_program(data))] == []


@pytest.mark.parametrize(
    ("module", "category", "shown"),
    [
        ("torch.utils._pytree", FutureWarning, False),
        ("copyreg", FutureWarning, False),
        ("numpy.core", DeprecationWarning, False),
        ("torch.export", UserWarning, True),  # not a deprecation: may concern the user's model
        ("torchx.runner", FutureWarning, True),  # another package, not torch
        ("qosched.placement.program", FutureWarning, True),
        ("qosched.core.registry", DeprecationWarning, True),
        ("__main__", DeprecationWarning, True),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", str(v)),
)
def test_only_library_notices_are_ignored(module, category, shown):
    def warn() -> None:
        ignore_library_notices()
        warnings.warn_explicit("notice", category, f"{module}.py", 1, module=module)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn()
    assert len(caught) == (1 if shown else 0)


def test_the_cli_ignores_library_notices_while_a_command_runs_and_restores_filters(
    monkeypatch, capsys
):
    # A command's own code calling into a library: its notice stays out, qosched's shows.
    def run(args) -> int:
        warnings.warn_explicit("deprecated", FutureWarning, "_pytree.py", 1, module="torch._x")
        warnings.warn("qosched's own", FutureWarning, stacklevel=1)
        return 0

    import qosched.cli.cluster as cluster

    monkeypatch.setattr(cluster, "run_trace_generate", run)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        assert main(["trace", "generate", "--out", "unused.csv"]) == 0
        assert warnings.filters == before
    assert [str(w.message) for w in caught] == ["qosched's own"]
