"""The web page's sign-in: the Host check, one-time login codes and sessions."""

from __future__ import annotations

import pytest

from qosched.backends.local.web import auth

PORT = 8123

HOSTS = [
    ("127.0.0.1:8123", True),
    ("127.9.9.9:8123", True),  # all of 127/8 is loopback
    ("localhost:8123", True),
    ("LOCALHOST:8123", True),
    ("localhost.:8123", True),
    ("[::1]:8123", True),
    ("127.0.0.1:8124", False),  # another port: another service
    ("127.0.0.1", False),  # no port means 80
    ("evil.example:8123", False),  # DNS rebinding: the attacker's name
    ("localhost.evil.example:8123", False),
    ("10.0.0.1:8123", False),
    ("[::2]:8123", False),
    ("[::1]8123", False),
    ("[::1:8123", False),
    ("127.0.0.1:+8123", False),
    ("127.0.0.1:08123x", False),
    ("127.0.0.1:999999", False),
    ("", False),
    (None, False),
]


@pytest.mark.parametrize(("host", "allowed"), HOSTS, ids=[repr(h) for h, _ in HOSTS])
def test_host_allowed_accepts_only_loopback_names_with_the_service_port(
    host: str | None, allowed: bool
) -> None:
    assert auth.host_allowed(host, PORT) is allowed


def test_host_without_port_matches_port_80() -> None:
    assert auth.host_allowed("localhost", 80)


ORIGINS = [
    ("http://127.0.0.1:8123", True),
    ("http://localhost:8123", True),
    ("http://[::1]:8123", True),
    ("https://127.0.0.1:8123", False),  # the service speaks plain HTTP: another server's page
    ("ws://127.0.0.1:8123", False),
    ("file://127.0.0.1:8123", False),
    ("//127.0.0.1:8123", False),
    ("127.0.0.1:8123", False),
    ("http://user@127.0.0.1:8123", False),
    ("http://127.0.0.1:8123/page", False),
    ("http://127.0.0.1:8123?x", False),
    ("http://[::1:8123", False),
    ("http://evil.example:8123", False),
    ("http://127.0.0.1:8124", False),
    ("null", False),
    ("", False),
]


@pytest.mark.parametrize(("origin", "allowed"), ORIGINS, ids=[repr(o) for o, _ in ORIGINS])
def test_origin_allowed_only_for_the_services_own_http_page(origin: str, allowed: bool) -> None:
    assert auth.origin_allowed(origin, PORT) is allowed


def test_a_login_code_opens_one_session_only_once() -> None:
    sessions = auth.Sessions()
    code = sessions.new_code()
    redeemed = sessions.redeem(code)
    assert redeemed is not None
    secret, session = redeemed
    assert sessions.session(secret) == session
    assert sessions.redeem(code) is None


def test_unknown_codes_and_cookies_open_nothing() -> None:
    sessions = auth.Sessions()
    sessions.new_code()
    assert sessions.redeem("not-a-code") is None
    assert sessions.session("not-a-session") is None
    assert sessions.session(None) is None
    assert sessions.session("") is None


def test_the_session_secret_is_neither_the_code_nor_its_csrf_token() -> None:
    sessions = auth.Sessions()
    code = sessions.new_code()
    secret, session = sessions.redeem(code) or ("", auth.Session(""))
    assert len({code, secret, session.csrf}) == 3
    assert sessions.session(code) is None
    assert sessions.session(session.csrf) is None


def test_the_oldest_codes_expire_past_the_limit() -> None:
    sessions = auth.Sessions()
    codes = [sessions.new_code() for _ in range(auth.MAX_CODES + 1)]
    assert sessions.redeem(codes[0]) is None
    assert sessions.redeem(codes[1]) is not None
    assert sessions.redeem(codes[-1]) is not None


def test_the_oldest_sessions_end_past_the_limit() -> None:
    sessions = auth.Sessions()
    secrets = []
    for _ in range(auth.MAX_SESSIONS + 1):
        redeemed = sessions.redeem(sessions.new_code())
        assert redeemed is not None
        secrets.append(redeemed[0])
    assert sessions.session(secrets[0]) is None
    assert sessions.session(secrets[1]) is not None


CSRF = [("right", True), ("wrong", False), ("", False), (None, False), ("right ", False)]


@pytest.mark.parametrize(("given", "matches"), CSRF, ids=[repr(g) for g, _ in CSRF])
def test_csrf_matches_only_the_session_token(given: str | None, matches: bool) -> None:
    assert auth.csrf_matches(auth.Session(csrf="right"), given) is matches


def test_each_port_has_its_own_cookie() -> None:
    assert auth.cookie_name(8123) != auth.cookie_name(8124)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_login_code_expires_after_its_ttl() -> None:
    clock = FakeClock()
    sessions = auth.Sessions(code_ttl_s=600.0, clock=clock)
    fresh, stale = sessions.new_code(), sessions.new_code()
    clock.now += 599.0
    assert sessions.redeem(fresh) is not None  # one second left
    clock.now += 1.0
    assert sessions.redeem(stale) is None  # exactly 600 s old: gone


def test_the_default_code_ttl_is_minutes_and_the_session_ttl_hours() -> None:
    assert 60 <= auth.CODE_TTL_S <= 30 * 60
    assert 3600 <= auth.SESSION_TTL_S <= 24 * 3600
    clock = FakeClock()
    sessions = auth.Sessions(clock=clock)
    code = sessions.new_code()
    clock.now += 27 * 60  # the reproduction: a code 27 minutes old
    assert sessions.redeem(code) is None


def test_a_session_ends_after_its_ttl_whatever_it_does() -> None:
    clock = FakeClock()
    sessions = auth.Sessions(session_ttl_s=3600.0, clock=clock)
    redeemed = sessions.redeem(sessions.new_code())
    assert redeemed is not None
    secret, session = redeemed
    for _ in range(59):  # used every minute: use does not extend it
        clock.now += 60.0
        assert sessions.session(secret) == session
    clock.now += 60.0
    assert sessions.session(secret) is None


def test_revoke_ends_every_session_and_code() -> None:
    sessions = auth.Sessions()
    unused = sessions.new_code()
    opened = [sessions.redeem(sessions.new_code()) for _ in range(3)]
    assert sessions.revoke() == (1, 3)
    assert sessions.redeem(unused) is None
    assert all(sessions.session(secret) is None for secret, _ in opened if secret)
    assert sessions.revoke() == (0, 0)
    assert sessions.redeem(sessions.new_code()) is not None  # signing in again works
