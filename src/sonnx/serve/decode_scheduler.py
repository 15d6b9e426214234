"""Continuous batching of generation: the prompts and the decode steps of concurrent requests
run as batches.

A :class:`DecodeScheduler` owns one decoder and one worker thread. Each tick, the requests that
arrived since the last one are prefilled together: their prompts left-padded to the longest,
with an attention mask 0 on the padding and positions counting each prompt's own tokens, so
each gets the first token it gets alone. When nothing is running, the first arrival waits up
to ``gather_s`` for others to share its prefill. From then on the requests join the running
set, and every step feeds all running sequences their last token in one batch. Requests come
and go between steps, so a long generation never holds up a short one. Should a batched
prefill fail (a token id past the vocabulary), each of its prompts is run alone, so the error
reaches the request that caused it only.

The running sequences' caches are a :mod:`~sonnx.serve.batch_cache`: one buffer the graph
writes in place where it shares past and present (onnxruntime-genai's GroupQueryAttention
builds), so a decode step copies no cache; each sequence's own cache, padded and concatenated
per step, otherwise. Row ``i`` of the batch cache is the ``i``-th running request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from sonnx.generation.decoder import Cache, Decoder
from sonnx.generation.model_dir import DecoderModel
from sonnx.generation.sampling import Sampling
from sonnx.serve.batch_cache import Joining, batch_cache
from sonnx.serve.errors import ModelUnavailableError

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
    received: float = field(default_factory=time.monotonic)


@dataclass
class _Running:
    request: GenerationRequest
    length: int  # rows of the cache in use
    last: int  # the token to feed next
    produced: int
    generator: torch.Generator | None


class DecodeScheduler:
    """Runs the requests submitted to it, batching their prefills and decode steps (see the
    module docstring).

    ``on_prefill(prompts, seconds)`` and ``on_step(sequences, seconds)`` are told the size and
    time of every prefill and every decode step.
    """

    def __init__(
        self,
        model: DecoderModel,
        max_batch: int = 16,
        on_step: Callable[[int, float], None] = lambda rows, seconds: None,
        on_prefill: Callable[[int, float], None] = lambda rows, seconds: None,
        gather_s: float = 0.0,
    ) -> None:
        self.decoder = Decoder(model.rep, model.layout)
        self.max_batch = max_batch
        self.batch = batch_cache(self.decoder, max_batch)
        self.on_step = on_step
        self.on_prefill = on_prefill
        self.gather_s = gather_s
        self._waiting: list[GenerationRequest] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="sonnx-decode", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        """Queue ``request``; once the scheduler is closed it gets a 503 error instead."""
        with self._wake:
            if self._closed:
                request.emit(ModelUnavailableError("this model version is being unloaded"))
                return
            self._waiting.append(request)
            self._wake.notify()

    async def close(self) -> None:
        """Finish the waiting and running requests, then stop (new ones get a 503)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        await asyncio.to_thread(self._thread.join)

    # ---- the worker thread ----------------------------------------------------------------
    def _work(self) -> None:
        running: list[_Running] = []
        while (admitted := self._admit(len(running))) is not None:
            if admitted:
                joining = [
                    (started, cache)
                    for started, cache in self._prefill_each(admitted)
                    if not self._advance(started)
                ]
                if joining:
                    self.batch.join([self._joining(r, cache) for r, cache in joining])
                    running += [r for r, _ in joining]
            running = self._retain(running, [not r.request.cancelled.is_set() for r in running])
            if running:
                running = self._step(running)

    def _retain(self, running: list[_Running], keep: list[bool]) -> list[_Running]:
        """The running requests marked in ``keep``, in the order of their batch cache rows."""
        return [running[i] for i in self.batch.retain(keep)]

    @staticmethod
    def _joining(r: _Running, cache: Cache) -> Joining:
        return Joining(cache, r.length, len(r.request.prompt) + r.request.max_new_tokens)

    def _admit(self, busy: int) -> list[GenerationRequest] | None:
        """The waiting requests that join now, up to the free room (gathered for up to
        ``gather_s`` when nothing runs); None once closed with nothing left to do."""
        with self._wake:
            while not self._waiting and not busy:
                if self._closed:
                    return None
                self._wake.wait()
            if not busy and self._waiting:
                deadline = self._waiting[0].received + self.gather_s
                while len(self._waiting) < self.max_batch and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
            room = self.max_batch - busy
            admitted, self._waiting = self._waiting[:room], self._waiting[room:]
        return [r for r in admitted if not r.cancelled.is_set()]

    def _prefill_each(self, requests: list[GenerationRequest]) -> list[tuple[_Running, Cache]]:
        """The requests' prompts prefilled as one batch; if that fails, each alone, so a
        request's failure ends that request only."""
        try:
            return self._prefill(requests)
        except Exception as e:
            if len(requests) == 1:
                requests[0].emit(e)
                return []
        return [r for request in requests for r in self._prefill_each([request])]

    def _prefill(self, requests: list[GenerationRequest]) -> list[tuple[_Running, Cache]]:
        """One pass over the prompts, left-padded to the longest: each request's first token
        and its own rows of the cache."""
        start = time.perf_counter()
        device, lay = self.decoder.device, self.decoder.layout
        width = max(len(r.prompt) for r in requests)
        ids = torch.zeros(len(requests), width, dtype=torch.int64)
        mask = torch.zeros_like(ids)
        for b, r in enumerate(requests):
            ids[b, width - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[b, width - len(r.prompt) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # A shared buffer need only hold the prompts: their rows are copied into the batch's.
        cache = self.decoder.empty_cache(len(requests), width)
        logits, present = self.decoder.step(ids, mask, positions, cache)
        generators = [self._generator(r) for r in requests]
        firsts = self._choose(logits, [r.sampling for r in requests], generators)
        started = []
        for b, r in enumerate(requests):
            size = len(r.prompt)
            # A right-padded graph has each prompt's rows at the front.
            rows = slice(0, size) if lay.right_padded else slice(width - size, None)
            own = Cache(
                [k[b : b + 1, :, rows] for k in present.keys],
                [v[b : b + 1, :, rows] for v in present.values],
            )
            started.append((_Running(r, size, firsts[b], 0, generators[b]), own))
        self.on_prefill(len(requests), time.perf_counter() - start)
        return started

    def _generator(self, r: GenerationRequest) -> torch.Generator | None:
        if r.sampling.do_sample and r.seed is not None:
            return torch.Generator(device=self.decoder.device).manual_seed(r.seed)
        return None

    @staticmethod
    def _choose(
        logits: torch.Tensor,
        samplings: list[Sampling],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        """Each row's next token, by its own request's settings. The tokens reach the host in
        one read (the host hands them on and checks them for end tokens): on a GPU each read
        waits for the device."""
        rows = zip(samplings, generators, strict=True)
        chosen = [s.next_tokens(logits[b : b + 1], g) for b, (s, g) in enumerate(rows)]
        return torch.cat(chosen).tolist()

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
        ids = torch.tensor([[r.last] for r in running], device=self.decoder.device)
        try:
            logits = self.batch.step(ids, [r.length for r in running])
        except Exception as e:
            for r in running:
                r.request.emit(e)
            return self._retain(running, [False] * len(running))
        chosen = self._choose(
            logits, [r.request.sampling for r in running], [r.generator for r in running]
        )
        going = []
        for r, token in zip(running, chosen, strict=True):
            r.length += 1
            r.last = token
            going.append(not self._advance(r))
        self.on_step(len(running), time.perf_counter() - start)
        return self._retain(running, going)
