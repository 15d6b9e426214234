"""The run state is per thread (per context): see :mod:`sonnx.run_state`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import torch

from sonnx import autograd
from sonnx.device import Device, default_device_for_run, get_default_device
from sonnx.engine.host_values import forget, host, place_inputs
from sonnx.engine.tracing import (
    defer_check,
    deferred_checks,
    defers_checks_on,
    tracing,
    value_checks,
)


def _in_thread(read: Callable[[], Any]) -> Any:
    """``read()`` in a new thread, its result (or the error it raised) returned."""
    found: list[Any] = []

    def run() -> None:
        try:
            found.append(read())
        except Exception as e:
            found.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return found[0]


def _while_set_in_another_thread(enter: Callable[[], Any], read: Callable[[], Any]) -> Any:
    """``read()`` here while another thread is inside the context manager ``enter()``."""
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with enter():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(10)
        return read()
    finally:
        release.set()
        thread.join()


def test_training_is_per_thread_and_a_new_thread_starts_with_false() -> None:
    autograd.training = True
    assert autograd.training is True
    assert _in_thread(lambda: autograd.training) is False

    def set_and_read() -> bool:
        autograd.training = True
        return autograd.training

    autograd.training = False
    assert _in_thread(set_and_read) is True
    assert autograd.training is False


def test_an_asyncio_task_starts_from_its_creators_flag_and_keeps_its_own() -> None:
    async def task(value: bool) -> tuple[bool, bool]:
        seen = autograd.training
        autograd.training = value
        await asyncio.sleep(0)
        return seen, autograd.training

    async def main() -> tuple[Any, ...]:
        autograd.training = True
        results = await asyncio.gather(task(False), task(True))
        return (*results, autograd.training)

    assert asyncio.run(main()) == ((True, False), (True, True), True)


def test_tracing_in_one_thread_leaves_value_checks_on_in_another() -> None:
    assert _while_set_in_another_thread(tracing, value_checks) is True
    with tracing():
        assert value_checks() is False
        assert _in_thread(value_checks) is True
    assert value_checks() is True


def test_deferred_checks_are_collected_by_the_run_of_their_own_thread() -> None:
    meta = torch.device("meta")
    assert _while_set_in_another_thread(deferred_checks, lambda: defers_checks_on(meta)) is False
    with deferred_checks():
        assert defers_checks_on(meta)
        flag = torch.tensor(True)
        error = _in_thread(lambda: defer_check(flag, lambda: "never collected"))
        assert isinstance(error, RuntimeError)


def test_a_host_original_is_found_only_by_the_thread_that_placed_it() -> None:
    sizes = torch.tensor([2, 3])
    placed = place_inputs("Reshape", [torch.empty(6, device="meta"), sizes])
    copy = placed[1]
    try:
        assert copy.device.type == "meta" and host(copy) is sizes
        assert _in_thread(lambda: host(copy)) is copy
    finally:
        forget(placed)
    assert host(copy) is copy


def test_a_runs_default_device_is_its_threads_only() -> None:
    before = get_default_device()
    with default_device_for_run(Device("meta")):
        assert get_default_device().torch_device.type == "meta"
        assert _in_thread(get_default_device) is before
    assert get_default_device() is before
