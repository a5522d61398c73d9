"""``qosched up`` prints a login URL for the web page; ``qosched web`` prints a new one."""

from __future__ import annotations

import argparse
import http.client
import re
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import service_fakes
from service_fakes import FakeLocalService, fake_service_module

from qosched.backends.local.home import ENDPOINT_FILE, read_endpoint
from qosched.cli import local
from qosched.cli.main import main

pytestmark = [pytest.mark.process, pytest.mark.network]

WAIT_S = 30.0


def opens(url: str) -> int:
    """The status a browser would get opening ``url``."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}")
        return connection.getresponse().status
    finally:
        connection.close()


def test_up_prints_a_login_url_and_web_prints_fresh_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "qosched.backends.local.service", fake_service_module())
    monkeypatch.setattr(FakeLocalService, "opened", [])
    home = tmp_path / "home"
    thread = threading.Thread(target=main, args=(["up", "--home", str(home)],))
    thread.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not (home / ENDPOINT_FILE).exists():
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.02)
        url = read_endpoint(home).url
        deadline = time.monotonic() + WAIT_S
        while "watch it in a browser" not in (out := capsys.readouterr().out):
            assert time.monotonic() < deadline, "no login URL printed"
            time.sleep(0.02)
        (printed,) = re.findall(r"watch it in a browser: (\S+)", out)
        assert printed.startswith(f"{url}/login?code=")
        assert main(["web", "--home", str(home)]) == 0
        fresh = capsys.readouterr().out.strip()
        assert fresh.startswith(f"{url}/login?code=") and fresh != printed
        assert [opens(printed), opens(fresh), opens(printed)] == [303, 303, 401]
    finally:
        assert main(["down", "--home", str(home)]) == 0
        thread.join(WAIT_S)


def test_up_detach_prints_a_login_url_of_the_background_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = local._service_argv

    def fake_argv(home: Path, args: argparse.Namespace) -> list[str]:
        # The background service runs the fake LocalService (see service_fakes' __main__).
        argv = original(home, args)
        return [argv[0], service_fakes.__file__, *argv[3:]]

    monkeypatch.setattr(local, "_service_argv", fake_argv)
    home = tmp_path / "home"
    assert main(["up", "--detach", "--home", str(home)]) == 0
    try:
        (printed,) = re.findall(r"watch it in a browser: (\S+)", capsys.readouterr().out)
        assert printed.startswith(f"{read_endpoint(home).url}/login?code=")
        assert [opens(printed), opens(printed)] == [303, 401]
    finally:
        assert main(["down", "--home", str(home)]) == 0


def test_web_without_a_service_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["web", "--home", str(tmp_path)]) == 2
    assert "no qosched service is running" in capsys.readouterr().err
