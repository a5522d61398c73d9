"""The web page's HTML and static files, read from the package (``static/``, ``templates/``)
once and kept: the service serves them as they were installed, with no build step."""

from __future__ import annotations

import functools
import html
from importlib import resources

#: Sent with every HTML reply: only this origin's own script, styles and calls; no inline code,
#: no framing (so no click-jacking of the cancel button).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def index(csrf: str) -> str:
    """The dashboard for a signed-in session; ``csrf`` goes in a meta tag its script reads."""
    return _template("index.html").replace("{{csrf}}", html.escape(csrf, quote=True))


def login_needed(used: bool = False) -> str:
    """The 401 page: how to sign in. ``used``: a login code was given but is unknown or spent."""
    why = (
        "This login link was already used or is not one this service gave out: each works once."
        if used
        else "This page needs a sign-in."
    )
    return _template("login.html").replace("{{why}}", html.escape(why))


def static_file(name: str) -> tuple[bytes, str] | None:
    """A file of ``static/`` and its content type; None for any other name (no paths: the
    name is looked up among the files shipped, never joined onto a folder)."""
    return _static_files().get(name)


@functools.cache
def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files(__package__) / "static"
    found: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return found


@functools.cache
def _template(name: str) -> str:
    return (resources.files(__package__) / "templates" / name).read_text(encoding="utf-8")
