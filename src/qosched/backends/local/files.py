"""Read files a job can write to, without trusting what the job made of them.

A job's folder is writable by the job's own command, which may replace a file the runner or the
service reads with a symbolic link to ``/dev/zero``, a FIFO or a folder. Each of those would
make a plain ``open().read()`` fill memory, block forever or raise from deep inside; here each is
an ``InputError`` naming the file, and a read never takes more than it is allowed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from qosched.core.errors import InputError

#: Errors of the machine, not of the file or of the job that wrote it: out of descriptors,
#: disk or memory, or the disk failing. Raised as they are, never as a job's ``InputError``.
MACHINE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM, errno.EIO}
)

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def read_regular(path: str | Path, offset: int, limit: int) -> tuple[bytes, int] | None:
    """Up to ``limit`` bytes of the regular file ``path`` from ``offset``, and the file's size
    when it was opened; None when there is no such file.

    Never follows a symbolic link and never blocks on a FIFO (opened non-blocking, then refused):
    anything but a regular file is an ``InputError``.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:
            raise
        if exc.errno == errno.ELOOP:
            raise InputError("is a symbolic link, not a regular file", source=path) from None
        raise InputError(f"cannot be read: {exc.strerror}", source=path) from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = _KINDS.get(stat.S_IFMT(status.st_mode), "something else")
            raise InputError(f"is {kind}, not a regular file", source=path)
        size = status.st_size
        os.lseek(fd, offset, os.SEEK_SET)
        parts, wanted = [], limit
        while wanted > 0:
            part = os.read(fd, wanted)
            if not part:
                break
            parts.append(part)
            wanted -= len(part)
        return b"".join(parts), size
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:
            raise
        raise InputError(f"cannot be read: {exc.strerror}", source=path) from None
    finally:
        os.close(fd)


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """The (device, inode) of whatever is at ``path`` now, not following a link; None when
    nothing is. A file deleted and written again has a new identity."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino
