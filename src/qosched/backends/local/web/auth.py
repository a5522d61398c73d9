"""Who may talk to the local service from a browser, and from where.

Called by the API server (``qosched.backends.local.api``) for every request:

- ``host_allowed``: the ``Host`` header must name this machine's loopback interface and the
  service's port. A page on another site that makes its own name resolve to 127.0.0.1 (DNS
  rebinding) sends its own name as ``Host``, so it is refused before anything is read.
- ``Sessions``: ``qosched up`` prints a login URL with a one-time code; opening it trades the
  code for a session: a random secret in an HttpOnly, SameSite=Strict cookie (never the API
  token, which stays with the command-line clients) and a CSRF token that the page reads from
  its own HTML and sends back as ``X-CSRF-Token`` on every call that changes something.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

CSRF_HEADER = "X-CSRF-Token"
LOGIN_PATH = "/login"
#: At most this many login codes wait to be used, and this many sessions live; the oldest go
#: first, so a client asking for codes in a loop cannot grow the service's memory.
MAX_CODES = 32
MAX_SESSIONS = 64
#: A login code works for this long after it is made: it travels in a URL, which ends up in
#: terminals, shell histories and browser histories.
CODE_TTL_S = 10 * 60.0
#: A session ends this long after its sign-in, whatever it does; signing in again is one
#: `qosched web` away.
SESSION_TTL_S = 12 * 3600.0
_SECRET_BYTES = 32


def cookie_name(port: int) -> str:
    """The session cookie's name. Browsers share cookies between the ports of one host, so each
    service (one per home, each on its own port) names its cookie after its port."""
    return f"qosched_session_{port}"


def host_allowed(host_header: str | None, port: int) -> bool:
    """Whether ``Host`` names a loopback address or ``localhost`` with the service's ``port``
    (no port: 80, as HTTP says). A missing header is refused: HTTP/1.1 requires it."""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:port
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return False
        port_text = rest[1:] if rest else ""
    else:
        name, colon, port_text = host.rpartition(":")
        if not colon:
            name, port_text = host, ""
    if port_text:
        if not (port_text.isascii() and port_text.isdecimal()) or len(port_text) > 5:
            return False
        given_port = int(port_text)
    else:
        given_port = 80
    if given_port != port:
        return False
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def origin_allowed(origin: str, port: int) -> bool:
    """Whether an ``Origin`` header is the service's own page: ``http://`` (the service speaks
    plain HTTP, so a page served over any other scheme is another server's) and a host that
    `host_allowed` accepts, with nothing else (browsers send scheme, host and port only)."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:  # a malformed IPv6 literal
        return False
    if parts.scheme != "http" or parts.path or parts.query or parts.fragment:
        return False
    return host_allowed(parts.netloc, port)  # refuses user information too: not a host name


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in browser: ``csrf`` is what it must echo in ``X-CSRF-Token``."""

    csrf: str


class Sessions:
    """One-time login codes and the sessions they open. Thread-safe: the API server's handler
    threads call it at once. Secrets are kept only as SHA-256 digests, compared in constant
    time, so a memory dump or a timing probe does not hand them out. Codes expire
    ``code_ttl_s`` after they are made, sessions ``session_ttl_s`` after sign-in; ``revoke``
    ends them all at once."""

    def __init__(
        self,
        *,
        code_ttl_s: float = CODE_TTL_S,
        session_ttl_s: float = SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._code_ttl_s = code_ttl_s
        self._session_ttl_s = session_ttl_s
        # digest -> when it stops working; insertion order is expiry order (one TTL each).
        self._codes: OrderedDict[bytes, float] = OrderedDict()
        self._sessions: OrderedDict[bytes, tuple[Session, float]] = OrderedDict()

    def new_code(self) -> str:
        """A fresh one-time login code (for the URL ``qosched up`` prints)."""
        code = secrets.token_urlsafe(_SECRET_BYTES)
        with self._lock:
            self._codes[_digest(code)] = self._clock() + self._code_ttl_s
            while len(self._codes) > MAX_CODES:
                self._codes.popitem(last=False)
        return code

    def redeem(self, code: str) -> tuple[str, Session] | None:
        """Trade a login code for a new session (its cookie value and its CSRF token); None when
        the code is unknown, expired or already used. A code works once."""
        with self._lock:
            now = self._clock()
            expires = self._codes.pop(_digest(code), None)
            if expires is None or now >= expires:
                return None
            secret = secrets.token_urlsafe(_SECRET_BYTES)
            session = Session(csrf=secrets.token_urlsafe(_SECRET_BYTES))
            self._sessions[_digest(secret)] = (session, now + self._session_ttl_s)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return secret, session

    def session(self, secret: str | None) -> Session | None:
        """The session a cookie value opens, or None (also once it has expired)."""
        if not secret:
            return None
        with self._lock:
            key = _digest(secret)
            found = self._sessions.get(key)
            if found is None:
                return None
            session, expires = found
            if self._clock() >= expires:
                del self._sessions[key]
                return None
            return session

    def revoke(self) -> tuple[int, int]:
        """End every session and forget every unused code; returns how many of each."""
        with self._lock:
            counts = len(self._codes), len(self._sessions)
            self._codes.clear()
            self._sessions.clear()
        return counts


def csrf_matches(session: Session, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(
        given.encode("utf-8", errors="replace"), session.csrf.encode()
    )


def _digest(secret: str) -> bytes:
    # Looking a digest up in a dict leaks at most how a hash of the secret compares, which tells
    # an attacker nothing about the secret itself.
    return hashlib.sha256(secret.encode("utf-8", errors="replace")).digest()
