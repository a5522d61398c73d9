"""A client of the local service's HTTP API (``qosched.backends.local.api``), one method a route.

Errors come back as the exceptions the service raised: ``InputError`` (400, with the same
source, line and field), ``UnknownJobError`` (404 on a job route); anything else is a
``QoschedError`` carrying the server's message. An answer that is not what the API promises
(a job without its ``state``, a count that is not one) is a ``QoschedError`` naming the field.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from qosched.backends.local.api import (
    LOG_COMPLETE_HEADER,
    LOG_OFFSET_HEADER,
    SOURCE_HEADER,
    LogChunk,
    ServiceStatus,
)
from qosched.backends.local.home import read_endpoint, read_token
from qosched.backends.local.jobview import JobDetail, JobView
from qosched.backends.local.store import UnknownJobError
from qosched.backends.local.verdict import Verdict
from qosched.core.bounds import check_count
from qosched.core.errors import InputError, QoschedError

# The service is on this machine; a proxy from the environment (http_proxy) must not see it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

_T = TypeVar("_T")


class Client:
    """Talks to the service at ``url`` with ``token``; mirrors the ``Service`` protocol."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    @classmethod
    def from_home(cls, home: Path, *, timeout_s: float = 30.0) -> Client:
        """The client of the service running with ``home`` (from its ``service.json`` and token)."""
        endpoint = read_endpoint(home)
        return cls(endpoint.url, read_token(home), timeout_s=timeout_s)

    # --- routes ----------------------------------------------------------------------------------

    def submit(self, spec_text: str, source: str) -> JobView:
        return self._typed(JobView.from_json, "POST", "/jobs", **_spec_body(spec_text, source))

    def dry_run(self, spec_text: str, source: str) -> Verdict:
        return self._typed(
            Verdict.from_json, "POST", "/jobs/dry-run", **_spec_body(spec_text, source)
        )

    def jobs(self) -> list[JobView]:
        def read(data: Any, source: str) -> list[JobView]:
            if not isinstance(data, list):
                raise InputError("expected a list of jobs", source=source)
            return [JobView.from_json(job, f"{source}: job {i}") for i, job in enumerate(data)]

        return self._typed(read, "GET", "/jobs")

    def job(self, job_id: str) -> JobView:
        return self._typed(JobView.from_json, "GET", _job_path(job_id), job_id=job_id)

    def job_detail(self, job_id: str) -> JobDetail:
        path = _job_path(job_id) + "/detail"
        return self._typed(JobDetail.from_json, "GET", path, job_id=job_id)

    def logs(self, job_id: str, tail_lines: int | None = None, limit: int | None = None) -> str:
        if tail_lines is not None and tail_lines < 0:
            raise InputError(f"expected a whole number >= 0, got {tail_lines}", field="tail")
        path = _job_path(job_id) + "/logs"
        if tail_lines is not None:
            path += f"?tail={tail_lines}"
            if limit is not None:
                path += f"&limit={check_count(limit, field='limit', minimum=1)}"
        return self._request("GET", path, job_id=job_id).decode("utf-8", errors="replace")

    def read_log(self, job_id: str, offset: int, limit: int | None = None) -> LogChunk:
        """The job's output from byte ``offset`` on (see ``GET /jobs/{id}/logs?offset=``)."""
        path = f"{_job_path(job_id)}/logs?offset={check_count(offset, field='offset')}"
        if limit is not None:
            path += f"&limit={check_count(limit, field='limit', minimum=1)}"
        data, headers = self._exchange("GET", path, job_id=job_id)
        source = f"GET {self.url}{path}"
        try:
            next_offset = check_count(int(headers.get(LOG_OFFSET_HEADER, "")), field="offset")
        except ValueError as exc:  # InputError is a ValueError too
            raise QoschedError(f"{source}: bad or missing {LOG_OFFSET_HEADER}: {exc}") from exc
        # Later than asked when the bytes asked for were rotated away (see joblog).
        if next_offset < offset + len(data):
            raise QoschedError(
                f"{source}: {len(data)} bytes from {offset} cannot end at {next_offset}"
            )
        complete = headers.get(LOG_COMPLETE_HEADER, "")
        if complete not in ("true", "false"):
            raise QoschedError(f"{source}: bad or missing {LOG_COMPLETE_HEADER}: {complete!r}")
        return LogChunk(data, next_offset, complete == "true")

    def cancel(self, job_id: str) -> JobView:
        return self._typed(JobView.from_json, "DELETE", _job_path(job_id), job_id=job_id)

    def status(self) -> ServiceStatus:
        try:
            return ServiceStatus.from_json(self._json("GET", "/status"), f"{self.url}/status")
        except InputError as exc:
            raise QoschedError(f"the service's status cannot be read: {exc}") from exc

    def metrics_text(self) -> str:
        """``GET /metrics`` as served: Prometheus text."""
        return self._request("GET", "/metrics", auth=False).decode("utf-8")

    def healthz(self) -> dict[str, Any]:
        return self._json("GET", "/healthz", auth=False)

    def login_url(self) -> str:
        """A URL that signs a browser in to the service's web page, once (a fresh code)."""
        answer = self._json("POST", "/login-codes", body=b"")
        code = answer.get("code") if isinstance(answer, dict) else None
        if not isinstance(code, str) or not code or len(code) > 256:
            raise QoschedError(f"POST {self.url}/login-codes: the answer has no login code")
        return f"{self.url}/login?code={quote(code, safe='')}"

    def revoke_sessions(self) -> tuple[int, int]:
        """End every web session and unused login code (``DELETE /sessions``); returns how many
        codes and sessions were ended."""
        answer = self._json("DELETE", "/sessions")
        counts = []
        for key in ("codes", "sessions"):
            value = answer.get(key) if isinstance(answer, dict) else None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise QoschedError(f"DELETE {self.url}/sessions: the answer has no {key} count")
            counts.append(value)
        return counts[0], counts[1]

    def shutdown(self) -> None:
        """Ask the service to stop; returns once it has agreed, not once it has stopped."""
        self._request("POST", "/shutdown", body=b"")

    # --- mechanics -------------------------------------------------------------------------------

    def _typed(self, read: Callable[[Any, str], _T], method: str, path: str, **kwargs: Any) -> _T:
        """The answer's JSON read by ``read(data, source)``; its ``InputError`` (the answer is
        not what the API promises) becomes the server's fault, a ``QoschedError``."""
        data = self._json(method, path, **kwargs)  # a 400's InputError is the caller's
        try:
            return read(data, f"{method} {self.url}{path}")
        except InputError as exc:
            raise QoschedError(f"the service's answer cannot be read: {exc}") from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        data = self._request(method, path, **kwargs)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise QoschedError(f"{method} {self.url}{path}: the answer is not JSON: {exc}") from exc

    def _request(self, method: str, path: str, **kwargs: Any) -> bytes:
        return self._exchange(method, path, **kwargs)[0]

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        job_id: str | None = None,
        auth: bool = True,
    ) -> tuple[bytes, Mapping[str, str]]:
        """One request; the answer's body and headers."""
        request = urllib.request.Request(
            self.url + path, data=body, method=method, headers=dict(headers or {})
        )
        if auth:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                return response.read(), response.headers
        except urllib.error.HTTPError as exc:
            with exc:
                raise self._error(exc.code, exc.read(), job_id) from None
        except urllib.error.URLError as exc:
            reason = exc.reason.strerror if isinstance(exc.reason, OSError) else exc.reason
            raise QoschedError(
                f"cannot reach the qosched service at {self.url}: {reason or exc.reason}"
            ) from exc
        except TimeoutError as exc:
            raise QoschedError(
                f"{method} {self.url}{path}: no answer within {self.timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise QoschedError(f"{method} {self.url}{path}: {exc}") from exc

    def _error(self, status: int, data: bytes, job_id: str | None) -> QoschedError:
        try:
            payload = json.loads(data)
            message = str(payload["error"])
        except (ValueError, KeyError, TypeError):
            payload = {}
            message = data.decode("utf-8", errors="replace").strip() or f"HTTP {status}"
        if status == 400:
            return InputError(
                str(payload.get("reason") or message),
                source=payload.get("source"),
                line=payload.get("line"),
                field=payload.get("field"),
            )
        if status == 404 and job_id is not None and "job" in payload:
            return UnknownJobError(job_id)
        if status == 401:
            return QoschedError(
                f"the service at {self.url} refused the token (HTTP 401): {message}. "
                "Was it started with another --home?"
            )
        return QoschedError(f"the service at {self.url} answered HTTP {status}: {message}")


def _spec_body(spec_text: str, source: str) -> dict[str, Any]:
    """The body and headers of a request that sends a spec."""
    headers = {
        "Content-Type": "application/yaml; charset=utf-8",
        SOURCE_HEADER: quote(source, safe="/<>:. -_~"),
    }
    return {"body": spec_text.encode("utf-8"), "headers": headers}


def _job_path(job_id: str) -> str:
    if not job_id:
        raise InputError("a job id must not be empty", field="job")
    return "/jobs/" + quote(job_id, safe="")
