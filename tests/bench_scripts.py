"""The scripts under bench/ as modules, for the tests that check them."""

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_script(script: str, name: str | None = None) -> ModuleType:
    """``bench/SCRIPT.py`` as a fresh module called ``name`` (``script`` unless given), put in
    ``sys.modules`` first: its dataclasses look their module up there while it is made."""
    spec = importlib.util.spec_from_file_location(name or script, BENCH / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def bench_script(script: str) -> Iterator[ModuleType]:
    """`load_bench_script` for a script that imports its siblings, as it does when run: bench/
    on ``sys.path`` while the module is used, then both taken away again."""
    sys.path.insert(0, str(BENCH))
    try:
        yield load_bench_script(script)
    finally:
        sys.modules.pop(script, None)
        sys.path.remove(str(BENCH))
