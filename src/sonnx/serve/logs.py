"""Structured logs: one JSON object per line, and an access-log line per HTTP request.

JSON lines are what log shippers (Fluent Bit, Vector, Loki, Cloud Logging) parse without
configuration. Fields beyond the message go in ``extra={"fields": {...}}``. The access log is
an ASGI middleware rather than uvicorn's ``access_log``, so it can record durations and byte
counts and use the same format as every other line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_log = logging.getLogger("sonnx.serve.access")


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "info") -> None:
    """Send every logger (uvicorn's included) to stderr as JSON lines at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


class AccessLogMiddleware:
    """Log method, path, status, duration and body sizes of every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = {"status": 500, "in": 0, "out": 0}

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            client = scope.get("client")
            access_log.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                seen["status"],
                extra={
                    "fields": {
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": seen["status"],
                        "duration_ms": round((time.perf_counter() - start) * 1e3, 3),
                        "request_bytes": seen["in"],
                        "response_bytes": seen["out"],
                        "client": f"{client[0]}:{client[1]}" if client else None,
                    }
                },
            )
