"""The random-mix bench (bench/gpushare_mixes.py) as a module, for the tests that use its mixes."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpushare_mixes.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("gpushare_mixes", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
