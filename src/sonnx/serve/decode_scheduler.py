"""Continuous batching of generation: the decode steps of concurrent requests run as one.

A :class:`DecodeScheduler` owns one decoder and one worker thread. A request's prompt is run
alone (its prefill), which gives its first token; from then on it joins the running set, and
every step feeds all running sequences their last token in one batch. Requests come and go
between steps, so a long generation never holds up a short one.

The sequences of a step have caches of different lengths. Where the graph concatenates past
and new rows (optimum's exports), each cache is padded with zero rows on the left to the
longest, and the attention mask is 0 on the padding, so the rows are masked out as left
padding is; afterwards each sequence keeps its own rows of the present. Where the graph takes
padding on the right (GroupQueryAttention, whether or not its past is a shared buffer), each
sequence's cache is padded on the right and the mask covers each sequence's own length: the
graph reads a sequence's length from its mask, and rows past it are never attended to.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sonnx.generation.decoder import Cache, Decoder
from sonnx.generation.model_dir import DecoderModel
from sonnx.generation.sampling import Sampling

#: What a request's queue receives: a token, ``None`` at the end, or the error that ended it.
Event = int | None | BaseException


@dataclass
class GenerationRequest:
    """One request's settings, and where its tokens go (a thread-safe callback)."""

    prompt: list[int]
    max_new_tokens: int
    sampling: Sampling
    seed: int | None
    ends: frozenset[int]
    emit: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Running:
    request: GenerationRequest
    cache: Cache
    length: int  # rows of the cache in use
    last: int  # the token to feed next
    produced: int
    generator: torch.Generator | None


class DecodeScheduler:
    """Runs the requests submitted to it, batching their decode steps (see module docstring).

    ``on_step(sequences, seconds)`` is told the size and time of every decode step.
    """

    def __init__(
        self,
        model: DecoderModel,
        max_batch: int = 16,
        on_step: Callable[[int, float], None] = lambda rows, seconds: None,
    ) -> None:
        self.decoder = Decoder(model.rep, model.layout)
        self.max_batch = max_batch
        self.on_step = on_step
        self._waiting: list[GenerationRequest] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="sonnx-decode", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        with self._wake:
            self._waiting.append(request)
            self._wake.notify()

    async def close(self) -> None:
        """Stop after the running sequences' current step; waiting requests get an error."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        await asyncio.to_thread(self._thread.join)

    # ---- the worker thread ----------------------------------------------------------------
    def _work(self) -> None:
        running: list[_Running] = []
        while True:
            with self._wake:
                while not self._closed and not self._waiting and not running:
                    self._wake.wait()
                if self._closed:
                    break
                room = self.max_batch - len(running)
                admitted, self._waiting = self._waiting[:room], self._waiting[room:]
            for request in admitted:
                started = self._guarded(request, lambda r=request: self._prefill(r))
                if started is not None and not self._advance(started):
                    running.append(started)
            running = [r for r in running if not r.request.cancelled.is_set()]
            if running:
                running = self._step(running)
        for r in running:
            r.request.emit(RuntimeError("the server is shutting down"))
        for request in self._waiting:
            request.emit(RuntimeError("the server is shutting down"))

    def _guarded(self, request: GenerationRequest, run: Callable[[], Any]) -> Any:
        try:
            return run()
        except Exception as e:  # a request's failure ends that request only
            request.emit(e)
            return None

    def _prefill(self, request: GenerationRequest) -> _Running:
        ids = torch.tensor([request.prompt], device=self.decoder.device)
        mask = torch.ones_like(ids)
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        cache = self.decoder.empty_cache(1, ids.shape[1] + request.max_new_tokens)
        logits, cache = self.decoder.step(ids, mask, positions, cache)
        generator = None
        if request.sampling.do_sample and request.seed is not None:
            generator = torch.Generator(device=ids.device).manual_seed(request.seed)
        token = int(request.sampling.next_tokens(logits, generator)[0])
        return _Running(request, cache, ids.shape[1], token, 0, generator)

    def _advance(self, r: _Running) -> bool:
        """Hand ``r``'s newest token on; whether ``r`` has finished."""
        r.produced += 1
        r.request.emit(r.last)
        if r.last in r.request.ends or r.produced >= r.request.max_new_tokens:
            r.request.emit(None)
            return True
        return False

    def _step(self, running: list[_Running]) -> list[_Running]:
        """One decode step of every running sequence; those still running after it."""
        start = time.perf_counter()
        device = self.decoder.device
        ids = torch.tensor([[r.last] for r in running], device=device)
        positions = torch.tensor([[r.length] for r in running], device=device)
        try:
            if self.decoder.layout.right_padded:
                logits, present, rows = self._run_right_padded(running, ids, positions)
            else:
                logits, present, rows = self._run_left_padded(running, ids, positions)
        except Exception as e:
            for r in running:
                r.request.emit(e)
            return []
        still = []
        for b, r in enumerate(running):
            r.cache = Cache(
                [k[b : b + 1, :, rows[b]] for k in present.keys],
                [v[b : b + 1, :, rows[b]] for v in present.values],
            )
            r.length += 1
            r.last = int(r.request.sampling.next_tokens(logits[b : b + 1], r.generator)[0])
            if not self._advance(r):
                still.append(r)
        self.on_step(len(running), time.perf_counter() - start)
        return still

    def _run_left_padded(
        self, running: list[_Running], ids: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, Cache, list[slice]]:
        longest = max(r.length for r in running)
        pads = [longest - r.length for r in running]
        mask = torch.ones(len(running), longest + 1, dtype=torch.int64, device=ids.device)
        for b, pad in enumerate(pads):
            mask[b, :pad] = 0

        def merged(caches: list[torch.Tensor]) -> torch.Tensor:
            pairs = zip(caches, pads, strict=True)
            return torch.cat([torch.nn.functional.pad(c, (0, 0, p, 0)) for c, p in pairs], 0)

        layers = range(self.decoder.layout.layers)
        cache = Cache(
            [merged([r.cache.keys[i] for r in running]) for i in layers],
            [merged([r.cache.values[i] for r in running]) for i in layers],
        )
        logits, present = self.decoder.step(ids, mask, positions, cache)
        return logits, present, [slice(p, None) for p in pads]

    def _run_right_padded(
        self, running: list[_Running], ids: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, Cache, list[slice]]:
        sizes = [r.cache.keys[0].shape[2] for r in running]
        widest = max(sizes)
        total = max(r.length for r in running) + 1
        mask = torch.zeros(len(running), total, dtype=torch.int64, device=ids.device)
        for b, r in enumerate(running):
            mask[b, : r.length + 1] = 1

        def merged(caches: list[torch.Tensor]) -> torch.Tensor:
            return torch.cat(
                [torch.nn.functional.pad(c, (0, 0, 0, widest - c.shape[2])) for c in caches], 0
            )

        layers = range(self.decoder.layout.layers)
        cache = Cache(
            [merged([r.cache.keys[i] for r in running]) for i in layers],
            [merged([r.cache.values[i] for r in running]) for i in layers],
        )
        logits, present = self.decoder.step(ids, mask, positions, cache)
        # A shared buffer keeps its size; a growing cache keeps its rows and the new one.
        kept = [max(size, r.length + 1) for size, r in zip(sizes, running, strict=True)]
        return logits, present, [slice(0, k) for k in kept]
