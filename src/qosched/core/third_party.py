"""The deprecation notices third-party libraries raise about their own code: PyTorch's pytree
deprecates ``LeafSpec`` yet builds one every time an exported program is copied or loaded.
They are meant for the library's developers; a qosched user can do nothing about them, so the
CLI and the places that call into such code ignore them. qosched's own warnings, and every
other category, stay visible."""

from __future__ import annotations

import warnings

#: The libraries whose own deprecation notices are ignored (the module a warning is raised in).
LIBRARIES = r"(torch|torchvision|functorch|numpy|scipy|matplotlib|yaml|rich|kubernetes)(\.|$)"

#: A deprecated class rebuilt by unpickling or deep-copying is attributed to the standard
#: library's rebuilder, not to the library that owns the class (torch's ``LeafSpec``): qosched
#: deprecates no class, so a notice raised there is always a library's.
REBUILDERS = r"(copyreg|copy|pickle)$"

NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def ignore_library_notices() -> None:
    """Ignore the deprecation and future notices raised inside :data:`LIBRARIES` (and their
    rebuilt classes), from now on in this process or until the enclosing
    ``warnings.catch_warnings()`` ends."""
    for category in NOTICES:
        warnings.filterwarnings("ignore", category=category, module=LIBRARIES)
        warnings.filterwarnings("ignore", category=category, module=REBUILDERS)
