"""Names of an earlier release that still import, with a warning, after a rename.

A module whose public class was renamed keeps the old name reachable for one release so that
plug-ins and training scripts written against it still load; the warning says what to write
instead. The old name is no class of its own (``tests/core/test_class_names.py``): it resolves
to the renamed class.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def earlier_names(
    module: str, namespace: Mapping[str, Any], renamed: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each old name in ``renamed`` (old -> new) with the
    new name's object from ``namespace`` and a DeprecationWarning, and any other name with the
    usual AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new = renamed[name]
            warnings.warn(
                f"{module}.{name} is now {module}.{new}; the old name goes in qosched 0.3",
                DeprecationWarning,
                stacklevel=2,
            )
            return namespace[new]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
