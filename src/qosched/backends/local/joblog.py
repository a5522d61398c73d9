"""A job's output (``worker.log`` in its folder): capped, read from the end in bounded memory,
and followed by offsets that never go back.

The runner and the job's processes append to ``worker.log`` (opened ``O_APPEND``). Once it
grows past the job's limit (``spec.logLimit``, default
``qosched.trainingjob.jobspec.DEFAULT_LOG_LIMIT``) the service
rotates it as logrotate's ``copytruncate`` does: its last ``limit`` bytes are copied to
``worker.log.1`` (replacing the one before) and it is truncated to nothing, so the processes'
next writes land at its start. A job so keeps at most about twice its limit on disk, and
bytes written in the instant between the copy and the truncation are lost.

Offsets count every byte the job ever wrote: ``worker.log.base`` records where ``worker.log``
starts in that count (``base``) and where ``worker.log.1`` does (``kept_from``). A follower
that asks for bytes rotated away gets the oldest ones still kept, and the chunk's start (its
end less its length) says how many it missed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from qosched.backends.local.files import MACHINE_ERRNOS
from qosched.core.atomic import atomic_write_json
from qosched.core.errors import InputError

JOB_LOG = "worker.log"
ROTATED_LOG = "worker.log.1"
BASE_FILE = "worker.log.base"
#: The most bytes a tail is read from, whatever the number of lines asked for: a log of one
#: endless line must not all come back (nor all be held in memory).
MAX_TAIL_BYTES = 1 << 20
_BLOCK = 64 << 10
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))

# Rotation and reading are done by different threads of the service (its round, the API's
# handlers): a reader must never see the base of one rotation with the file of another.
_ROTATION = threading.Lock()


@dataclass(frozen=True, slots=True)
class Chunk:
    """Bytes of a job's output: ``data`` from offset ``start`` up to ``end``; ``size`` is the
    whole output's end as it was read."""

    data: bytes
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass(frozen=True, slots=True)
class _Base:
    base: int = 0  # where worker.log's first byte is in the whole output
    kept_from: int = 0  # where worker.log.1's first byte is (== base when there is none)


def rotate_if_over(job_dir: Path, limit: int) -> bool:
    """Rotate the job's output once it is over ``limit`` bytes; returns whether it did."""
    path = job_dir / JOB_LOG
    try:
        size = path.lstat().st_size
    except FileNotFoundError:
        return False
    if size <= limit:
        return False
    with _ROTATION:
        base = _read_base(job_dir)
        with _open_regular(path, os.O_RDWR) as log:
            size = os.fstat(log.fileno()).st_size
            keep = min(size, limit)
            log.seek(size - keep)
            temp = job_dir / f".{ROTATED_LOG}.tmp"
            with open(temp, "wb") as rotated:
                left = keep
                while left > 0:
                    block = log.read(min(_BLOCK * 16, left))
                    if not block:
                        break
                    rotated.write(block)
                    left -= len(block)
            os.replace(temp, job_dir / ROTATED_LOG)
            # Bytes appended during the copy are lost, and counted: worker.log's next first
            # byte is the one after the last it held when it was truncated. (Readers wait
            # for the lock, so none has read past that size.)
            truncated_at = os.fstat(log.fileno()).st_size
            os.ftruncate(log.fileno(), 0)
        kept_from = base.base + size - keep
        atomic_write_json(
            job_dir / BASE_FILE, {"base": base.base + truncated_at, "kept_from": kept_from}
        )
    return True


def read_chunk(job_dir: Path, offset: int, limit: int) -> Chunk:
    """At most ``limit`` bytes of the job's output from ``offset`` on, or from the oldest byte
    still kept when ``offset`` was rotated away; ``InputError`` for an offset past the end."""
    with _ROTATION:
        base = _read_base(job_dir)
        size = base.base + _size(job_dir / JOB_LOG)
        if offset > size:
            raise InputError(
                f"offset {offset} is past the end of the output ({size} bytes)", field="offset"
            )
        offset = max(offset, base.kept_from)
        if offset < base.base:
            data = _read_at(job_dir / ROTATED_LOG, offset - base.kept_from, limit)
            data = data[: base.base - offset]
            if data:
                return Chunk(data, offset, size)
            offset = base.base  # what was not copied before the rotation is lost
        data = _read_at(job_dir / JOB_LOG, offset - base.base, limit)
        return Chunk(data, offset, size)


def read_tail(job_dir: Path, lines: int, limit: int = MAX_TAIL_BYTES) -> str:
    """The last ``lines`` lines of the job's output (split as ``str.splitlines`` splits), each
    ending in a newline, of what lies in its last ``limit`` bytes (the first line then maybe
    cut). Never reads more than ``limit`` bytes, however long the lines."""
    if lines <= 0:
        return ""
    limit = min(limit, MAX_TAIL_BYTES)
    # Read a block from the end, and twice as much again while it holds too few lines: the
    # page asks for the last lines every few seconds, mostly short ones.
    want = min(_BLOCK, limit)
    with _ROTATION:
        base = _read_base(job_dir)
        while True:
            data = _last_bytes(job_dir, base, want)
            if data.count(b"\n") > lines or len(data) < want or want >= limit:
                break
            want = min(2 * want, limit)
    if len(data) >= want:  # cut somewhere: not half a character
        data = data.lstrip(_UTF8_CONTINUATION)
    found = data.decode(errors="replace").splitlines()[-lines:]
    return "\n".join(found) + ("\n" if found else "")


def read_kept(job_dir: Path) -> bytes:
    """All of the job's output still kept: at most about twice its limit."""
    parts, offset = [], 0
    while (chunk := read_chunk(job_dir, offset, 1 << 20)).data:
        parts.append(chunk.data)
        offset = chunk.end
    return b"".join(parts)


def output_size(job_dir: Path) -> int:
    """Where the job's output ends now, counted as offsets are."""
    with _ROTATION:
        return _read_base(job_dir).base + _size(job_dir / JOB_LOG)


def _last_bytes(job_dir: Path, base: _Base, want: int) -> bytes:
    """The last ``want`` bytes of what is kept: worker.log, after worker.log.1 if need be."""
    current = _tail_bytes(job_dir / JOB_LOG, want)
    if len(current) < want and base.base > base.kept_from:
        return _tail_bytes(job_dir / ROTATED_LOG, want - len(current)) + current
    return current


def _tail_bytes(path: Path, limit: int) -> bytes:
    try:
        with _open_regular(path, os.O_RDONLY) as log:
            size = os.fstat(log.fileno()).st_size
            log.seek(max(size - limit, 0))
            return log.read(limit)
    except FileNotFoundError:
        return b""


def _read_at(path: Path, offset: int, limit: int) -> bytes:
    try:
        with _open_regular(path, os.O_RDONLY) as log:
            log.seek(offset)
            return log.read(limit)
    except FileNotFoundError:
        return b""


def _size(path: Path) -> int:
    try:
        with _open_regular(path, os.O_RDONLY) as log:
            return os.fstat(log.fileno()).st_size
    except FileNotFoundError:
        return 0


def _open_regular(path: Path, flags: int) -> BinaryIO:
    """``path`` opened unbuffered, if it is a regular file: the job's folder is the job's to
    write, and a link to ``/dev/zero`` or a FIFO in place of its log must neither be followed
    nor block the service (``InputError`` naming the file). ``FileNotFoundError`` if absent."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:
            raise
        what = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened: {exc}"
        raise InputError(what, source=path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError("is not a regular file", source=path)
    return open(fd, "r+b" if flags & os.O_RDWR else "rb", buffering=0)


def _read_base(job_dir: Path) -> _Base:
    """The job's ``worker.log.base``; none (never rotated) is offset 0. Written only by the
    service, but it lies in a folder the job can write to: anything unreadable, or numbers
    out of order, read as never rotated rather than as offsets to trust."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((job_dir / BASE_FILE).read_bytes()[:4096])
        base, kept_from = data["base"], data["kept_from"]
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (base, kept_from))
        if whole and 0 <= kept_from <= base < 1 << 62:
            return _Base(base, kept_from)
    return _Base()
