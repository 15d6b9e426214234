"""The gRPC endpoint: KServe v2 / Triton's ``inference.GRPCInferenceService`` over grpcio.

The service, its messages and its servicer base come from ``tritonclient[grpc]``
(``service_pb2``, ``service_pb2_grpc``), so Triton's own clients and anything generated from
Triton's ``grpc_service.proto`` talk to it, and sonnx compiles no proto. It runs as a
``grpc.aio`` server on the HTTP app's event loop, started and stopped by the app's lifespan
(:class:`GrpcEndpoint` is a :class:`sonnx.serve.app.Service`), so both protocols share one model
repository, its batchers (gRPC and HTTP requests are merged into the same runs), its limits and
its metrics (``protocol="grpc"``).

Errors become gRPC status codes with the same messages as the HTTP responses:

============================================  =====================  ==========
error                                          gRPC status            HTTP
============================================  =====================  ==========
unknown model or version                       NOT_FOUND              404
bad input (names, datatypes, shapes, values)   INVALID_ARGUMENT       400
unsupported feature (sequence_id, ...)         UNIMPLEMENTED          400
queue full (``max_queue_size``)                RESOURCE_EXHAUSTED     503
message above ``--max-request-mb``             RESOURCE_EXHAUSTED     413
model loading or unloading                     UNAVAILABLE            503
deadline (config, ``timeout``, gRPC deadline)  DEADLINE_EXCEEDED      504
missing or wrong API key                       UNAUTHENTICATED        401
============================================  =====================  ==========

ModelReady answers ``ready: false`` (not NOT_FOUND) for a model that cannot serve, as Triton
does, so readiness probes need no error handling. ModelStreamInfer, ModelConfig, statistics,
shared memory, tracing and logging settings answer UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any, TypeVar

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from sonnx.errors import SonnxError
from sonnx.serve import codec, grpc_codec
from sonnx.serve.auth import key_matches
from sonnx.serve.batcher import Arrays
from sonnx.serve.datatypes import datatype_of_array
from sonnx.serve.errors import (
    ConfigError,
    DeadlineExceededError,
    InvalidRequestError,
    ModelNotFoundError,
    ModelUnavailableError,
    PayloadTooLargeError,
    QueueFullError,
    ServeError,
    UnsupportedError,
)
from sonnx.serve.metrics import UNKNOWN_MODEL, ServeMetrics
from sonnx.serve.repository import ModelRepository
from sonnx.serve.signature import TensorSpec

log = logging.getLogger("sonnx.serve")
SERVICE = "/inference.GRPCInferenceService/"
# Health probes stay open with an API key, as /v2/health/* do over HTTP.
OPEN_METHODS = frozenset({SERVICE + "ServerLive", SERVICE + "ServerReady"})
EXTENSIONS = ["model_repository"]

# Most specific first: UnsupportedError is an InvalidRequestError, every one is a SonnxError.
_STATUS: list[tuple[type[Exception], grpc.StatusCode]] = [
    (ModelNotFoundError, grpc.StatusCode.NOT_FOUND),
    (QueueFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (PayloadTooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ModelUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (UnsupportedError, grpc.StatusCode.UNIMPLEMENTED),
    (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (ServeError, grpc.StatusCode.INTERNAL),
    (SonnxError, grpc.StatusCode.INVALID_ARGUMENT),
]


def status_of(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and message answering ``exc`` (unexpected errors are logged)."""
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code, str(exc)
    log.error("internal error", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


Request = TypeVar("Request")
Response = TypeVar("Response")
Method = Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]]


def _answered(method: Method[Request, Response]) -> Method[Request, Response]:
    """Turn the exceptions of a servicer method into the gRPC status of :func:`status_of`."""

    @functools.wraps(method)
    async def answer(self: Any, request: Request, context: grpc.aio.ServicerContext) -> Response:
        try:
            return await method(self, request, context)
        except Exception as e:
            await context.abort(*status_of(e))
            raise  # not reached: abort raises

    return answer


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The RPCs over one repository; each mirrors a route of :mod:`sonnx.serve.app`."""

    def __init__(self, repository: ModelRepository, metrics: ServeMetrics) -> None:
        self.repository = repository
        self.metrics = metrics

    # ---- health and metadata ------------------------------------------------------------
    async def ServerLive(self, request, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.repository.ready)

    async def ModelReady(self, request, context) -> pb.ModelReadyResponse:
        try:
            self.repository.get(request.name, request.version or None)
        except ServeError:  # unknown, failed to load, loading or unloading: not ready
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    async def ServerMetadata(self, request, context) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="sonnx", version=_version(), extensions=EXTENSIONS)

    @_answered
    async def ModelMetadata(self, request, context) -> pb.ModelMetadataResponse:
        served = self.repository.get(request.name, request.version or None)
        return pb.ModelMetadataResponse(
            name=request.name,
            versions=self.repository.versions(request.name),
            platform="sonnx_onnx",
            inputs=[_tensor_metadata(s) for s in served.signature.inputs],
            outputs=[_tensor_metadata(s) for s in served.signature.outputs],
        )

    # ---- inference ----------------------------------------------------------------------
    async def ModelInfer(self, request, context) -> pb.ModelInferResponse:
        start = time.perf_counter()
        name = request.model_name
        label = name if self.repository.known(name) else UNKNOWN_MODEL
        record = self.metrics.request(label, "grpc")
        try:
            response = await self._infer(request, context, start)
        except asyncio.CancelledError:  # the client cancelled or its deadline passed
            record.done("CANCELLED")
            raise
        except Exception as e:
            code, message = status_of(e)
            record.done(code.name)
            await context.abort(code, message)
            raise  # not reached: abort raises
        record.done()
        return response

    async def _infer(
        self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext, start: float
    ) -> pb.ModelInferResponse:
        served = self.repository.get(request.model_name, request.model_version or None)
        signature = served.signature

        def decode() -> tuple[codec.InferRequest, Arrays, list[codec.RequestedOutput]]:
            req = grpc_codec.decode_infer_request(request)
            arrays = signature.check_inputs(req.inputs)
            return req, arrays, signature.check_outputs(req.outputs, True)

        req, arrays, wanted = await asyncio.to_thread(decode) if _slow(request) else decode()
        timeout_s = req.timeout_s
        remaining = context.time_remaining()  # the client's gRPC deadline, if it set one
        if remaining is not None:
            timeout_s = remaining if timeout_s is None else min(timeout_s, remaining)
        results = await served.infer(arrays, timeout_s, start)

        def encode() -> pb.ModelInferResponse:
            tensors = [
                codec.ResponseTensor(
                    w.name, datatype_of_array(results[w.name], w.name), results[w.name], True
                )
                for w in wanted
            ]
            return grpc_codec.encode_infer_response(
                request.model_name, str(served.version), req.id, tensors
            )

        big = sum(results[w.name].nbytes for w in wanted) > codec.OFFLOAD_BYTES
        return await asyncio.to_thread(encode) if big else encode()

    # ---- repository ---------------------------------------------------------------------
    @_answered
    async def RepositoryIndex(self, request, context) -> pb.RepositoryIndexResponse:
        rows = self.repository.index(ready_only=request.ready)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=r["name"],
                    version=r.get("version", ""),
                    state=r["state"],
                    reason=r["reason"],
                )
                for r in rows
            ]
        )

    @_answered
    async def RepositoryModelLoad(self, request, context) -> pb.RepositoryModelLoadResponse:
        if request.parameters:
            raise UnsupportedError(
                "load parameters (config or file overrides) are not supported; edit the "
                f"model's config.json and files in the repository, received "
                f"{sorted(request.parameters)}"
            )
        await self.repository.load(request.model_name, strict=True)
        return pb.RepositoryModelLoadResponse()

    @_answered
    async def RepositoryModelUnload(self, request, context) -> pb.RepositoryModelUnloadResponse:
        await self.repository.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()


def _tensor_metadata(spec: TensorSpec) -> pb.ModelMetadataResponse.TensorMetadata:
    meta = spec.metadata()
    return pb.ModelMetadataResponse.TensorMetadata(
        name=spec.name, datatype=spec.datatype, shape=meta["shape"]
    )


def _slow(request: pb.ModelInferRequest) -> bool:
    """Whether decoding is worth a worker thread: BYTES elements and typed contents are read
    value by value; other raw tensors are wrapped without reading them."""
    value_by_value = any(t.datatype == "BYTES" or t.HasField("contents") for t in request.inputs)
    return value_by_value and request.ByteSize() > codec.OFFLOAD_BYTES


def _version() -> str:
    try:
        return metadata.version("sonnx")
    except metadata.PackageNotFoundError:
        return "unknown"


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Answer UNAUTHENTICATED to calls whose metadata lacks the key (but :data:`OPEN_METHODS`)."""

    def __init__(self, api_key: str) -> None:
        if not api_key:
            raise ValueError("ApiKeyInterceptor needs a non-empty key")
        self._key = api_key.encode("utf-8")
        self._deny_unary = grpc.unary_unary_rpc_method_handler(self._deny)
        self._deny_stream = grpc.stream_stream_rpc_method_handler(self._deny)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if details.method in OPEN_METHODS or self._allowed(details.invocation_metadata or ()):
            return await continuation(details)
        streaming = details.method == SERVICE + "ModelStreamInfer"
        return self._deny_stream if streaming else self._deny_unary

    def _allowed(self, metadata: Any) -> bool:
        pairs = [
            (key.encode("latin-1"), value if isinstance(value, bytes) else value.encode("utf-8"))
            for key, value in metadata
        ]
        return key_matches(pairs, self._key)

    @staticmethod
    async def _deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong API key")


class GrpcEndpoint:
    """The gRPC server beside the HTTP app: a :class:`sonnx.serve.app.Service` the app starts
    in its lifespan. ``port`` 0 picks a free port (``bound_port`` once started)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        api_key: str | None = None,
        max_request_bytes: int = 64 * 2**20,
        grace_s: float = 30.0,
    ) -> None:
        self.host, self.port = host, port
        self.api_key = api_key
        self.max_request_bytes = max_request_bytes
        self.grace_s = grace_s
        self.bound_port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Task[None] | None = None

    async def start(self, repository: ModelRepository, metrics: ServeMetrics) -> None:
        """Bind, start serving and log ``grpc_listening``; a :class:`ConfigError` if the
        address cannot be bound."""
        self._loop = asyncio.get_running_loop()
        options = [
            # gRPC answers RESOURCE_EXHAUSTED to a larger message before it reaches us.
            ("grpc.max_receive_message_length", self.max_request_bytes),
            ("grpc.max_send_message_length", -1),
            # Otherwise a second server on the same port would silently share it.
            ("grpc.so_reuseport", 0),
        ]
        interceptors = [ApiKeyInterceptor(self.api_key)] if self.api_key else []
        server = grpc.aio.server(interceptors=interceptors, options=options)
        servicer = InferenceServicer(repository, metrics)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            self.bound_port = server.add_insecure_port(f"{host}:{self.port}")
        except RuntimeError as e:
            raise ConfigError(f"cannot listen on {self.host}:{self.port} (gRPC): {e}") from None
        await server.start()
        self._server = server
        log.info(
            "gRPC listening on %s:%d",
            self.host,
            self.bound_port,
            extra={
                "fields": {"event": "grpc_listening", "host": self.host, "port": self.bound_port}
            },
        )

    def request_stop(self) -> None:
        """Begin the graceful stop from any thread or a signal handler (at SIGTERM, so gRPC
        refuses new calls while HTTP drains too); :meth:`stop` waits for it."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._begin_stop)

    async def stop(self) -> None:
        """Refuse new calls, let in-flight ones finish (up to ``grace_s``), then close."""
        self._begin_stop()
        if self._stopping is not None:
            await self._stopping

    def _begin_stop(self) -> None:
        if self._server is not None and self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self._server.stop(self.grace_s))
