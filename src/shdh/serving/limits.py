"""The service's limits on what one request may ask, and the guard on request body sizes.

The body limit is enforced while the body arrives (an ASGI wrapper around `receive`), not after,
so a client that sends a huge or endless body costs at most the limit in memory; a declared
Content-Length above it is refused before a byte is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What one request may ask. The defaults allow a batch of phone photos (about 5 MiB each
    as base64 JPEG) and keep a decoded image within about 100 MB of RGB pixels."""

    max_body_bytes: int = 32 << 20
    max_batch: int = 64
    max_k: int = 1000
    max_image_side: int = 8192
    max_image_pixels: int = 32_000_000

    def __post_init__(self) -> None:
        for field in ("max_body_bytes", "max_batch", "max_k", "max_image_side", "max_image_pixels"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"limits: {field} must be a positive integer, got {value!r}")


class _TooLarge(Exception):
    pass


async def send_json(send: Any, status: int, detail: str, headers: list | None = None) -> None:
    """A complete JSON error response {"detail": ...}, written straight to ASGI's `send`."""
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, declared or streamed.

    A streamed body (chunked, no Content-Length) is cut off by raising from `receive`; what the
    app answers then is dropped and the 413 sent instead, because a handler may catch the error
    while it reads the body (FastAPI's body parsing turns any error into a 400)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = f"request body over the limit of {self.max_bytes} bytes (--max-body-bytes)"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and not declared.isdigit():
            return await send_json(send, 400, "Content-Length is not a number")
        if declared is not None and int(declared) > self.max_bytes:
            return await send_json(send, 413, too_large)
        guard = _StreamGuard(receive, send, self.max_bytes)
        try:
            await self.app(scope, guard.receive, guard.send)
        except Exception:
            if not guard.over:
                raise
        if guard.over and not guard.started:
            await send_json(send, 413, too_large)


class _StreamGuard:
    """`receive` and `send` of one request: counts the body's bytes as they arrive, and once
    they pass the limit holds back the app's own answer."""

    def __init__(self, receive: Any, send: Any, max_bytes: int) -> None:
        self._receive, self._send, self.max_bytes = receive, send, max_bytes
        self.received = 0
        self.over = False
        self.started = False

    async def receive(self) -> dict:
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.max_bytes:
                self.over = True
                raise _TooLarge
        return message

    async def send(self, message: dict) -> None:
        if self.over and not self.started:
            return  # the app's answer to a body it could not read whole: the 413 replaces it
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)
