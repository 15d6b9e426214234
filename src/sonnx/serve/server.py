"""Running the app: bind the socket, start uvicorn, stop gracefully on SIGTERM.

uvicorn handles SIGTERM/SIGINT by refusing new connections, letting in-flight requests finish
(up to ``shutdown_timeout``) and running the app's shutdown, which drains every model's queue.
It then re-raises the signal so that the process dies of it as if uvicorn had not caught it.
For a server a deliberate stop is a success, so :func:`run_server` installs handlers that
absorb that re-raised signal and returns 0: supervisors (Kubernetes, systemd) then see a
clean exit rather than a crash.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from sonnx import autograd
from sonnx.serve.app import create_app
from sonnx.serve.errors import ConfigError
from sonnx.serve.logs import configure_logging

if TYPE_CHECKING:
    from sonnx.serve.grpc_service import GrpcEndpoint

log = logging.getLogger("sonnx.serve")


def run_server(
    model_repository: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    grpc_port: int | None = None,
    api_key: str | None = None,
    max_request_mb: float = 64.0,
    shutdown_timeout: float = 30.0,
    log_level: str = "info",
    strict_readiness: bool = True,
) -> int:
    """Serve ``model_repository`` until SIGTERM or SIGINT; the exit code (0 after a graceful
    stop). ``port`` 0 picks a free port, logged in the ``listening`` line. ``grpc_port`` (None:
    no gRPC) serves the same models over gRPC too, logged in the ``grpc_listening`` line.
    ``strict_readiness`` (Triton's) answers ready only while every model serves."""
    autograd.training = False  # serving never records gradients
    limit = int(max_request_mb * 2**20)
    services = []
    if grpc_port is not None:
        services.append(_grpc_endpoint(host, grpc_port, api_key, limit, shutdown_timeout))
    app = create_app(
        Path(model_repository),
        api_key=api_key,
        max_request_bytes=limit,
        services=services,
        strict_readiness=strict_readiness,
    )
    sock = bind_socket(host, port)
    configure_logging(log_level)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,  # sonnx.serve.logs.AccessLogMiddleware writes JSON access lines
        timeout_graceful_shutdown=shutdown_timeout,
        log_level=log_level,
        lifespan="on",
    )
    bound_host, bound_port = sock.getsockname()[:2]
    log.info(
        "listening on http://%s:%d",
        bound_host,
        bound_port,
        extra={"fields": {"event": "listening", "host": bound_host, "port": bound_port}},
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    _Server(config, on_exit=[s.request_stop for s in services]).run(sockets=[sock])
    log.info("stopped", extra={"fields": {"event": "stopped"}})
    return 0


def _grpc_endpoint(
    host: str, port: int, api_key: str | None, limit: int, grace_s: float
) -> GrpcEndpoint:
    """The gRPC endpoint, imported only when asked for; a taken port is reported now, as a
    :class:`ConfigError`, rather than as a failed start-up once uvicorn runs."""
    try:
        from sonnx.serve.grpc_service import GrpcEndpoint
    except ImportError as e:
        raise ConfigError(
            f"--grpc-port needs grpcio and tritonclient[grpc] (pip install sonnx[serve]): {e}"
        ) from None
    if port != 0:
        bind_socket(host, port).close()
    return GrpcEndpoint(host, port, api_key=api_key, max_request_bytes=limit, grace_s=grace_s)


class _Server(uvicorn.Server):
    """uvicorn, also telling the other endpoints when a stop signal arrives, so that they
    refuse new calls and drain while uvicorn drains HTTP (the app's shutdown then waits)."""

    def __init__(self, config: uvicorn.Config, on_exit: list[Callable[[], None]]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        for callback in self._on_exit:
            callback()


def _stopped(signum: int, frame: object) -> None:
    """Absorbs the signal uvicorn re-raises after its graceful shutdown (see module doc)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), or a :class:`ConfigError`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on sockets whose proto says TCP, and
    # without it Nagle holds a response body behind its headers until the delayed ACK (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    # Listening now (not when uvicorn starts) makes the "listening" log line true: clients that
    # connect while the app starts up wait in the backlog instead of being refused.
    sock.listen(2048)
    return sock
