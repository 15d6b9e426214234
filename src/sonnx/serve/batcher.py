"""Per-model request queue and dynamic batcher.

Requests wait in a bounded queue. A worker per model instance takes the oldest request and,
when batching is on, every queued request it can stack with it along dim 0 (same datatypes and
same other dims) until ``max_batch_size`` rows are gathered or ``max_queue_delay`` has passed;
it then runs the model once in a thread of its own, so the event loop keeps accepting requests
while torch computes (torch releases the GIL inside its kernels), and splits the outputs back
by rows. Only one worker gathers at a time, so a second instance does not steal the requests
the first is waiting for.

If a merged run fails, each request in it is run alone, so one bad request cannot fail the
requests it was batched with. A request whose deadline passes while queued is answered 504
without running; one whose deadline passes while running is answered 504 and its result
dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sonnx.serve.errors import (
    DeadlineExceededError,
    ModelUnavailableError,
    QueueFullError,
    ServeError,
)

Arrays = dict[str, np.ndarray]
# (instance index, inputs by name) -> every output by name; called in a worker thread.
RunFn = Callable[[int, Arrays], Arrays]

log = logging.getLogger("sonnx.serve")


class BatchObserver(Protocol):
    """Where the batcher reports what it does (metrics); see :mod:`sonnx.serve.metrics`."""

    def queue_depth(self, depth: int) -> None: ...

    def batch(self, rows: int, requests: int, seconds: float) -> None: ...


@dataclass(frozen=True)
class BatchPolicy:
    """How one model's requests are queued and merged (from its ``config.json``)."""

    max_batch_size: int = 0
    max_queue_delay_s: float = 0.001
    max_queue_size: int = 64
    instance_count: int = 1
    #: Run every batch, merged or single, at ``max_batch_size`` rows (blank rows appended), so
    #: a request's result has the same bits whatever it was merged with.
    padded: bool = False


@dataclass(eq=False)
class _Pending:
    inputs: Arrays
    rows: int
    key: tuple[tuple[str, str, tuple[int, ...]], ...]
    deadline: float
    future: asyncio.Future[Arrays]


class BatchingError(ServeError):
    """A model's output lost the batch dim, so a merged result cannot be split."""


class Batcher:
    """Queue, merge and run one model's requests. Create and use it inside the event loop."""

    def __init__(self, name: str, run: RunFn, policy: BatchPolicy, observer: BatchObserver) -> None:
        self.name = name
        self._run = run
        self.policy = policy
        self._observer = observer
        self._queue: collections.deque[_Pending] = collections.deque()
        self._arrived = asyncio.Event()
        self._gather_lock = asyncio.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(
            max_workers=policy.instance_count, thread_name_prefix=f"sonnx-serve-{name}"
        )
        self._workers = [
            asyncio.get_running_loop().create_task(self._worker(i), name=f"{name}-worker-{i}")
            for i in range(policy.instance_count)
        ]

    @property
    def depth(self) -> int:
        return len(self._queue)

    async def submit(self, inputs: Arrays, deadline: float) -> Arrays:
        """Queue ``inputs`` and wait for this request's outputs (by name).

        ``deadline`` is on the event loop's clock. Raises :class:`QueueFullError` at once
        when ``max_queue_size`` requests are already waiting.
        """
        if self._closed:
            raise ModelUnavailableError(f"model {self.name!r} is being unloaded")
        if len(self._queue) >= self.policy.max_queue_size:
            raise QueueFullError(
                f"model {self.name!r} has {len(self._queue)} requests queued (max_queue_size "
                f"{self.policy.max_queue_size}); retry later"
            )
        loop = asyncio.get_running_loop()
        batching = self.policy.max_batch_size > 0
        item = _Pending(
            inputs=inputs,
            rows=next(iter(inputs.values())).shape[0] if batching else 1,
            key=tuple((n, a.dtype.str, a.shape[1:]) for n, a in inputs.items()),
            deadline=deadline,
            future=loop.create_future(),
        )
        self._queue.append(item)
        self._observer.queue_depth(len(self._queue))
        self._arrived.set()
        try:
            return await asyncio.wait_for(item.future, max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            raise self._deadline_error() from None
        finally:
            if item in self._queue:  # timed out (or the caller was cancelled) while queued
                self._queue.remove(item)
                self._observer.queue_depth(len(self._queue))

    async def close(self) -> None:
        """Refuse new requests, finish the queued and running ones, stop the workers."""
        self._closed = True
        self._arrived.set()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._executor.shutdown(wait=True)

    def _deadline_error(self) -> DeadlineExceededError:
        return DeadlineExceededError(
            f"model {self.name!r}: the request did not finish before its deadline "
            "(request_timeout_ms in the model's config.json, or the request's timeout)"
        )

    # ---- the workers --------------------------------------------------------------------
    async def _worker(self, index: int) -> None:
        while True:
            async with self._gather_lock:
                batch = await self._next_batch()
            if batch is None:
                return
            try:
                await self._run_batch(index, batch)
            except Exception as e:  # a bug here must fail the requests, not stop the worker
                log.exception("model %r: batch failed", self.name)
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(e)

    async def _next_batch(self) -> list[_Pending] | None:
        """The next requests to run together, or None once closed and drained."""
        loop = asyncio.get_running_loop()
        while True:
            self._drop_stale(loop.time())
            if self._queue:
                break
            if self._closed:
                return None
            self._arrived.clear()
            await self._arrived.wait()
        first = self._queue.popleft()
        batch, rows = [first], first.rows
        if self.policy.max_batch_size > 0:
            close_at = loop.time() + self.policy.max_queue_delay_s
            while True:
                rows = self._take_compatible(batch, rows)
                remaining = close_at - loop.time()
                if rows >= self.policy.max_batch_size or remaining <= 0 or self._closed:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except asyncio.TimeoutError:
                    rows = self._take_compatible(batch, rows)
                    break
        self._observer.queue_depth(len(self._queue))
        return batch

    def _drop_stale(self, now: float) -> None:
        """Answer queued requests whose deadline has passed; forget cancelled ones."""
        for item in list(self._queue):
            if item.future.done() or item.deadline <= now:
                self._queue.remove(item)
                if not item.future.done():
                    item.future.set_exception(self._deadline_error())

    def _take_compatible(self, batch: list[_Pending], rows: int) -> int:
        """Move queued requests that stack with ``batch[0]`` into ``batch``; the new rows."""
        key, limit = batch[0].key, self.policy.max_batch_size
        for item in list(self._queue):
            if item.key == key and rows + item.rows <= limit and not item.future.done():
                self._queue.remove(item)
                batch.append(item)
                rows += item.rows
        return rows

    async def _run_batch(self, index: int, batch: list[_Pending]) -> None:
        live = [p for p in batch if not p.future.done()]
        if not live:
            return
        start = time.perf_counter()
        results = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._run_in_thread, index, [p.inputs for p in live]
        )
        self._observer.batch(sum(p.rows for p in live), len(live), time.perf_counter() - start)
        for item, result in zip(live, results, strict=True):
            if item.future.done():  # its deadline passed while running
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _run_in_thread(self, index: int, requests: list[Arrays]) -> list[Arrays | Exception]:
        if self.policy.padded:
            return self._run_padded(index, requests)
        if len(requests) == 1:
            return [self._run_alone(index, requests[0])]
        rows = [next(iter(r.values())).shape[0] for r in requests]
        merged = {name: np.concatenate([r[name] for r in requests]) for name in requests[0]}
        try:
            return _split(self._run(index, merged), rows)
        except Exception as e:
            log.warning(
                "model %r: merged run of %d requests failed (%s); running each alone",
                self.name,
                len(requests),
                e,
            )
            return [self._run_alone(index, r) for r in requests]

    def _run_padded(self, index: int, requests: list[Arrays]) -> list[Arrays | Exception]:
        """The requests' rows and blank rows up to ``max_batch_size``, in one run.

        torch picks kernels (and their rounding) by batch size, so a row computed in a batch
        of 32 can differ in its last bits from the same row alone; at one fixed batch size
        every row is computed the same way wherever it sits, at the cost of computing the
        blank rows when few requests are waiting.
        """
        rows = [next(iter(r.values())).shape[0] for r in requests]
        spare = self.policy.max_batch_size - sum(rows)
        merged = {
            name: np.concatenate([r[name] for r in requests] + [_blank(requests[0][name], spare)])
            for name in requests[0]
        }
        try:
            return _split(self._run(index, merged), [*rows, spare])[: len(requests)]
        except Exception as e:
            if len(requests) == 1:
                return [e]
            log.warning(
                "model %r: merged run of %d requests failed (%s); running each alone",
                self.name,
                len(requests),
                e,
            )
            return [self._run_padded(index, [r])[0] for r in requests]

    def _run_alone(self, index: int, inputs: Arrays) -> Arrays | Exception:
        try:
            return self._run(index, inputs)
        except Exception as e:  # handed to the request's future, answered by the app
            return e


def _blank(like: np.ndarray, rows: int) -> np.ndarray:
    """``rows`` rows shaped like ``like``'s: zeros, or empty strings for BYTES."""
    fill = "" if like.dtype == object else 0
    return np.full((rows, *like.shape[1:]), fill, dtype=like.dtype)


def _split(outputs: Arrays, rows: list[int]) -> list[Arrays]:
    """Cut every output along dim 0 into the requests' row counts."""
    total = sum(rows)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise BatchingError(
                f"output {name!r} has shape {list(array.shape)} for a batch of {total} rows; "
                "its first dim is not the batch, so set max_batch_size 0 for this model"
            )
    bounds = np.cumsum(rows)[:-1]
    pieces = {name: np.split(array, bounds) for name, array in outputs.items()}
    return [{name: pieces[name][i] for name in outputs} for i in range(len(rows))]
