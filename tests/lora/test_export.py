"""LoRA (fp32 base) and QLoRA (int4 base) fine-tuning of a tiny onnxruntime-genai llama on a
made-up continuation, and the exported directories served by onnxruntime-genai: merged, and
base + ``.onnx_adapter``. The untouched base does not produce the continuation."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import sonnx.lora as lora
from sonnx import autograd, opt
from sonnx.errors import BadInputError
from sonnx.lora import CausalLM
from sonnx.lora.causal_lm import IGNORE_INDEX
from sonnx.tensor import to_numpy
from tests.genai_builds import BOS_ID, EOS_ID, build

og = pytest.importorskip("onnxruntime_genai")

PROMPTS = ("the quick brown", "hello world", "once upon a", "sonnx runs")
CONTINUATION = " lazy onnx fox"
#: A second fine-tune's continuation, served beside the first on one base.
OTHER_CONTINUATION = " small world"
#: The bound the fine-tune must reach (mean next-token cross-entropy on the continuation).
LOSS_BOUND = 0.05
STEPS = 40


def _encode(model_dir: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids


def _batch(
    model_dir: Path, continuation: str = CONTINUATION
) -> tuple[np.ndarray, np.ndarray, list[list[int]], list[int]]:
    """Right-padded ids and labels (prompt and padding ignored), the prompts, the continuation."""
    prompts = [[BOS_ID, *_encode(model_dir, p)] for p in PROMPTS]
    tail = [*_encode(model_dir, continuation), EOS_ID]
    width = max(len(p) for p in prompts) + len(tail)
    ids = np.full((len(prompts), width), EOS_ID, np.int64)
    labels = np.full_like(ids, IGNORE_INDEX)
    for i, p in enumerate(prompts):
        ids[i, : len(p) + len(tail)] = p + tail
        labels[i, len(p) : len(p) + len(tail)] = tail
    return ids, labels, prompts, tail[:-1]


@functools.cache
def _tuned(
    precision: str, continuation: str = CONTINUATION, rank: int = 8, steps: int = STEPS
) -> tuple[CausalLM, float]:
    """The llama build of ``precision`` with adapters on every weight product of the decoder
    layers and on the head, fine-tuned; and its last loss. (The random build's frozen head,
    initialised with std 0.02, cannot make any token likely: its logits stay within a few
    tenths of each other, so the head takes an adapter too.)"""
    torch.manual_seed(0)
    model_dir = build("llama", precision)
    model = CausalLM(model_dir)
    lora.add(model.rep, [r"layers\.\d+/.*_proj", "lm_head"], rank=rank, alpha=2 * rank)
    ids, labels, _, _ = _batch(model_dir, continuation)
    model.set_optimizer(opt.Adam(lr=1e-2))
    previous = autograd.training
    model.train()
    try:
        for _ in range(steps):
            _, loss = model.train_one_batch(ids, labels)
    finally:
        autograd.training = previous
    return model, float(to_numpy(loss))


def og_generator(
    model_dir: Path, prompt: list[int], adapter: Path | None = None, new_tokens: int = 8
) -> tuple[og.Generator, og.Adapters | None]:
    """onnxruntime-genai's greedy generator for ``model_dir`` with ``prompt`` appended and
    ``adapter`` active, and the adapters it uses (to be kept alive beside it)."""
    model = og.Model(str(model_dir))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    adapters = None
    if adapter is not None:
        adapters = og.Adapters(model)
        adapters.load(str(adapter), "tuned")
        generator.set_active_adapter(adapters, "tuned")
    generator.append_tokens(np.array([prompt], np.int32))
    return generator, adapters


def _generate(model_dir: Path, prompt: list[int], adapter: Path | None = None) -> list[int]:
    """Greedy continuation of ``prompt`` by onnxruntime-genai (new tokens only)."""
    generator, _adapters = og_generator(model_dir, prompt, adapter)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(prompt) :]


def _decoded(model_dir: Path, tokens: list[int]) -> str:
    return og.Tokenizer(og.Model(str(model_dir))).decode(np.array(tokens, np.int32))


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_fine_tune_reaches_the_loss_bound_with_the_base_frozen(precision: str) -> None:
    model, loss = _tuned(precision)
    assert loss < LOSS_BOUND
    trainable = [n for n, t in model.rep.params.items() if t.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    if precision == "int4":
        ops = {n.op_type for n in model.rep.model.graph.node}
        assert "MatMulNBits" in ops


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_merged_export_generates_the_learned_continuation(precision: str, tmp_path) -> None:
    model, _ = _tuned(precision)
    source = build("llama", precision)
    _, _, prompts, tail = _batch(source)
    out = lora.export(model.rep, tmp_path / "merged", source, merged=True)
    exported = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in exported.graph.node]
    if precision == "int4":
        # The 4-bit weights stay 4-bit; the adapters ride beside them.
        assert ops.count("MatMulNBits") == sum(
            n.op_type == "MatMulNBits"
            for n in onnx.load(str(source / "model.onnx"), load_external_data=False).graph.node
        )
        assert any("lora_A" in n.name for n in exported.graph.node)
    else:
        assert not any("lora" in n.name for n in exported.graph.node)
    for prompt in prompts:
        assert _generate(out, prompt)[: len(tail)] == tail
        assert _generate(source, prompt)[: len(tail)] != tail
    assert _decoded(out, _generate(out, prompts[0])[: len(tail)]) == CONTINUATION


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_base_plus_adapter_file_generates_the_continuation_only_with_the_adapter(
    precision: str, tmp_path
) -> None:
    model, _ = _tuned(precision)
    source = build("llama", precision)
    _, _, prompts, tail = _batch(source)
    out = lora.export(model.rep, tmp_path / "base", source, merged=False, adapter_name="zebra")
    adapter = out / "zebra.onnx_adapter"
    assert adapter.is_file() and (out / "genai_config.json").is_file()
    for prompt in prompts:
        assert _generate(out, prompt, adapter)[: len(tail)] == tail
        assert _generate(out, prompt) == _generate(source, prompt)


def test_two_fine_tunes_of_different_ranks_are_served_on_one_base(tmp_path) -> None:
    """onnxruntime-genai's multi-LoRA: both exports write the same base graph (the adapters'
    rank is a free dimension), each its own adapter file; the active one decides."""
    source = build("llama", "fp32")
    out = tmp_path / "served"
    lora.export(_tuned("fp32")[0].rep, out, source, merged=False, adapter_name="fox")
    other, loss = _tuned("fp32", OTHER_CONTINUATION, rank=4, steps=2 * STEPS)
    assert loss < LOSS_BOUND
    lora.export(other.rep, out, source, merged=False, adapter_name="world")
    _, _, prompts, fox = _batch(source)
    world = _batch(source, OTHER_CONTINUATION)[3]
    for prompt in prompts:
        assert _generate(out, prompt, out / "fox.onnx_adapter")[: len(fox)] == fox
        assert _generate(out, prompt, out / "world.onnx_adapter")[: len(world)] == world


def test_export_needs_a_genai_model_directory(tmp_path) -> None:
    model, _ = _tuned("fp32")
    with pytest.raises(BadInputError, match=r"has no genai_config\.json"):
        lora.export(model.rep, tmp_path / "out", tmp_path)
