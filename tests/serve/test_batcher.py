"""The batcher alone, with a stand-in model: merging, splitting, limits, deadlines, faults."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from sonnx.serve.batcher import Arrays, Batcher, BatchPolicy
from sonnx.serve.errors import DeadlineExceededError, ModelUnavailableError, QueueFullError


class Observer:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []
        self.depths: list[int] = []

    def queue_depth(self, depth: int) -> None:
        self.depths.append(depth)

    def batch(self, rows: int, requests: int, seconds: float) -> None:
        self.batches.append((rows, requests))


def doubled(index: int, inputs: Arrays) -> Arrays:
    if (inputs["x"] < 0).any():
        raise ValueError("negative input")
    return {"y": inputs["x"] * 2, "z": inputs["x"].sum(axis=1, keepdims=True)}


def rows(value: float, count: int = 1, width: int = 3) -> Arrays:
    return {"x": np.full((count, width), value, np.float32)}


async def submit_all(batcher: Batcher, requests: list[Arrays], timeout: float = 10.0) -> list:
    loop = asyncio.get_running_loop()
    tasks = [batcher.submit(r, loop.time() + timeout) for r in requests]
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_queued_requests_are_merged_and_split_back() -> None:
    async def main() -> tuple[list, Observer]:
        observer = Observer()
        policy = BatchPolicy(max_batch_size=4, max_queue_delay_s=0.05)
        batcher = Batcher("m", doubled, policy, observer)
        requests = [rows(1), rows(2, count=2), rows(3), rows(4), rows(5)]
        results = await submit_all(batcher, requests)
        await batcher.close()
        return results, observer

    results, observer = asyncio.run(main())
    for value, result in zip([1, 2, 3, 4, 5], results, strict=True):
        assert np.all(result["y"] == 2 * value)
        assert result["y"].shape[1] == 3 and np.all(result["z"] == 3 * value)
    assert results[1]["y"].shape == (2, 3)
    assert observer.batches == [(4, 3), (2, 2)]  # rows, requests: never above max_batch_size
    assert observer.depths[-1] == 0


def test_only_stackable_requests_are_merged() -> None:
    async def main() -> Observer:
        observer = Observer()
        batcher = Batcher("m", doubled, BatchPolicy(8, 0.05), observer)
        await submit_all(batcher, [rows(1), rows(1, width=5), rows(2), rows(2, width=5)])
        await batcher.close()
        return observer

    assert asyncio.run(main()).batches == [(2, 2), (2, 2)]


def test_one_bad_request_fails_alone() -> None:
    async def main() -> list:
        batcher = Batcher("m", doubled, BatchPolicy(8, 0.05), Observer())
        results = await submit_all(batcher, [rows(1), rows(-1), rows(3)])
        await batcher.close()
        return results

    good, bad, other = asyncio.run(main())
    assert isinstance(bad, ValueError)
    assert np.all(good["y"] == 2) and np.all(other["y"] == 6)


def test_outputs_without_the_batch_dim_are_run_one_by_one() -> None:
    def total(index: int, inputs: Arrays) -> Arrays:
        return {"sum": np.array([inputs["x"].sum()])}

    async def main() -> list:
        batcher = Batcher("m", total, BatchPolicy(8, 0.05), Observer())
        results = await submit_all(batcher, [rows(1, count=2), rows(2)])
        await batcher.close()
        return results

    first, second = asyncio.run(main())
    assert first["sum"].tolist() == [6.0] and second["sum"].tolist() == [6.0]


class Gate:
    """A model whose runs wait until the test opens the gate; ``started`` tells when one has
    begun (an event to await, not a sleep)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.open = threading.Event()

    def __call__(self, index: int, inputs: Arrays) -> Arrays:
        self.started.set()
        assert self.open.wait(timeout=30)
        return {"y": inputs["x"]}


def test_full_queue_refuses_and_expired_requests_are_answered_504() -> None:
    async def main() -> tuple[list, Exception, Exception]:
        gate = Gate()
        batcher = Batcher("m", gate, BatchPolicy(0, 0.0, max_queue_size=2), Observer())
        loop = asyncio.get_running_loop()
        running = asyncio.ensure_future(batcher.submit(rows(1), loop.time() + 30))
        await loop.run_in_executor(None, gate.started.wait, 30)
        queued = asyncio.ensure_future(batcher.submit(rows(2), loop.time() + 30))
        expiring = asyncio.ensure_future(batcher.submit(rows(3), loop.time() + 0.01))
        for _ in range(100):  # let the two submitting tasks run up to their first await
            if batcher.depth == 2:
                break
            await asyncio.sleep(0)
        with pytest.raises(QueueFullError, match="max_queue_size 2"):
            await batcher.submit(rows(4), loop.time() + 30)
        expired = await asyncio.gather(expiring, return_exceptions=True)
        gate.open.set()
        results = await asyncio.gather(running, queued)
        await batcher.close()
        with pytest.raises(ModelUnavailableError, match="being unloaded"):
            await batcher.submit(rows(5), loop.time() + 30)
        return results, expired[0], None

    (first, second), expired, _ = asyncio.run(main())
    assert np.all(first["y"] == 1) and np.all(second["y"] == 2)
    assert isinstance(expired, DeadlineExceededError)


def test_close_finishes_queued_requests() -> None:
    async def main() -> list:
        gate = Gate()
        batcher = Batcher("m", gate, BatchPolicy(0, 0.0), Observer())
        loop = asyncio.get_running_loop()
        tasks = [asyncio.ensure_future(batcher.submit(rows(v), loop.time() + 30)) for v in (1, 2)]
        await loop.run_in_executor(None, gate.started.wait, 30)
        closing = asyncio.ensure_future(batcher.close())
        gate.open.set()
        await closing
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert [float(r["y"][0, 0]) for r in results] == [1.0, 2.0]
