"""The decode steps after the prompt (sonnx.generation.decode_steps).

Over onnxruntime-genai's shared buffer every step feeds the mask at the buffer's full width
(static shapes): its greedy tokens are exactly those of the mask that grows a column per step,
eagerly and in graph mode, where graph mode compiles the one decode shape once even when it
compiles a graph per shape. The CUDA-graph capture of that step is checked on the CPU with a
stand-in for the captured graph (which buffers it reads and writes, what it replays), and on a
GPU as it is (marked ``cuda``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import pytest
import torch

import sonnx
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.generation import decode_steps as steps_module
from sonnx.generation import detect_layout, load_decoder
from sonnx.generation.decode_steps import (
    CapturedSteps,
    GrowingSteps,
    StaticSteps,
    static_shapes,
)
from sonnx.generation.decoder import Cache, Decoder
from sonnx.generation.head_rows import head_on_kept_rows
from sonnx.generation.search import prompt_batch
from sonnx.run_state import CACHES_IN_PLACE
from sonnx.runtime.cuda_graphs import CapturedRun
from sonnx.tensor import Tensor, computed_tensor
from sonnx.testing.gqa_decoder import GENAI_CONFIG, gqa_decoder
from tests.genai_builds import SENTENCES, build, unbudgeted_graph_decoder

NEW_TOKENS = 32
StepsOf = Callable[[Decoder, Cache, torch.Tensor, torch.Tensor, bool], object]


def _growing(decoder: Decoder, cache: Cache, mask, positions, padded: bool) -> GrowingSteps:
    return GrowingSteps(decoder, cache, mask, positions, padded)


def _greedy(decoder: Decoder, prompts: list[list[int]], new: int, steps_of: StepsOf) -> np.ndarray:
    """The greedy tokens (batch, new) of ``prompts`` (left-padded) from the decode steps
    ``steps_of`` makes after the prompt run, as generate's loop runs them."""
    ids, mask, padded = prompt_batch(prompts, None, 0, decoder.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = decoder.empty_cache(ids.shape[0], ids.shape[1] + new)
    logits, cache = decoder.step(ids, mask, positions, cache, left_padded=padded)
    steps = steps_of(decoder, cache, mask, positions, padded)
    tokens = [logits.argmax(-1)]
    for _ in range(new - 1):
        tokens.append(steps(tokens[-1]).argmax(-1))
    return torch.stack(tokens, 1).cpu().numpy()


def _llama_prompts(model, rows: int) -> list[list[int]]:
    return [model.tokenizer.encode(s) for s in SENTENCES[:rows]]


@pytest.mark.parametrize("rows", [1, 3])
def test_static_steps_give_the_tokens_of_a_growing_mask(rows: int) -> None:
    """generate decodes the genai build at one shape; one prompt, and three of different
    lengths left-padded, give the growing mask's 32 greedy tokens exactly."""
    model = load_decoder(build("llama", "fp32"))
    assert static_shapes(model.layout)
    prompts = _llama_prompts(model, rows)
    expected = _greedy(Decoder(model.rep, model.layout), prompts, NEW_TOKENS, _growing)
    got = model.generate(prompts, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    np.testing.assert_array_equal(got[:, -NEW_TOKENS:], expected)


def test_every_static_step_feeds_the_same_shapes_and_the_cache_buffers() -> None:
    """The mask is the buffer's width, 1s over each sequence's rows and its new token, 0s
    after; the position is the new token's; the past is the buffers themselves."""
    rep = sonnx.prepare(gqa_decoder())
    decoder = Decoder(rep, detect_layout(rep, GENAI_CONFIG))
    cache = decoder.empty_cache(2, 10)
    lengths = torch.tensor([4, 2])
    steps = StaticSteps(decoder, cache, lengths)
    for step in range(1, 4):
        feed = {n: t.data for n, t in steps.feed(torch.tensor([7, 8])).items()}
        expected_mask = (torch.arange(10) < (lengths + step)[:, None]).long()
        torch.testing.assert_close(feed["attention_mask"], expected_mask, rtol=0, atol=0)
        assert feed["input_ids"].tolist() == [[7], [8]]
        assert feed["past_key_values.0.key"] is cache.keys[0]
        assert feed["past_key_values.0.value"] is cache.values[0]


def test_graph_mode_compiles_a_growing_decode_step_once(llama_dir, llama_rep) -> None:
    """An optimum export (the past concatenated with the new rows, growing a row per step):
    greedy tokens equal eager's for one prompt and for a left-padded batch of two, from two
    compiled graphs in all. The prompt's past has 0 rows, which graph mode once traced as a
    symbol that inductor could not compile (a size hint of 0 divides by zero), and so it
    compiled every later shape, each decode length, on its own."""
    # No compile budget: this counts compiles, which a slow or loaded machine must not cut.
    graph = sonnx.prepare(str(llama_dir / "model.onnx"), use_graph=True, compile_budget=None)
    for prompts in ([[1, 5, 9, 33, 7]], [[1, 5, 9, 33, 7], [1, 4]]):
        expected = llama_rep.generate(prompts, max_new_tokens=8, eos_token_id=None)
        got = graph.generate(prompts, max_new_tokens=8, eos_token_id=None)
        np.testing.assert_array_equal(got, expected)
    runner = head_on_kept_rows(graph, "logits").graph_runner  # what generation ran
    assert runner.compile_count == 2
    assert runner.fallback is None and all(part.compiled for part in runner.parts())


def test_graph_mode_compiles_the_static_decode_step_once() -> None:
    """With a graph compiled per input shape (no symbolic sizes), a left-padded batch of three
    and 32 new tokens compile two graphs, the prompt's and the one decode step's, and give the
    growing mask's tokens run eagerly."""
    model_dir = build("llama", "fp32")
    eager, graph = load_decoder(model_dir), unbudgeted_graph_decoder(model_dir)
    runner = graph.running_rep.graph_runner
    runner.dynamic = False
    prompts = _llama_prompts(eager, 3)
    expected = _greedy(Decoder(eager.rep, eager.layout), prompts, NEW_TOKENS, _growing)
    got = graph.generate(prompts, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    np.testing.assert_array_equal(got[:, -NEW_TOKENS:], expected)
    assert runner.compile_count == 2
    assert runner.fallback is None and all(part.compiled for part in runner.parts())


class _EagerReplay:
    """Stands in for a captured CUDA graph on the CPU: a replay runs the model on the
    capture's input buffers (writing the held cache in place, as the captured kernels do) and
    copies its outputs into the capture's output buffers."""

    def __init__(self, rep, inputs: dict[str, torch.Tensor], outputs: list[torch.Tensor]):
        self.rep, self.inputs, self.outputs = rep, inputs, outputs

    def replay(self) -> None:
        token = CACHES_IN_PLACE.set(True)
        try:
            outs = self.rep.run({n: computed_tensor(t) for n, t in self.inputs.items()})
        finally:
            CACHES_IN_PLACE.reset(token)
        for buffer, out in zip(self.outputs, outs, strict=True):
            buffer.copy_(out.data)


def _capture_on_the_cpu(rep, feeds: dict[str, Tensor], held=()) -> CapturedRun:
    """capture_cuda_graph's bookkeeping around an :class:`_EagerReplay`: held feeds are the
    input buffers, other feeds are copied; the outputs are buffers of the capture's own."""
    inputs = {n: f.data if n in held else f.data.clone() for n, f in feeds.items()}
    outputs = [t.data.clone() for t in rep.run(dict(feeds))]
    replay = _EagerReplay(rep, inputs, outputs)
    return CapturedRun(replay, inputs, {}, outputs, keep=None, held=frozenset(held))


def test_captured_steps_replay_into_the_cache_buffers(monkeypatch) -> None:
    """The decode step is captured once, on the first token, with the cache buffers held;
    every later token replays it, the cache buffers take each step's rows, and the tokens are
    those of the eager static steps."""
    monkeypatch.setattr(steps_module, "capture_cuda_graph", _capture_on_the_cpu)
    rep = sonnx.prepare(gqa_decoder())
    layout = detect_layout(rep, GENAI_CONFIG)
    prompts, new = [[3, 5, 7, 9, 11], [4, 6], [1, 2, 3]], 8
    made: list[CapturedSteps] = []

    def captured(decoder, cache, mask, positions, padded) -> CapturedSteps:
        made.append(CapturedSteps(decoder, cache, mask.sum(1)))
        return made[-1]

    got = _greedy(Decoder(rep, layout), prompts, new, captured)
    expected = rep.generate(prompts, max_new_tokens=new, layout=layout)
    np.testing.assert_array_equal(got, expected[:, -new:])
    (steps,) = made
    run = steps.captured
    assert run.replays == new - 1 and run.held == set(layout.past_keys + layout.past_values)
    assert run.inputs["past_key_values.0.key"] is steps.cache.keys[0]
    # Rows 0 .. length + new - 2 of each sequence are written (the last token is not fed).
    filled = (steps.cache.keys[0].abs().sum((1, 3)) > 0).sum(1)
    assert filled.tolist() == [len(p) + new - 1 for p in prompts]


def _gqa_rep(use_graph: bool) -> tuple[sonnx.SingaRep, object]:
    rep = sonnx.prepare(gqa_decoder(), use_graph=use_graph)
    return rep, detect_layout(rep, GENAI_CONFIG)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("beams", r"num_beams=2 reorders the cache every step"),
        ("growing", r"needs a KV cache in one shared buffer .* share_buffer=False"),
        ("eager", r"prepare the model with use_graph=True"),
        ("cpu", r"needs a CUDA device; the model is prepared on .*cpu"),
    ],
)
def test_cuda_graph_is_refused_where_it_cannot_hold(case: str, message: str) -> None:
    rep, layout = _gqa_rep(use_graph=case != "eager")
    options = {"num_beams": 2} if case == "beams" else {}
    if case == "growing":
        layout = dataclasses.replace(layout, share_buffer=False)
    with pytest.raises(BadInputError, match=message):
        rep.generate([3, 5, 7], max_new_tokens=4, layout=layout, cuda_graph=True, **options)
    assert rep.graph_runner is None or rep.graph_runner.compile_count == 0


@pytest.mark.cuda
def test_a_decode_step_captured_on_the_gpu_gives_the_cpus_tokens(monkeypatch) -> None:
    """Graph mode on the GPU with cuda_graph=True: the decode step is captured once and
    replayed for each later token; a left-padded batch's greedy tokens equal the CPU's eager
    ones (TF32 off)."""
    device = Device(os.environ.get("SONNX_CUDA_TESTS_ON", "cuda"))
    if device.torch_device.type != "cuda":
        pytest.skip("CUDA graphs need CUDA: nothing to capture on the CPU standing in for it")
    captures: list[CapturedRun] = []
    real = steps_module.capture_cuda_graph

    def counted(*args, **kwargs) -> CapturedRun:
        captures.append(real(*args, **kwargs))
        return captures[-1]

    monkeypatch.setattr(steps_module, "capture_cuda_graph", counted)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    prompts, new = [[3, 5, 7, 9, 11], [4, 6], [1, 2, 3]], 6
    cpu, layout = _gqa_rep(use_graph=False)
    expected = cpu.generate(prompts, max_new_tokens=new, layout=layout)
    gpu = sonnx.prepare(gqa_decoder(), device=device, use_graph=True)
    got = gpu.generate(prompts, max_new_tokens=new, layout=layout, cuda_graph=True)
    np.testing.assert_array_equal(got, expected)
    (run,) = captures
    assert run.replays == new - 1
