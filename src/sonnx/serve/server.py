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
from pathlib import Path

import uvicorn

from sonnx import autograd
from sonnx.serve.app import create_app
from sonnx.serve.errors import ConfigError
from sonnx.serve.logs import configure_logging

log = logging.getLogger("sonnx.serve")


def run_server(
    model_repository: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_request_mb: float = 64.0,
    shutdown_timeout: float = 30.0,
    log_level: str = "info",
) -> int:
    """Serve ``model_repository`` until SIGTERM or SIGINT; the exit code (0 after a graceful
    stop). ``port`` 0 picks a free port, logged in the ``listening`` line."""
    autograd.training = False  # serving never records gradients
    app = create_app(
        Path(model_repository), api_key=api_key, max_request_bytes=int(max_request_mb * 2**20)
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
    uvicorn.Server(config).run(sockets=[sock])
    log.info("stopped", extra={"fields": {"event": "stopped"}})
    return 0


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
