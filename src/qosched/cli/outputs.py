"""Where a command will write, checked before it runs: a simulation of minutes must not end in a
traceback because its output folder cannot be made."""

from __future__ import annotations

import os
from pathlib import Path

from qosched.core.errors import InputError


def output_dir(path: str | None, flag: str) -> Path | None:
    """The folder given to ``flag``, made now if missing; InputError if it cannot be made or
    written to."""
    if path is None:
        return None
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create folder {path}: {exc.strerror}", field=flag) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write in folder {path}", field=flag)
    return folder


def output_file(path: str | None, flag: str) -> Path | None:
    """The file given to ``flag``, its folder made now if missing (as ``output_dir`` makes a
    folder option's); InputError if it is a folder or cannot be written. The file itself is
    not created: a run that fails first leaves no empty file."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{path} is a folder, not a file", field=flag)
    output_dir(str(target.parent), flag)
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"cannot write {path}", field=flag)
    return target


#: The image formats a picture is written in (matplotlib's, by the file's suffix).
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def image_file(path: str | None, flag: str) -> Path | None:
    """`output_file`, whose suffix also names an image format a picture can be written in."""
    target = output_file(path, flag)
    if target is not None and target.suffix.lower() not in IMAGE_SUFFIXES:
        raise InputError(
            f"{path}: expected an image file ending in {', '.join(IMAGE_SUFFIXES)}", field=flag
        )
    return target
