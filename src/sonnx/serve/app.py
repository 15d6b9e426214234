"""The HTTP app: the Open Inference Protocol (KServe v2) routes over a model repository.

Why Starlette and not FastAPI: FastAPI's value is request models validated by pydantic and the
OpenAPI schema generated from them. Neither helps here. A v2 request is a JSON header plus raw
tensor bytes whose layout is only known once the header is read, and whose validation is about
the *model* (datatypes, shapes, batch sizes), which :mod:`sonnx.serve.codec` and
:mod:`sonnx.serve.signature` do in one pass over NumPy arrays; pydantic would parse every
element of a large JSON tensor into Python objects a second time, on the hot path, and add a
dependency and two layers (dependency injection, response-model serialisation) between the
socket and the model. Starlette gives routing, streaming request bodies (for the size limit)
and lifespan hooks, which is all the server needs.

Every handler turns exceptions into ``{"error": message}`` responses: :class:`ServeError` with
its status, any other :class:`~sonnx.errors.SonnxError` as 400, anything else as 500 (logged
with its traceback), so no request can take the process down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sonnx.errors import SonnxError
from sonnx.serve import codec
from sonnx.serve.auth import ApiKeyMiddleware
from sonnx.serve.datatypes import datatype_of_array
from sonnx.serve.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    ServeError,
    UnsupportedError,
)
from sonnx.serve.generate_api import GenerateApi
from sonnx.serve.logs import AccessLogMiddleware
from sonnx.serve.metrics import UNKNOWN_MODEL, ServeMetrics
from sonnx.serve.repository import ModelRepository

log = logging.getLogger("sonnx.serve")
EXTENSIONS = ["binary_tensor_data", "model_repository"]
Handler = Callable[[Request], Awaitable[Response]]


class Service(Protocol):
    """Another endpoint over the app's repository and metrics (see :mod:`sonnx.serve.grpc`)."""

    async def start(self, repository: ModelRepository, metrics: ServeMetrics) -> None: ...

    async def stop(self) -> None: ...


def create_app(
    model_repository: Path,
    *,
    api_key: str | None = None,
    max_request_bytes: int = 64 * 2**20,
    services: Sequence[Service] = (),
    strict_readiness: bool = True,
) -> Starlette:
    """A Starlette app serving ``model_repository``; the models load in the background once
    the app starts (``/v2/health/ready`` turns 200 when they have, and with
    ``strict_readiness`` only while every model serves). ``services`` (the gRPC endpoint)
    start with the app over the same repository and stop before it closes."""
    metrics = ServeMetrics()
    repository = ModelRepository(Path(model_repository), metrics, strict_readiness=strict_readiness)
    api = _Api(repository, metrics, max_request_bytes)
    generation = GenerateApi(repository, metrics, lambda r: read_body(r, max_request_bytes))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loading = asyncio.create_task(_load_all(repository))
        for service in services:
            await service.start(repository, metrics)
        yield
        # Other endpoints finish their in-flight requests while the models still serve them.
        await asyncio.gather(*(service.stop() for service in services), generation.close())
        loading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loading
        await repository.close()

    middleware = [Middleware(AccessLogMiddleware)]
    if api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=api_key))
    app = Starlette(
        routes=api.routes() + generation.routes(_guarded),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception},
    )
    app.state.repository = repository
    app.state.metrics = metrics
    app.state.generation = generation
    return app


async def _load_all(repository: ModelRepository) -> None:
    if not repository.on_disk():
        log.warning(
            "the model repository %s holds no model directory (<model>/<version>/model.onnx); "
            "the server is ready but has nothing to serve",
            repository.root,
            extra={"fields": {"event": "empty_repository", "root": str(repository.root)}},
        )
    await repository.load_all()
    log.info(
        "ready" if repository.ready else "started with unavailable models",
        extra={"fields": {"event": "models_loaded", "models": repository.index()}},
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route, wrong method) as KServe ``{"error": ...}``."""
    if not isinstance(exc, HTTPException):
        return error_response(exc)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def error_response(exc: BaseException) -> JSONResponse:
    """The JSON error response for an exception raised while handling a request."""
    if isinstance(exc, ServeError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=exc.headers)
    if isinstance(exc, SonnxError):
        return JSONResponse({"error": str(exc)}, status_code=400)
    log.error("internal error", exc_info=exc)
    return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)


def _guarded(handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as e:
            return error_response(e)

    return guarded


async def read_body(request: Request, limit: int) -> bytearray:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes:
    from ``Content-Length`` before reading, or while streaming a chunked body."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(
            f"the request body of {int(declared)} bytes exceeds the server's limit of {limit} "
            "bytes (sonnx serve --max-request-mb)"
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError(
                f"the request body exceeds the server's limit of {limit} bytes "
                "(sonnx serve --max-request-mb)"
            )
    return body


class _Api:
    """The route handlers, sharing the repository, metrics and body limit."""

    def __init__(self, repository: ModelRepository, metrics: ServeMetrics, limit: int) -> None:
        self.repository = repository
        self.metrics = metrics
        self.limit = limit

    def routes(self) -> list[Route]:
        model = "/v2/models/{name}"
        version = "/v2/models/{name}/versions/{version}"
        get = [
            ("/v2/health/live", self.live),
            ("/v2/health/ready", self.ready),
            ("/v2", self.server_metadata),
            (model, self.model_metadata),
            (version, self.model_metadata),
            (model + "/ready", self.model_ready),
            (version + "/ready", self.model_ready),
            ("/metrics", self.prometheus),
        ]
        post = [
            (model + "/infer", self.infer),
            (version + "/infer", self.infer),
            ("/v2/repository/index", self.repository_index),
            ("/v2/repository/models/{name}/load", self.load),
            ("/v2/repository/models/{name}/unload", self.unload),
        ]
        return [Route(p, _guarded(h), methods=["GET"]) for p, h in get] + [
            Route(p, _guarded(h), methods=["POST"]) for p, h in post
        ]

    # ---- health and metadata ------------------------------------------------------------
    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        ready = self.repository.ready
        body: dict[str, Any] = {"ready": ready}
        if not ready and self.repository.loaded_all:
            body["unavailable"] = self.repository.unavailable()
        return JSONResponse(body, status_code=200 if ready else 503)

    async def server_metadata(self, request: Request) -> Response:
        return JSONResponse({"name": "sonnx", "version": _version(), "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request) -> Response:
        name = request.path_params["name"]
        served = self.repository.get(name, request.path_params.get("version"))
        return JSONResponse(
            {
                "name": name,
                "versions": self.repository.versions(name),
                "platform": "sonnx_onnx",
                **served.signature.metadata(),
            }
        )

    async def model_ready(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            self.repository.get(name, request.path_params.get("version"))
        except InvalidRequestError as e:  # known but failed to load: not ready
            return JSONResponse({"name": name, "ready": False, "error": str(e)}, 503)
        return JSONResponse({"name": name, "ready": True})

    async def prometheus(self, request: Request) -> Response:
        body, content_type = self.metrics.render()
        return Response(body, headers={"Content-Type": content_type})

    # ---- inference ----------------------------------------------------------------------
    async def infer(self, request: Request) -> Response:
        start = time.perf_counter()
        name = request.path_params["name"]
        label = name if self.repository.known(name) else UNKNOWN_MODEL
        record = self.metrics.request(label, "http")
        try:
            response = await self._infer(request, name, start)
        except Exception as e:
            response = error_response(e)
        except BaseException:
            record.done("499")  # cancelled: the client went away (nginx's code for it)
            raise
        record.done(None if response.status_code == 200 else str(response.status_code))
        return response

    async def _infer(self, request: Request, name: str, start: float) -> Response:
        served = self.repository.get(name, request.path_params.get("version"))
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding != "identity":
            raise UnsupportedError(
                f"Content-Encoding {encoding!r} is not supported; send the body uncompressed"
            )
        header_length = _header_length(request.headers.get("inference-header-content-length"))
        body = await read_body(request, self.limit)
        signature = served.signature

        def decode() -> tuple[codec.InferRequest, dict[str, Any], list[codec.RequestedOutput]]:
            req = codec.decode_request(body, header_length)
            arrays = signature.check_inputs(req.inputs)
            return req, arrays, signature.check_outputs(req.outputs, req.binary_output)

        slow = _slow_to_decode(body, header_length)
        req, arrays, wanted = await asyncio.to_thread(decode) if slow else decode()
        results = await served.infer(arrays, req.timeout_s, start)

        def encode() -> tuple[bytes, dict[str, str]]:
            tensors = [
                codec.ResponseTensor(
                    w.name,
                    datatype_of_array(results[w.name], w.name),
                    results[w.name],
                    w.binary,
                )
                for w in wanted
            ]
            return codec.encode_response(name, str(served.version), req.id, tensors)

        big = sum(results[w.name].nbytes for w in wanted) > codec.OFFLOAD_BYTES
        content, headers = await asyncio.to_thread(encode) if big else encode()
        return Response(content, headers=headers)

    # ---- repository ---------------------------------------------------------------------
    async def repository_index(self, request: Request) -> Response:
        options = await self._json_body(request)
        ready = options.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidRequestError(f"'ready' must be true or false, received {ready!r}")
        return JSONResponse(self.repository.index(ready_only=ready))

    async def load(self, request: Request) -> Response:
        name = request.path_params["name"]
        options = await self._json_body(request)
        if options.get("parameters"):
            raise UnsupportedError(
                "load parameters (config or file overrides) are not supported; edit the "
                f"model's config.json and files in the repository, received "
                f"{sorted(options['parameters'])}"
            )
        await self.repository.load(name, strict=True)
        return JSONResponse({})

    async def unload(self, request: Request) -> Response:
        await self._json_body(request)
        await self.repository.unload(request.path_params["name"])
        return JSONResponse({})

    async def _json_body(self, request: Request) -> dict[str, Any]:
        body = await read_body(request, self.limit)
        if not body.strip():
            return {}
        try:
            value = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidRequestError(f"the request body is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise InvalidRequestError(
                f"the request body must be a JSON object, received {body[:60]!r}"
            )
        return value


def _slow_to_decode(body: bytearray, header_length: int | None) -> bool:
    """Whether decoding ``body`` is worth a worker thread: JSON above ``codec.OFFLOAD_BYTES`` is
    parsed value by value, and so are binary BYTES elements; other binary tensors are wrapped
    without reading them, so a large image sent as binary is decoded on the event loop rather
    than paying two thread hand-offs per request."""
    json_size = len(body) if header_length is None else header_length
    if json_size > codec.OFFLOAD_BYTES:
        return True
    return len(body) > codec.OFFLOAD_BYTES and b'"BYTES"' in body[:json_size]


def _header_length(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.strip().isdigit():
        raise InvalidRequestError(
            f"Inference-Header-Content-Length must be a non-negative integer, received {value!r}"
        )
    return int(value)


def _version() -> str:
    try:
        return metadata.version("sonnx")
    except metadata.PackageNotFoundError:
        return "unknown"
