"""The bearer token: where it comes from, and the middleware that refuses requests without it.

Checked in middleware, before routing and body parsing, so an unauthenticated request learns
nothing (not whether its body would have parsed, nor whether an item exists): every refusal is
the same 401 with the same one-word reason. The probes, the OpenAPI docs (with their scripts
and styles) and the page itself are open; the page asks for the token and sends it with its own
requests.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any

from shdh.serving.api_docs import ASSETS, PAGES
from shdh.serving.limits import send_json

TOKEN_ENV = "SHDH_SERVE_TOKEN"
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/openapi.json", *PAGES})
# The docs' scripts and styles: a browser loads them with no token, as it loads the docs page.
OPEN_PREFIXES = (ASSETS + "/",)
MIN_TOKEN_CHARS = 16


def read_token(token_file: str | Path | None) -> str | None:
    """The token from `token_file` (one line; surrounding whitespace dropped) or else from the
    SHDH_SERVE_TOKEN environment variable; None when neither is set."""
    if token_file is not None:
        path = Path(token_file)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: cannot read the token file: {exc}") from exc
        return check_token(token, str(path))
    token = os.environ.get(TOKEN_ENV, "").strip()
    return check_token(token, TOKEN_ENV) if token else None


def check_token(token: str, where: str) -> str:
    """A token long enough not to be guessed, in characters an Authorization header can carry."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{where}: the token must be at least {MIN_TOKEN_CHARS} characters")
    if not token.isascii() or any(ch.isspace() or not ch.isprintable() for ch in token):
        raise ValueError(f"{where}: the token must be printable ASCII without spaces")
    return token


def is_open(path: str) -> bool:
    """Whether `path` is served without the token (the probes, the page, the docs)."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def carries_token(authorization: bytes, token: str | None) -> bool:
    """Whether an Authorization header's value is `Bearer <token>` (always true when the
    service runs without a token). compare_digest: the time taken does not tell how much of a
    guess was right."""
    return token is None or hmac.compare_digest(authorization, f"Bearer {token}".encode())


class BearerAuth:
    """ASGI middleware: 401 unless the request carries `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            return await self.app(scope, receive, send)
        if carries_token(dict(scope["headers"]).get(b"authorization", b""), self.token):
            return await self.app(scope, receive, send)
        await send_json(send, 401, "unauthorized", [(b"www-authenticate", b"Bearer")])
