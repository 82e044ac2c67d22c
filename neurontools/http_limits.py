"""Size limits on HTTP requests, for the daemon's API and neuron-exporter (docs/fuzzing.md).

A pure ASGI middleware (no framework import, so a rank process that only needs the numbers stays
light). Before the application sees a request:

* the target (path plus query string) longer than ``max_target`` bytes: **414** ``{"error": ...}``;
* a ``Content-Length`` above ``max_body``: **413** at once, the body is not read;
* a body sent without a length (chunked) is counted as it arrives and refused with **413** as
  soon as it passes ``max_body``; a malformed ``Content-Length``: **400**.

A body within the limit is buffered here and handed to the application unchanged. What the HTTP
parser itself refuses first (uvicorn's h11 stops at 16 KiB of request line and headers) never
reaches this middleware and gets the server's own plain 400.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

# the biggest legitimate bodies are a replaying rank's batches, about 1 KB per execution; the rank
# splits a step into posts of at most REPLAY_BATCH_BYTES (emulator/parallel/replay.py)
MAX_BODY_BYTES = 1 << 20
REPLAY_BATCH_BYTES = MAX_BODY_BYTES // 2
# the longest legitimate target is a few dozen bytes (/v1/snapshot?latencies_since=..., /api/v1/history?...)
MAX_TARGET_BYTES = 8 << 10

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_json_error(send: Send, status: int, message: str) -> None:
    """A complete ``{"error": message}`` response (the error shape of both APIs)."""
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | str | None:
    """The declared body length, None when there is none, or the raw text when it is malformed."""
    for key, value in scope.get("headers") or ():
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            if not (text.isascii() and text.isdigit()):
                return text
            return int(text) if len(text) <= 18 else 10**18  # more digits: larger than any limit
    return None


class RequestLimits:
    """Refuses over-long targets and over-large bodies with a JSON 4xx before the app runs."""

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES, max_target: int = MAX_TARGET_BYTES) -> None:
        self.app = app
        self.max_body = max_body
        self.max_target = max_target

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        target = len(scope.get("raw_path") or scope.get("path", "").encode()) + len(scope.get("query_string") or b"")
        if target > self.max_target:
            await send_json_error(send, 414, f"request target longer than {self.max_target} bytes")
            return
        declared = _content_length(scope)
        if isinstance(declared, str):
            await send_json_error(send, 400, f"invalid Content-Length header {declared[:40]!r}")
            return
        if declared is not None and declared > self.max_body:
            await send_json_error(send, 413, f"request body of {declared} bytes is larger than {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await send_json_error(send, 413, f"request body larger than {self.max_body} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the buffered body once, then what the client sends (disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
