"""Replace a file so that a reader, or a crash at any moment, sees the old or the new content."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temp file beside ``path``, fsync it, then ``os.replace`` it in place."""
    path = Path(path)
    # Same directory: os.replace is only atomic within one filesystem.
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; the result is meant for the scheduler too, maybe another user.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    # The rename itself lives in the directory; without this a power loss could undo it.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_json(path: str | Path, value: Any) -> None:
    data = (json.dumps(value, indent=2) + "\n").encode()
    atomic_write(path, lambda handle: handle.write(data))


def remove_stale_temps(path: str | Path) -> None:
    """Delete temp files an ``atomic_write(path)`` left behind when its process was killed."""
    path = Path(path)
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
