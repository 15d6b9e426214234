"""Triton's generate extension: ``POST /v2/models/{name}[/versions/{v}]/generate`` and
``.../generate_stream`` for decoder models (a KV cache in optimum's or onnxruntime-genai's
layout, see :mod:`sonnx.generation`).

A request is JSON: ``text_input`` (needs ``tokenizer.json`` in the version directory) or
``input_ids`` (a list of token ids), and optional ``parameters``: ``max_tokens`` (or
``max_new_tokens``, default 64), ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
``seed``, ``eos_token_id``, ``num_beams``. ``generate`` answers ``{"model_name",
"model_version", "text_output", "output_ids"}`` with the whole continuation;
``generate_stream`` sends one server-sent event (``data: {...}``) per token, each with that
token's text piece and id, and ``{"error": ...}`` as the last event if the request fails once
streaming has begun.

A version's decoder is set up on its first generate request over the graph the version's
``/infer`` runs (one prepared model, its weights in memory once; a SingaRep runs in several
threads at once) and runs under a :class:`~sonnx.serve.decode_scheduler.DecodeScheduler`,
which batches the prefills and the decode steps of concurrent requests;
``sonnx_serve_prefill_batch_size`` counts the prompts of each prefill and
``sonnx_serve_decode_batch_size`` the sequences of each decode step. A prefill waits up to
the model's ``max_queue_delay_ms`` for more prompts when nothing else is running.

``num_beams`` above 1 is beam search (:meth:`SingaRep.generate`'s, no sampling, the same
tokens): such a request takes ``num_beams`` rows of the decode batch, and its tokens come once
its search has ended (``generate_stream`` then sends them one event per token, all at the end).

A request whose client goes away leaves the batch at the next step (the handlers set its
``cancelled``: a streamed response when starlette stops it, a plain one when
:func:`_until_disconnected` sees the disconnect).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import Histogram
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sonnx.errors import BadInputError, SonnxError
from sonnx.generation.beam_search import beam_search_conflict
from sonnx.generation.limits import check_context, check_token_ids
from sonnx.generation.model_dir import DecoderModel, decoder_file, load_decoder
from sonnx.generation.sampling import Sampling
from sonnx.generation.text import TextStreamer
from sonnx.serve.decode_scheduler import DecodeScheduler, Event, GenerationRequest
from sonnx.serve.errors import InvalidRequestError, ModelUnavailableError, UnsupportedError
from sonnx.serve.metrics import ServeMetrics
from sonnx.serve.repository import MODEL_FILE, ModelRepository, ModelVersion

_STEP_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
_PARAMETERS = {
    *("max_tokens", "max_new_tokens", "do_sample", "temperature", "top_k", "top_p"),
    *("seed", "eos_token_id", "num_beams"),
}
Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class _Served:
    """A version's generation: its decoder (over the version's prepared graph) and the
    scheduler batching its requests."""

    model: DecoderModel
    scheduler: DecodeScheduler


class GenerateApi:
    """The two generate routes over a repository, with one scheduler per served version.

    ``read_body`` reads a request's body under the server's size limit.
    """

    def __init__(
        self,
        repository: ModelRepository,
        metrics: ServeMetrics,
        read_body: Callable[[Request], Awaitable[bytes]],
    ) -> None:
        self.repository = repository
        self.read_body = read_body
        self.decode_batch = Histogram(
            "sonnx_serve_decode_batch_size",
            "Sequences per decode step of generate requests; above 1 when concurrent "
            "requests' steps were batched",
            ["model"],
            buckets=_STEP_BUCKETS,
            registry=metrics.registry,
        )
        self.prefill_batch = Histogram(
            "sonnx_serve_prefill_batch_size",
            "Prompts per prefill of generate requests; above 1 when concurrent requests' "
            "prompts were batched",
            ["model"],
            buckets=_STEP_BUCKETS,
            registry=metrics.registry,
        )
        self._served: dict[ModelVersion, _Served] = {}
        self._loading = asyncio.Lock()

    def routes(self, guarded: Callable[[Handler], Handler]) -> list[Route]:
        """The routes, each handler wrapped by ``guarded`` (errors to responses)."""
        paths = ["/v2/models/{name}", "/v2/models/{name}/versions/{version}"]
        handlers = [("/generate", self.generate), ("/generate_stream", self.stream)]
        return [
            Route(p + suffix, guarded(handler), methods=["POST"])
            for p in paths
            for suffix, handler in handlers
        ]

    def decoder(self, served: ModelVersion) -> DecoderModel | None:
        """The decoder ``served`` generates with (None before its first generate request)."""
        state = self._served.get(served)
        return None if state is None else state.model

    async def close(self) -> None:
        """Finish every running generation, then stop the schedulers."""
        served, self._served = list(self._served.values()), {}
        await asyncio.gather(*(s.scheduler.close() for s in served))

    # ---- the routes -----------------------------------------------------------------------
    async def generate(self, request: Request) -> Response:
        head, model, generation, queue = await self._start(request)
        # A plain response is not told that its client went away (a streamed one is).
        watch = asyncio.create_task(_until_disconnected(request, queue))
        tokens = []
        try:
            while (event := await queue.get()) is not None:
                if isinstance(event, BaseException):
                    raise _client_error(event)
                tokens.append(event)
        finally:  # a client gone away stops its sequence at the next step
            watch.cancel()
            generation.cancelled.set()
        text = _decode(model, tokens)
        return JSONResponse({**head, "text_output": text, "output_ids": tokens})

    async def stream(self, request: Request) -> Response:
        head, model, generation, queue = await self._start(request)

        async def events() -> AsyncIterator[bytes]:
            pieces: list[str] = []
            streamer = TextStreamer(model.tokenizer, pieces.append) if model.tokenizer else None
            try:
                while (event := await queue.get()) is not None:
                    if isinstance(event, BaseException):
                        yield _event({"error": str(_client_error(event))})
                        return
                    if streamer is not None:
                        streamer(np.array([event]))
                    text = "".join(pieces)
                    pieces.clear()
                    yield _event({**head, "text_output": text, "output_ids": [event]})
                if streamer is not None:
                    streamer.finish()
                if pieces:  # text held back at an incomplete character
                    yield _event({**head, "text_output": "".join(pieces), "output_ids": []})
            finally:
                generation.cancelled.set()

        return StreamingResponse(events(), media_type="text/event-stream")

    # ---- requests -------------------------------------------------------------------------
    async def _start(
        self, request: Request
    ) -> tuple[dict[str, str], DecoderModel, GenerationRequest, asyncio.Queue[Event]]:
        name = request.path_params["name"]
        served = self.repository.get(name, request.path_params.get("version"))
        body = await self.read_body(request)
        try:
            options = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidRequestError(f"the request body is not valid JSON: {e}") from None
        if not isinstance(options, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        state = await self._generation(name, served)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        asked = _request(
            options, state.model, lambda e: loop.call_soon_threadsafe(queue.put_nowait, e)
        )
        state.scheduler.submit(asked)
        head = {"model_name": name, "model_version": str(served.version)}
        return head, state.model, asked, queue

    async def _generation(self, name: str, served: ModelVersion) -> _Served:
        """The version's decoder and scheduler, set up on first use (and retired with the
        version)."""
        async with self._loading:
            if served not in self._served:
                try:
                    model = await asyncio.to_thread(_decoder, self.repository.root, served)
                except SonnxError as e:
                    raise UnsupportedError(
                        f"model {name!r} version {served.version} cannot generate: {e}"
                    ) from e
                if served.retired:  # a reload replaced it while the decoder was set up
                    raise ModelUnavailableError(
                        f"model {name!r} version {served.version} was just unloaded; retry"
                    )
                prefills = self.prefill_batch.labels(name)
                steps = self.decode_batch.labels(name)
                scheduler = DecodeScheduler(
                    model,
                    on_step=lambda rows, seconds: steps.observe(rows),
                    on_prefill=lambda rows, seconds: prefills.observe(rows),
                    gather_s=served.config.max_queue_delay_ms / 1e3,
                )
                self._served[served] = _Served(model, scheduler)
                served.closers.append(lambda: self._retire(served))
        return self._served[served]

    async def _retire(self, served: ModelVersion) -> None:
        gone = self._served.pop(served, None)
        if gone is not None:
            await gone.scheduler.close()


async def _until_disconnected(request: Request, queue: asyncio.Queue[Event]) -> None:
    """Wait for ``request``'s client to go away (its body has been read: what the server
    hands on next is the disconnect), then end the wait for its tokens."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    queue.put_nowait(None)


def _decoder(root: Path, served: ModelVersion) -> DecoderModel:
    """The version's decoder over the graph its ``/infer`` runs (prepared apart only where the
    directory's ``genai_config.json`` names another file than ``model.onnx``)."""
    directory = root / served.name / str(served.version)
    shared = served.rep if decoder_file(directory) == directory / MODEL_FILE else None
    return load_decoder(directory, served.config.device, served.config.use_graph, rep=shared)


def _request(options: dict[str, Any], model: DecoderModel, emit: Any) -> GenerationRequest:
    """The generation a request body asks for, checked."""
    parameters = options.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidRequestError(
            f"generate: parameters must be a JSON object, received {str(parameters)[:60]}"
        )
    unknown = set(parameters) - _PARAMETERS
    if unknown:
        raise InvalidRequestError(
            f"generate: unknown parameters {sorted(unknown)}; known: {sorted(_PARAMETERS)}"
        )
    if "text_input" in options:
        if model.tokenizer is None:
            raise InvalidRequestError(
                "generate: this model has no tokenizer.json; send input_ids instead of text_input"
            )
        prompt = model.tokenizer.encode(str(options["text_input"]))
    else:
        prompt = options.get("input_ids")
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        raise InvalidRequestError(
            f"generate: give text_input or input_ids (a non-empty list of ints), received "
            f"{str(options)[:80]}"
        )
    limit = parameters.get("max_tokens", parameters.get("max_new_tokens", 64))
    if not isinstance(limit, int) or limit < 1:
        raise InvalidRequestError(f"generate: max_tokens must be an int >= 1, received {limit!r}")
    try:  # before the request joins a batch: ids past the vocabulary, lengths past the context
        check_token_ids(np.asarray(prompt), model.layout.limits.vocab_size)
        check_context(len(prompt), limit, model.layout.limits.context_length)
    except BadInputError as e:
        raise InvalidRequestError(str(e)) from None
    sampling = Sampling(
        bool(parameters.get("do_sample", False)),
        float(parameters.get("temperature", 1.0)),
        int(parameters.get("top_k", 0)),
        float(parameters.get("top_p", 1.0)),
    )
    beams = parameters.get("num_beams", 1)
    if not isinstance(beams, int) or beams < 1:
        raise InvalidRequestError(f"generate: num_beams must be an int >= 1, received {beams!r}")
    conflict = beam_search_conflict(beams, sampling.do_sample, streams=False)
    if conflict is not None:
        raise InvalidRequestError(conflict)
    ends = parameters.get("eos_token_id", model.eos_token_id)
    ends = [] if ends is None else [ends] if isinstance(ends, int) else ends
    seed = parameters.get("seed")
    return GenerationRequest(prompt, limit, sampling, seed, frozenset(ends), emit, beams)


def _decode(model: DecoderModel, tokens: list[int]) -> str:
    if model.tokenizer is None:
        return ""
    return model.tokenizer.decode(tokens, skip_special_tokens=True)


def _client_error(error: BaseException) -> BaseException:
    """IndexError and ValueError from torch come from a request's values (a token id past the
    vocabulary): the client's 400, not the server's 500."""
    if isinstance(error, (IndexError, ValueError)) and not isinstance(error, SonnxError):
        return InvalidRequestError(f"generate: the model cannot run this request: {error}")
    return error


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
