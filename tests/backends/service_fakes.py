"""An in-memory ``Service`` for the API and CLI tests, and a server around it that looks, to
clients, like a service started by ``qosched up``."""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from qosched.backends.local import joblog
from qosched.backends.local.api import ApiServer, LogChunk, ServiceMetrics, ServiceStatus, serve
from qosched.backends.local.detail import job_detail, read_log_chunk
from qosched.backends.local.home import (
    Endpoint,
    HomeLock,
    ensure_token,
    remove_endpoint,
    write_endpoint,
)
from qosched.backends.local.jobview import JobDetail, JobView, Outcome
from qosched.backends.local.store import JobEvent, Lifecycle, UnknownJobError
from qosched.backends.local.verdict import Verdict
from qosched.cluster.admission import Admission
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import parse_job_spec

FINAL = ("succeeded", "failed", "cancelled", "declined")


def spec_text(name: str = "cnn-small", iterations: int = 400, deadline: str = "10m") -> str:
    return f"""\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: {name}
spec:
  workload: cnn
  work:
    iterations: {iterations}
  deadline: {deadline}
  resources:
    minCpus: 1
    maxCpus: 2
"""


def write_specs(directory: Path, *names: str) -> list[str]:
    """A spec file per name in ``directory`` (`spec_text`), as ``submit`` takes them."""
    paths = []
    for name in names:
        path = directory / f"{name}.yaml"
        path.write_text(spec_text(name=name))
        paths.append(str(path))
    return paths


def make_job(job_id: str = "j-000001", state: str = "queued", **fields: Any) -> JobView:
    """A job as the API shows it: submitted at 0 with a deadline at 600, 400 iterations, none
    done, holding nothing; ``fields`` override (as ``JobView`` fields)."""
    base: dict[str, Any] = {
        "id": job_id,
        "name": f"name-{job_id}",
        "state": Lifecycle(state),
        "submitted_at": 0.0,
        "deadline_at": 600.0,
        "started_at": None,
        "finished_at": None,
        "iterations": 400,
        "iterations_done": 0,
        "cpus": (),
        "gpus": (),
        "predicted_finish_at": None,
        "predicted_finish_band": None,
        "best_effort": False,
        "guaranteed": False,
        "attempts": 0,
        "error": None,
    }
    return JobView(**(base | fields))


class FakeService:
    """Jobs in a list, kept as their JSON; nothing runs unless a test says so with ``update``.
    Logs are files under ``log_dir`` (a new temporary folder by default), read as
    ``LocalService`` reads its runners'."""

    def __init__(
        self,
        capacity_cpus: int = 4,
        clock: Callable[[], float] = time.time,
        log_dir: Path | None = None,
        gpus: tuple[int, ...] = (),
    ) -> None:
        self.capacity_cpus = capacity_cpus
        self.gpus = gpus
        self.clock = clock
        self._jobs: dict[str, dict[str, Any]] = {}
        self._events: dict[str, list[JobEvent]] = {}
        self._log_dir = log_dir
        self._lock = threading.Lock()
        self.submitted_sources: list[str] = []
        self.submitted_texts: list[str] = []  # what each submit sent
        self.verdict = Verdict(Admission.GUARANTEED)  # what every dry run answers
        self.dry_run_texts: list[str] = []  # what each dry run sent

    def submit(self, spec_text: str, source: str) -> JobView:
        now = self.clock()
        spec = parse_job_spec(spec_text, source, now=now)
        with self._lock:
            job_id = f"j-{len(self._jobs) + 1:06d}"
            self.submitted_sources.append(source)
            self.submitted_texts.append(spec_text)
            self._jobs[job_id] = {
                "id": job_id,
                "name": spec.name,
                "state": "queued",
                "submitted_at": now,
                "deadline_at": spec.deadline_at(now),
                "started_at": None,
                "finished_at": None,
                "iterations": spec.iterations,
                "iterations_done": 0,
                "cpus": [],
                "gpus": [],
                "predicted_finish_at": None,
                "predicted_finish_band": None,
                "best_effort": spec.best_effort,
                "guaranteed": False,
                "attempts": 0,
                "error": None,
            }
            self._log_path(job_id).write_bytes(b"")
            self._events[job_id] = [JobEvent(job_id, now, "submitted", {"name": spec.name})]
            return _view(self._jobs[job_id])

    def dry_run(self, spec_text: str, source: str) -> Verdict:
        parse_job_spec(spec_text, source, now=self.clock())  # refused as a submit would be
        with self._lock:
            self.dry_run_texts.append(spec_text)
            return self.verdict

    def jobs(self) -> list[JobView]:
        with self._lock:
            return [_view(job) for job in self._jobs.values()]

    def job(self, job_id: str) -> JobView:
        with self._lock:
            return _view(self._get(job_id))

    def job_detail(self, job_id: str) -> JobDetail:
        with self._lock:
            return job_detail(_view(self._get(job_id)), list(self._events[job_id]))

    def logs(self, job_id: str, tail_lines: int | None = None, limit: int | None = None) -> str:
        with self._lock:
            self._get(job_id)
        job_dir = self._log_path(job_id).parent
        if tail_lines is not None:
            return joblog.read_tail(job_dir, tail_lines, limit or joblog.MAX_TAIL_BYTES)
        return joblog.read_kept(job_dir).decode(errors="replace")

    def read_log(self, job_id: str, offset: int, limit: int) -> LogChunk:
        with self._lock:
            state = self._get(job_id)["state"]
        return read_log_chunk(self._log_path(job_id).parent, offset, limit, state=state)

    def cancel(self, job_id: str) -> JobView:
        with self._lock:
            job = self._get(job_id)
            if job["state"] in FINAL:
                raise InputError(f"job {job_id} is already {job['state']}", field="job")
            self._change(job, state="cancelled", finished_at=self.clock(), cpus=[])
            return _view(job)

    def status(self) -> ServiceStatus:
        metrics = self.metrics()
        with self._lock:
            allocated = {
                job["id"]: tuple(job["cpus"]) for job in self._jobs.values() if job["cpus"]
            }
            allocated_gpus = {
                job["id"]: tuple(job["gpus"]) for job in self._jobs.values() if job.get("gpus")
            }
        return ServiceStatus(
            policy="qos",
            cpus=tuple(range(self.capacity_cpus)),
            gpus=self.gpus,
            queued=metrics.queued,
            running=metrics.running,
            allocated=allocated,
            allocated_gpus=allocated_gpus,
            outcomes=metrics.outcomes,
        )

    def metrics(self) -> ServiceMetrics:
        with self._lock:
            jobs = list(self._jobs.values())
        outcomes = {outcome.value: 0 for outcome in Outcome}
        for job in jobs:
            if job["state"] == "succeeded":
                outcomes["met" if job["finished_at"] <= job["deadline_at"] else "missed"] += 1
            elif job["state"] in outcomes:
                outcomes[job["state"]] += 1
        return ServiceMetrics(
            capacity_cpus=self.capacity_cpus,
            queued=sum(job["state"] in ("queued", "preempted") for job in jobs),
            running=sum(job["state"] == "running" for job in jobs),
            allocated_cpus={job["id"]: len(job["cpus"]) for job in jobs if job["cpus"]},
            outcomes=outcomes,
        )

    # --- test controls ---------------------------------------------------------------------------

    def update(self, job_id: str, why: str | None = None, **changes: Any) -> None:
        """Change a job as the service would, logging state and allocation changes as events
        (a re-size with ``why``, as the service says it)."""
        with self._lock:
            self._change(self._get(job_id), why, **changes)

    def write_log(self, job_id: str, text: str) -> None:
        with self._lock, self._log_path(job_id).open("a") as log:
            log.write(text)

    def _change(self, job: dict[str, Any], why: str | None = None, **changes: Any) -> None:
        old_state, old_cpus = job["state"], job["cpus"]
        job.update(changes)
        now = self.clock()
        events = self._events[job["id"]]
        if job["state"] != old_state:
            detail: dict[str, Any] = {"from": old_state, "to": job["state"]}
            if job["state"] == "running":
                detail["cpus"] = list(job["cpus"])
            events.append(JobEvent(job["id"], now, "state", detail))
        elif job["state"] == "running" and job["cpus"] != old_cpus:
            detail = {"from": old_cpus, "to": job["cpus"], **({"why": why} if why else {})}
            events.append(JobEvent(job["id"], now, "allocation", detail))

    def _log_path(self, job_id: str) -> Path:
        if self._log_dir is None:
            # Removed with the fake (or at exit at the latest), so test runs leave nothing in /tmp.
            self._own_log_dir = tempfile.TemporaryDirectory(prefix="qosched-fake-logs-")
            self._log_dir = Path(self._own_log_dir.name)
        job_dir = self._log_dir / job_id  # laid out as the service lays out a job's folder
        job_dir.mkdir(exist_ok=True)
        return job_dir / joblog.JOB_LOG

    def _get(self, job_id: str) -> dict[str, Any]:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise UnknownJobError(job_id) from None


class FakeLocalService(FakeService):
    """Stands in for ``LocalService`` in ``qosched up``: ``open``, ``run(stop)``, ``close``."""

    opened: ClassVar[list[FakeLocalService]] = []

    def __init__(
        self,
        home: Path,
        cpus: tuple[int, ...] | None,
        policy: str,
        tick_s: float = 5.0,
        gpus: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(capacity_cpus=len(cpus) if cpus else 2, gpus=gpus or ())
        self.declared_gpus = gpus
        self.home = home
        self.cpus = cpus
        self.policy = policy
        self.tick_s = tick_s
        self.running = threading.Event()
        self.stopped = False
        self.closed = False
        self.groups = None  # as a real service that could make no cgroup

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        cpus: tuple[int, ...] | None = None,
        policy: str = "qos",
        tick_s: float = 5.0,
        grace_s: float = 30.0,
        gpus: tuple[int, ...] | None = None,
    ) -> FakeLocalService:
        service = cls(home, cpus, policy, tick_s, gpus)
        cls.opened.append(service)
        return service

    def run(self, stop: threading.Event) -> None:
        self.running.set()
        stop.wait()
        self.stopped = True

    def close(self) -> None:
        self.closed = True


@dataclass
class Running:
    home: Path
    service: FakeService
    server: ApiServer
    token: str


@contextlib.contextmanager
def running_service(home: Path, service: FakeService | None = None) -> Iterator[Running]:
    """Serve ``service`` as ``qosched up`` would: token, ``service.json`` with this process's
    pid, and ``service.json`` removed once ``POST /shutdown`` arrives."""
    service = service if service is not None else FakeService(log_dir=home)
    token = ensure_token(home)
    lock = HomeLock(home)  # held as `qosched up` holds it: what tells others a service is up
    lock.acquire()
    server = serve(service, token=token, poll_interval_s=0.01)
    pid = os.getpid()
    write_endpoint(home, Endpoint(server.host, server.port, pid, time.time()))

    def stop_on_request() -> None:
        server.shutdown_requested.wait()
        remove_endpoint(home, pid)
        lock.release()  # last, as `qosched up` does: `qosched down` waits for it

    watcher = threading.Thread(target=stop_on_request, daemon=True)
    watcher.start()
    try:
        yield Running(home, service, server, token)
    finally:
        server.shutdown_requested.set()
        watcher.join()
        server.close()
        remove_endpoint(home, pid)
        lock.release()


def fake_service_module() -> types.ModuleType:
    """A stand-in for ``qosched.backends.local.service`` whose ``LocalService`` is the fake."""
    module = types.ModuleType("qosched.backends.local.service")
    module.LocalService = FakeLocalService  # type: ignore[attr-defined]
    return module


if __name__ == "__main__":
    # `python service_fakes.py up ...`: the qosched command with the fake service, for the
    # tests of `qosched up --detach`, which start it in a process of its own.
    import sys

    from qosched.cli.main import main

    sys.modules["qosched.backends.local.service"] = fake_service_module()
    sys.exit(main(sys.argv[1:]))


def _view(job: dict[str, Any]) -> JobView:
    """What the service returns for a job the fake keeps as JSON: read as a client reads it."""
    return JobView.from_json(copy.deepcopy(job), "the fake service")
