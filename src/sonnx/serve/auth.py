"""Optional API-key check, as ASGI middleware in front of every route but the health probes.

The key may come as ``Authorization: Bearer KEY`` (what KServe/Kubernetes tooling and
``tritonclient``'s ``headers=`` send) or ``X-API-Key: KEY``. It is compared with
:func:`hmac.compare_digest`, whose time does not depend on where the strings differ, so the
key cannot be guessed byte by byte from response times. Health probes stay open because
kubelets and load balancers call them without credentials. The gRPC endpoint checks the same
key in its metadata with :func:`key_matches` (see :mod:`sonnx.serve.grpc_service`).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})


class ApiKeyMiddleware:
    """Answer 401 to HTTP requests that do not carry ``api_key`` (except :data:`OPEN_PATHS`)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        if not api_key:
            raise ValueError("ApiKeyMiddleware needs a non-empty key")
        self.app = app
        self._key = api_key.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "missing or wrong API key"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="sonnx"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        return key_matches(scope["headers"], self._key)


def key_matches(headers: Iterable[tuple[bytes, bytes]], key: bytes) -> bool:
    """Whether ``headers`` (lower-case names; HTTP headers or gRPC metadata) carry ``key`` as
    ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, compared in constant time."""
    supplied = b""
    for name, value in headers:
        if name == b"x-api-key":
            supplied = value
        elif name == b"authorization" and value[:7].lower() == b"bearer ":
            supplied = value[7:].strip()
    return hmac.compare_digest(supplied, key)
