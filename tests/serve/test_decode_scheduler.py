"""Batched prefills and decode steps give each request the tokens it gets alone, in every cache
layout: optimum's concatenated past (left-padded in a batch) and GroupQueryAttention's
(right-padded), with onnxruntime-genai's shared buffer (one batch buffer written in place) or a
growing past. Beam requests share the batch with the others, one row per beam."""

from __future__ import annotations

import asyncio
import dataclasses
import queue

import numpy as np
import pytest
import torch

from sonnx.generation import load_decoder
from sonnx.generation.decoder import Cache, Decoder
from sonnx.generation.sampling import Sampling
from sonnx.serve.batch_cache import Joining, SharedBatchBuffer
from sonnx.serve.decode_scheduler import DecodeScheduler, GenerationRequest
from sonnx.serve.errors import InvalidRequestError, ModelUnavailableError
from sonnx.testing.host_reads import count_host_reads, device_values
from tests.genai_builds import build, unbudgeted_graph_decoder
from tests.generation.optimum_models import export_optimum_style, tiny_llama

PROMPTS = [
    [1, 5, 9, 33, 7],
    [1, 4],
    [1, 8, 8, 3],
    [1, 20, 21],
    [1, 3, 3, 3, 3, 3, 3],
    [1, 9],
    [1, 40, 41, 42],
    [1, 6, 7],
]
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


def run_all(
    model,
    requests: list[tuple],
    waves: list[list[int]] | None = None,
):
    """Submit the requests, (prompt, new tokens, sampling, seed) or with the number of beams
    and the end tokens after those, all at once or in ``waves`` (lists of indices, each
    submitted once every request of the one before has its first token: a beam request's
    comes at its end); their tokens and the sizes of the prefills and the decode steps."""
    prefills: list[int] = []
    steps: list[int] = []
    scheduler = DecodeScheduler(
        model,
        on_step=lambda rows, s: steps.append(rows),
        on_prefill=lambda rows, s: prefills.append(rows),
        gather_s=0.5 if waves is None else 0.0,  # all at once: microseconds apart
    )
    outputs = [queue.Queue() for _ in requests]
    tokens: list[list[int]] = [[] for _ in requests]

    def take(i: int) -> int | None:
        event = outputs[i].get(timeout=60)
        assert not isinstance(event, BaseException), event
        if event is not None:
            tokens[i].append(event)
        return event

    for wave in waves or [list(range(len(requests)))]:
        for i in wave:
            prompt, length, sampling, seed, *more = requests[i]
            beams, ends = more[0] if more else 1, more[1] if len(more) > 1 else frozenset()
            request = GenerationRequest(
                prompt, length, sampling, seed, ends, outputs[i].put, num_beams=beams
            )
            scheduler.submit(request)
        for i in wave:
            take(i)
    for i in range(len(requests)):
        while take(i) is not None:
            pass
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


def test_requests_joining_and_leaving_at_different_times_equal_each_alone(model) -> None:
    """Four waves, each submitted once the one before has its first tokens: sequences join a
    running batch (with a shared buffer: into free rows, the buffer growing in rows and in
    length) while others finish and leave (their rows filled from the end)."""
    waves = [[1], [0, 2], [4, 5], [3, 6, 7]]  # the first sequence may reach 7 cache rows, later 17
    requests = [(p, n, Sampling(), None) for p, n in zip(PROMPTS, LENGTHS, strict=True)]
    tokens, prefills, steps = run_all(model, requests, waves)
    for (prompt, length, _, _), got in zip(requests, tokens, strict=True):
        alone = model.rep.generate(prompt, max_new_tokens=length, layout=model.layout)[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])
    assert sum(prefills) == 8 and len(prefills) >= len(waves)
    assert sum(steps) == sum(LENGTHS) - len(LENGTHS) and len(set(steps)) > 2


def test_seeded_sampling_in_a_batch_equals_it_alone(model) -> None:
    sampling = Sampling(True, temperature=1.3, top_k=30)
    requests = [(p, 10, sampling, seed) for seed, p in enumerate(PROMPTS[:3])]
    tokens, prefills, _ = run_all(model, requests)
    assert prefills == [3]
    for (prompt, _, _, seed), got in zip(requests, tokens, strict=True):
        alone = model.rep.generate(
            prompt,
            max_new_tokens=10,
            do_sample=True,
            temperature=1.3,
            top_k=30,
            seed=seed,
            layout=model.layout,
        )[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])


def test_beam_and_greedy_requests_in_one_batch_each_equal_their_run_alone(model) -> None:
    """Two greedy requests run; three beam requests join them (3 beams with no end token and
    with one that ends hypotheses early, 2 beams) in one prefill of three prompts, then
    decode steps of up to 2 + 3 + 3 + 2 rows, every beam request's rows reordered among
    themselves each step; each request gets the tokens ``rep.generate`` gives it alone."""
    unended = model.rep.generate(PROMPTS[0], max_new_tokens=8, layout=model.layout)[0]
    end = frozenset({int(unended[len(PROMPTS[0]) + 2])})
    requests = [
        (PROMPTS[0], 12, Sampling(), None, 3, frozenset()),
        (PROMPTS[1], 9, Sampling(), None),
        (PROMPTS[0], 12, Sampling(), None, 3, end),
        (PROMPTS[2], 12, Sampling(), None),
        (PROMPTS[3], 6, Sampling(), None, 2, frozenset()),
    ]
    tokens, prefills, steps = run_all(model, requests, waves=[[1, 3], [0, 2, 4]])
    for (prompt, length, _, _, *beams), got in zip(requests, tokens, strict=True):
        beams, ends = beams or (1, frozenset())
        alone = model.rep.generate(
            prompt,
            max_new_tokens=length,
            num_beams=beams,
            eos_token_id=sorted(ends),
            layout=model.layout,
        )[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])
    assert prefills == [2, 3] and max(steps) == 10


def test_a_cancelled_beam_request_leaves_the_batch_at_the_next_step(model) -> None:
    """A beam request's client goes away after two decode steps: its three rows leave the
    batch at once, it gets nothing more, and the greedy request beside it goes on."""
    steps: list[int] = []
    beams, greedy = queue.Queue(), queue.Queue()
    asked = GenerationRequest(PROMPTS[0], 12, Sampling(), None, frozenset(), beams.put, 3)

    def stepped(rows: int, seconds: float) -> None:
        steps.append(rows)
        if len(steps) == 2:
            asked.cancelled.set()

    scheduler = DecodeScheduler(model, on_step=stepped, gather_s=0.5)
    scheduler.submit(asked)
    scheduler.submit(GenerationRequest(PROMPTS[1], 6, Sampling(), None, frozenset(), greedy.put))
    got = [greedy.get(timeout=60) for _ in range(7)]
    asyncio.run(scheduler.close())
    alone = model.rep.generate(PROMPTS[1], max_new_tokens=6, layout=model.layout)[0, 2:]
    assert got == [*alone.tolist(), None] and beams.empty()
    assert steps == [4, 4, 1, 1, 1]


def test_a_beam_request_wider_than_the_batch_is_refused(model) -> None:
    scheduler = DecodeScheduler(model, max_batch=4)
    refused = queue.Queue()
    scheduler.submit(GenerationRequest([1, 5], 4, Sampling(), None, frozenset(), refused.put, 5))
    error = refused.get(timeout=1)
    assert isinstance(error, InvalidRequestError) and "at most 4" in str(error)
    asyncio.run(scheduler.close())


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
    tokens, beams = queue.Queue(), queue.Queue()
    scheduler.submit(GenerationRequest([1, 5], 6, Sampling(), None, frozenset(), tokens.put))
    scheduler.submit(GenerationRequest([1, 4], 6, Sampling(), None, frozenset(), beams.put, 2))
    asyncio.run(scheduler.close())
    got = [tokens.get(timeout=1) for _ in range(7)]
    alone = model.rep.generate([1, 5], max_new_tokens=6, layout=model.layout)[0, 2:]
    assert got == [*alone.tolist(), None]
    got = [beams.get(timeout=1) for _ in range(7)]
    alone = model.rep.generate(
        [1, 4], max_new_tokens=6, num_beams=2, eos_token_id=None, layout=model.layout
    )[0, 2:]
    assert got == [*alone.tolist(), None]
    late = queue.Queue()
    scheduler.submit(GenerationRequest([1, 5], 2, Sampling(), None, frozenset(), late.put))
    assert isinstance(late.get(timeout=1), ModelUnavailableError)


def test_a_shared_buffer_batch_steps_in_place_on_one_buffer() -> None:
    """With genai's shared buffer, every decode step of a batch that nobody joins feeds views
    of the same buffers (fewer rows as sequences finish) and the graph returns them as the
    present: no step allocates or copies a cache."""
    model = load_decoder(build("llama", "fp32"))
    scheduler = DecodeScheduler(model, gather_s=0.5)
    assert isinstance(scheduler.batch, SharedBatchBuffer)
    decoder, fed = scheduler.decoder, []
    step = decoder.step

    def watched(ids, mask, positions, cache, **options):
        logits, present = step(ids, mask, positions, cache, **options)
        if mask.shape[1] > ids.shape[1]:  # a decode step (the prompts are 2 to 7 tokens)
            pasts, presents = cache.keys + cache.values, present.keys + present.values
            fed.append(([p.data_ptr() for p in pasts], [p.shape[0] for p in pasts]))
            assert [p.data_ptr() for p in presents] == fed[-1][0]
        return logits, present

    decoder.step = watched
    outputs = [queue.Queue() for _ in PROMPTS]
    for prompt, length, out in zip(PROMPTS, LENGTHS, outputs, strict=True):
        scheduler.submit(GenerationRequest(prompt, length, Sampling(), None, frozenset(), out.put))
    for out in outputs:
        while (event := out.get(timeout=60)) is not None:
            assert not isinstance(event, BaseException), event
    asyncio.run(scheduler.close())
    assert len(fed) == max(LENGTHS) - 1
    assert all(pointers == fed[0][0] for pointers, _ in fed)  # one buffer per layer throughout
    assert len(set(fed[0][0])) == 2 * model.layout.layers
    rows = [sizes[0] for _, sizes in fed]
    assert rows[0] == 8 and rows[-1] == 3 and rows == sorted(rows, reverse=True)


def test_leaving_rows_are_filled_from_the_end_of_the_shared_buffer() -> None:
    model = load_decoder(build("llama", "fp32"))
    batch = SharedBatchBuffer(Decoder(model.rep, model.layout), max_rows=4)
    lay = model.layout

    def cache(value: float, length: int) -> Cache:
        rows = torch.full((1, lay.kv_heads, length, lay.head_size), value)
        return Cache([rows] * lay.layers, [rows] * lay.layers)

    batch.join([Joining(cache(1.0, 3), 3, 6)])
    batch.join([Joining(cache(2.0, 2), 2, 9), Joining(cache(3.0, 4), 4, 5)])
    assert batch.keys[0].shape[0] == 3 and batch.keys[0].shape[2] == 9  # grown to fit both
    assert batch.retain([False, True, True]) == [2, 1]
    kept = batch.cache()
    assert kept.keys[0].shape[0] == 2 and batch.rows == 2
    assert bool((kept.keys[1][0, :, :4] == 3.0).all())  # the last row moved to the first
    assert bool((kept.values[0][1, :, :2] == 2.0).all())
    assert batch.retain([False, False]) == [] and batch.keys == []  # memory given back


def test_a_decode_step_reads_its_rows_tokens_back_in_one_read(model) -> None:
    """Counted in the worker thread, with the weights standing in for device memory: a step
    of two greedy rows and a three-beam request's rows reads the chosen tokens and beams once,
    not once a row or request (the beams' reordering reads nothing). (The step's own value
    checks read the token ids the host uploaded, which the CPU stand-in does not see as device
    values.)"""
    scheduler = DecodeScheduler(model, gather_s=0.5)
    step, reads = scheduler._step, []
    weights = device_values(model.running_rep, {})

    def counted(running):
        with count_host_reads(weights) as seen:
            going = step(running)
        reads.append((len(running), seen.count))
        return going

    scheduler._step = counted
    outputs = [queue.Queue() for _ in range(3)]
    for prompt, length, out, beams in zip(PROMPTS, LENGTHS, outputs, [1, 1, 3], strict=False):
        scheduler.submit(
            GenerationRequest(prompt, length, Sampling(), None, frozenset(), out.put, beams)
        )
    for out in outputs:
        while (event := out.get(timeout=60)) is not None:
            assert not isinstance(event, BaseException), event
    asyncio.run(scheduler.close())
    assert reads[0] == (5, 1) and all(count == 1 for _, count in reads)


def test_graph_mode_batches_equal_eager_from_two_compiled_graphs() -> None:
    """A version served with ``use_graph`` (genai's shared buffer): a request runs alone, a
    greedy and a two-beam request join it (a batched prefill of two, then decode steps of
    four, three and one rows over a buffer grown in rows and length, beam rows reordered),
    and each gets eager's tokens from two compiled graphs in all (the prefill's and the
    decode step's, whatever the batch or the buffer's size)."""
    model_dir = build("llama", "fp32")
    eager, graph = load_decoder(model_dir), unbudgeted_graph_decoder(model_dir)
    requests = [
        (PROMPTS[0], 6, Sampling(), None, 1),
        (PROMPTS[1], 3, Sampling(), None, 1),
        (PROMPTS[2], 5, Sampling(), None, 2),
    ]
    tokens, prefills, steps = run_all(graph, requests, waves=[[0], [1, 2]])
    for (prompt, length, _, _, beams), got in zip(requests, tokens, strict=True):
        alone = eager.rep.generate(
            prompt, max_new_tokens=length, num_beams=beams, eos_token_id=None, layout=eager.layout
        )[0]
        np.testing.assert_array_equal(got, alone[len(prompt) :])
    assert prefills == [1, 2] and max(steps) == 4 and min(steps) == 1
    runner = graph.running_rep.graph_runner
    assert runner.compile_count == 2
    assert runner.fallback is None and all(part.compiled for part in runner.parts())
