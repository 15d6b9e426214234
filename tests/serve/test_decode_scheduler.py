"""Batched prefills and decode steps give each request the tokens it gets alone, in every cache
layout: optimum's concatenated past (left-padded in a batch) and GroupQueryAttention's
(right-padded), with onnxruntime-genai's shared buffer or a growing past."""

from __future__ import annotations

import asyncio
import dataclasses
import queue

import numpy as np
import pytest

from sonnx.generation import load_decoder
from sonnx.generation.sampling import Sampling
from sonnx.serve.decode_scheduler import DecodeScheduler, GenerationRequest
from sonnx.serve.errors import ModelUnavailableError
from tests.genai_builds import build
from tests.generation.optimum_models import export_optimum_style, tiny_llama

PROMPTS = [[1, 5, 9, 33, 7], [1, 4], [1, 8, 8, 3], [1, 20, 21], [1, 3, 3, 3, 3, 3, 3], [1, 9],
           [1, 40, 41, 42], [1, 6, 7]]
LENGTHS = [12, 5, 9, 12, 3, 8, 12, 6]


@pytest.fixture(scope="module", params=["optimum", "genai", "genai-growing"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """optimum's export; genai's build with its shared past buffer, and with a past that grows
    (GroupQueryAttention either way, so right-padded in a batch)."""
    if request.param == "optimum":
        return load_decoder(export_optimum_style(tiny_llama(), tmp_path_factory.mktemp("llama")))
    model = load_decoder(build("llama", "fp32"))
    if request.param == "genai-growing":
        model.layout = dataclasses.replace(model.layout, share_buffer=False)
    return model


def run_all(model, requests: list[tuple[list[int], int, Sampling, int | None]]):
    """Submit every request at once; their tokens and the sizes of the prefills and the
    decode steps."""
    prefills: list[int] = []
    steps: list[int] = []
    scheduler = DecodeScheduler(
        model,
        on_step=lambda rows, s: steps.append(rows),
        on_prefill=lambda rows, s: prefills.append(rows),
        gather_s=0.5,  # the submissions below are microseconds apart
    )
    outputs = [queue.Queue() for _ in requests]
    for (prompt, length, sampling, seed), out in zip(requests, outputs, strict=True):
        scheduler.submit(GenerationRequest(prompt, length, sampling, seed, frozenset(), out.put))
    tokens = []
    for out in outputs:
        got = []
        while (event := out.get(timeout=60)) is not None:
            assert not isinstance(event, BaseException), event
            got.append(event)
        tokens.append(got)
    asyncio.run(scheduler.close())
    return tokens, prefills, steps


def test_eight_concurrent_requests_equal_each_alone_with_batched_prefill_and_steps(
    model,
) -> None:
    requests = [(p, n, Sampling(), None) for p, n in zip(PROMPTS, LENGTHS, strict=True)]
    tokens, prefills, steps = run_all(model, requests)
    for (prompt, length, _, _), got in zip(requests, tokens, strict=True):
        alone = model.rep.generate(prompt, max_new_tokens=length, layout=model.layout)[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])
    assert prefills == [8]  # the eight prompts (lengths 2 to 7) in one left-padded pass
    assert max(steps) == 8 and sum(steps) == sum(LENGTHS) - len(LENGTHS)


def test_seeded_sampling_in_a_batch_equals_it_alone(model) -> None:
    sampling = Sampling(True, temperature=1.3, top_k=30)
    requests = [(p, 10, sampling, seed) for seed, p in enumerate(PROMPTS[:3])]
    tokens, prefills, _ = run_all(model, requests)
    assert prefills == [3]
    for (prompt, _, _, seed), got in zip(requests, tokens, strict=True):
        alone = model.rep.generate(
            prompt, max_new_tokens=10, do_sample=True, temperature=1.3, top_k=30, seed=seed,
            layout=model.layout,
        )[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])


def test_a_failing_request_ends_alone_even_in_a_batched_prefill(model) -> None:
    bad = [10**6, 1]  # a token id past the vocabulary
    prefills: list[int] = []
    scheduler = DecodeScheduler(
        model, on_prefill=lambda rows, s: prefills.append(rows), gather_s=0.5
    )
    failing, fine = queue.Queue(), queue.Queue()
    scheduler.submit(GenerationRequest(bad, 4, Sampling(), None, frozenset(), failing.put))
    scheduler.submit(GenerationRequest([1, 5], 3, Sampling(), None, frozenset(), fine.put))
    assert isinstance(failing.get(timeout=60), BaseException)
    got = [fine.get(timeout=60) for _ in range(4)]
    alone = model.rep.generate([1, 5], max_new_tokens=3, layout=model.layout)[0, 2:]
    assert got == [*alone.tolist(), None]
    assert prefills == [1]  # the batch of two failed; the good prompt was then run alone
    asyncio.run(scheduler.close())


def test_a_closed_scheduler_finishes_its_requests_and_refuses_new_ones(model) -> None:
    scheduler = DecodeScheduler(model)
    tokens = queue.Queue()
    scheduler.submit(GenerationRequest([1, 5], 6, Sampling(), None, frozenset(), tokens.put))
    asyncio.run(scheduler.close())
    got = [tokens.get(timeout=1) for _ in range(7)]
    alone = model.rep.generate([1, 5], max_new_tokens=6, layout=model.layout)[0, 2:]
    assert got == [*alone.tolist(), None]
    late = queue.Queue()
    scheduler.submit(GenerationRequest([1, 5], 2, Sampling(), None, frozenset(), late.put))
    assert isinstance(late.get(timeout=1), ModelUnavailableError)
