"""The API server in a process of its own, for tests that flood it (its descriptors, threads
and memory are then its own to measure).

``python api_process.py [FD_LIMIT]``: with FD_LIMIT, the process may open at most that many
files (soft and hard limit, so that ``serve`` cannot raise it). It serves an in-memory service
(``service_fakes.FakeService``), prints ``{"port": ..., "pid": ...}`` as one line, then answers
each line read from stdin with one JSON line:

- ``open N``: open N files at once, as the service does when it reads its jobs' progress and
  logs -> ``{"opened": n, "error": message or null, "threads": threads of the process}``;
- ``rss`` -> ``{"rss_kb": resident memory (VmRSS)}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_files(count: int, folder: Path) -> dict[str, object]:
    error = None
    with contextlib.ExitStack() as stack:
        opened = 0
        try:
            for n in range(count):
                stack.enter_context(open(folder / f"progress-{n}", "a"))
                opened += 1
        except OSError as exc:
            error = str(exc)
    return {"opened": opened, "error": error, "threads": threading.active_count()}


def main() -> None:
    if len(sys.argv) > 1:
        import resource

        limit = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    from service_fakes import FakeService

    from qosched.backends.local.api import serve

    # Removed when the test closes our standard input (left only if the process is killed).
    with tempfile.TemporaryDirectory(prefix="qosched-api-process-") as name:
        folder = Path(name)
        server = serve(FakeService(log_dir=folder), token="flood-token")
        print(json.dumps({"port": server.port, "pid": os.getpid()}), flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "open":
                answer = open_files(int(args[0]), folder)
            elif command == "rss":
                answer = {"rss_kb": rss_kb()}
            else:
                answer = {"error": f"unknown command {command!r}"}
            print(json.dumps(answer), flush=True)
        server.close()


if __name__ == "__main__":
    main()
