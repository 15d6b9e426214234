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

A beam-search request (``num_beams`` above 1) takes ``num_beams`` rows of the batch: its prompt
is prefilled once and its cache copied to each of its rows; after each step its beams are
chosen as :class:`~sonnx.generation.beam_search.PromptBeams` (what ``rep.generate`` runs) and
its rows take on the caches of the beams they continue. Its tokens are emitted once its search
ends. The rows of a step's greedy, sampled and beam requests reach the host in one read.

The running sequences' caches are a :mod:`~sonnx.serve.batch_cache`: one buffer the graph
writes in place where it shares past and present (onnxruntime-genai's GroupQueryAttention
builds), so a decode step copies no cache; each sequence's own cache, padded and concatenated
per step, otherwise. Row ``i`` of the batch cache is the ``i``-th running row.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

import torch

from sonnx.generation.beam_search import PromptBeams
from sonnx.generation.decoder import Cache, Decoder
from sonnx.generation.model_dir import DecoderModel
from sonnx.generation.sampling import Sampling
from sonnx.serve.batch_cache import Joining, batch_cache
from sonnx.serve.errors import InvalidRequestError, ModelUnavailableError

#: What a request's queue receives: a token, ``None`` at the end, or the error that ended it.
Event = int | None | BaseException


@dataclass
class GenerationRequest:
    """One request's settings, and where its tokens go (a thread-safe callback).
    ``num_beams`` above 1 is beam search (``sampling`` is then greedy)."""

    prompt: list[int]
    max_new_tokens: int
    sampling: Sampling
    seed: int | None
    ends: frozenset[int]
    emit: Callable[[Event], None]
    num_beams: int = 1
    cancelled: threading.Event = field(default_factory=threading.Event)
    received: float = field(default_factory=time.monotonic)


@dataclass
class _Running:
    """A row of the decode batch: a greedy or sampled request, or beam ``beam`` of a beam
    request (``beams``, its search, shared by its rows)."""

    request: GenerationRequest
    length: int  # rows of the cache in use
    last: int  # the token to feed next
    produced: int
    generator: torch.Generator | None
    beams: PromptBeams | None = None
    beam: int = 0


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
        """Queue ``request``; once the scheduler is closed it gets a 503 error instead, and a
        beam request wider than the batch a 400."""
        if request.num_beams > self.max_batch:
            request.emit(
                InvalidRequestError(
                    f"generate: num_beams must be at most {self.max_batch} (the decode batch's "
                    f"rows), received {request.num_beams}"
                )
            )
            return
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
                joining = self._prefill_each(admitted)
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
        """The waiting requests that join now, in order while their rows fit the free room
        (gathered for up to ``gather_s`` when nothing runs); None once closed with nothing
        left to do."""
        with self._wake:
            while not self._waiting and not busy:
                if self._closed:
                    return None
                self._wake.wait()
            if not busy and self._waiting:
                deadline = self._waiting[0].received + self.gather_s
                while not self._closed and self._rows_waiting() < self.max_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
            room, admitted = self.max_batch - busy, []
            while self._waiting and self._waiting[0].num_beams <= room:
                room -= self._waiting[0].num_beams
                admitted.append(self._waiting.pop(0))
        return [r for r in admitted if not r.cancelled.is_set()]

    def _rows_waiting(self) -> int:
        return sum(r.num_beams for r in self._waiting)

    def _prefill_each(self, requests: list[GenerationRequest]) -> list[tuple[_Running, Cache]]:
        """The requests' prompts prefilled as one batch; if that fails, each alone, so a
        request's failure ends that request only. Returns the rows that go on (a beam request
        has ``num_beams`` of them) with the cache each starts from."""
        try:
            return self._prefill(requests)
        except Exception as e:
            if len(requests) == 1:
                requests[0].emit(e)
                return []
        return [r for request in requests for r in self._prefill_each([request])]

    def _prefill(self, requests: list[GenerationRequest]) -> list[tuple[_Running, Cache]]:
        """One pass over the prompts, left-padded to the longest: each request's first token
        (a beam request's first beams) and its own rows of the cache."""
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
        firsts = [
            _Running(r, len(r.prompt), 0, 0, self._generator(r), self._beams(r)) for r in requests
        ]
        # Every beam of a beam request starts from its prompt's logits.
        choices = self._choose(
            [logits[b : b + 1].expand(r.request.num_beams, -1) for b, r in enumerate(firsts)],
            firsts,
        )
        started = []
        for b, (first, choice) in enumerate(zip(firsts, choices, strict=True)):
            size = len(first.request.prompt)
            # A right-padded graph has each prompt's rows at the front.
            rows = slice(0, size) if lay.right_padded else slice(width - size, None)
            own = Cache(
                [k[b : b + 1, :, rows] for k in present.keys],
                [v[b : b + 1, :, rows] for v in present.values],
            )
            # All of a beam request's rows hold the same cache: none need reordering.
            started += [(r, own) for r in self._hand_on([first], choice, logits.shape[-1])[0]]
        self.on_prefill(len(requests), time.perf_counter() - start)
        return started

    def _generator(self, r: GenerationRequest) -> torch.Generator | None:
        if r.sampling.do_sample and r.seed is not None:
            return torch.Generator(device=self.decoder.device).manual_seed(r.seed)
        return None

    @staticmethod
    def _beams(r: GenerationRequest) -> PromptBeams | None:
        return PromptBeams(r.num_beams, r.ends) if r.num_beams > 1 else None

    @staticmethod
    def _choose(logits: list[torch.Tensor], firsts: list[_Running]) -> list[list[float]]:
        """Each request's choice from its rows' ``logits``, by its own settings: a greedy or
        sampled request's next token, a beam request's :meth:`PromptBeams.top`. They reach
        the host in one read (the host hands the tokens on, checks them for end tokens and
        picks the beams): on a GPU each read waits for the device. float64 holds the token
        ids exactly."""
        chosen = [
            r.request.sampling.next_tokens(rows, r.generator).double()
            if r.beams is None
            else r.beams.top(rows)
            for rows, r in zip(logits, firsts, strict=True)
        ]
        values = torch.cat(chosen).tolist()
        ends = list(accumulate(len(c) for c in chosen))
        return [values[end - len(c) : end] for c, end in zip(chosen, ends, strict=True)]

    def _hand_on(
        self, rows: list[_Running], choice: list[float], vocab: int
    ) -> tuple[list[_Running], list[int]]:
        """Hand one request's choice on (``rows``: its rows, in beam order): its rows that go
        on, and for each of them the one of ``rows`` whose cache it continues."""
        first = rows[0]
        if first.beams is None:
            first.last = int(choice[0])
            return ([], []) if self._advance(first) else (rows, [0])
        follows = first.beams.advance(choice, vocab)
        if first.beams.done or len(first.beams.tokens[0]) >= first.request.max_new_tokens:
            for token in first.beams.finish():
                first.request.emit(token)
            first.request.emit(None)
            return [], []
        going = [
            _Running(first.request, first.length, tokens[-1], 0, None, first.beams, j)
            for j, tokens in enumerate(first.beams.tokens)
        ]
        return going, follows

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
            for rows in _by_request(running):
                running[rows[0]].request.emit(e)
            return self._retain(running, [False] * len(running))
        for r in running:
            r.length += 1
        requests = _by_request(running)
        firsts = [running[rows[0]] for rows in requests]
        choices = self._choose([_rows(logits, rows) for rows in requests], firsts)
        kept = [False] * len(running)
        into, take = [], []
        for rows, choice in zip(requests, choices, strict=True):
            going, follows = self._hand_on([running[i] for i in rows], choice, logits.shape[-1])
            for j, (r, follow) in enumerate(zip(going, follows, strict=True)):
                running[rows[j]], kept[rows[j]] = r, True
                if follow != j:  # a beam that continues another's past takes its cache rows
                    into.append(rows[j])
                    take.append(rows[follow])
        if into:
            self.batch.reorder(into, take)
        self.on_step(len(running), time.perf_counter() - start)
        return self._retain(running, kept)


def _rows(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """The logits of ``rows`` (a view where that is one row)."""
    return logits[rows[0] : rows[0] + 1] if len(rows) == 1 else logits[rows]


def _by_request(running: list[_Running]) -> list[list[int]]:
    """The rows of each running request (a beam request's in beam order)."""
    rows: dict[int, list[int]] = {}
    for i, r in enumerate(running):
        rows.setdefault(id(r.request), []).append(i)
    return [sorted(group, key=lambda i: running[i].beam) for group in rows.values()]
