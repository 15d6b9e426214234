"""``lora.export(..., quantize="int4")``: a LoRA fine-tune of the fp32 llama build written as
an int4 onnxruntime-genai directory. Its base weights are the builder's int4 weights byte for
byte; onnxruntime-genai loads it (merged, and base + ``og.Adapters``), generates the learned
continuation, and its logits equal sonnx's on the same directory. The export finds its model
directory from the rep (issue 47, item 7)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import sonnx
import sonnx.lora as lora
from sonnx.errors import BadInputError
from sonnx.lora import CausalLM
from tests.genai_builds import build
from tests.lora.test_export import _batch, _generate, _tuned, og_generator

pytest.importorskip("onnxruntime_genai")

# accuracy_level 4 rounds each block of a MatMulNBits input to int8: a last-bit difference
# before it can move one step (tests/generation/test_genai_builds.py)
ATOL = 5e-3


def _graph(model_dir: Path) -> onnx.ModelProto:
    return onnx.load(str(model_dir / "model.onnx"))


def _og_logits(model_dir: Path, prompt: list[int], adapter: Path | None = None) -> np.ndarray:
    """onnxruntime-genai's logits (positions, vocabulary) for a prefill of ``prompt``."""
    generator, _adapters = og_generator(model_dir, prompt, adapter)
    logits = np.asarray(generator.get_output("logits"))
    return logits.reshape(-1, logits.shape[-1])


def test_merged_int4_runs_in_onnxruntime_genai(tmp_path: Path) -> None:
    model, _ = _tuned("fp32")
    source = build("llama", "fp32")
    _, _, prompts, tail = _batch(source)
    out = lora.export(model.rep, tmp_path / "int4", quantize="int4")  # model_dir from the rep
    ops = [n.op_type for n in _graph(out).graph.node]
    builder_ops = [n.op_type for n in _graph(build("llama", "int4")).graph.node]
    assert ops == builder_ops and "MatMul" not in ops
    assert (out / "genai_config.json").read_text() == (source / "genai_config.json").read_text()
    for prompt in prompts:
        assert _generate(out, prompt)[: len(tail)] == tail
    exported = CausalLM(out)
    for prompt in prompts[:2]:
        expected = _og_logits(out, prompt)
        got = exported.forward(np.array([prompt])).numpy()[0]
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
        # int4 moves the float fine-tune's logits, not its choices on the continuation
        tuned = model.forward(np.array([prompt])).numpy()[0]
        assert np.abs(tuned - expected).max() < 0.15 * np.abs(tuned).max()
        assert (tuned[-1].argmax(), expected[-1].argmax()) == (tail[0], tail[0])


def test_base_int4_is_the_builders_and_takes_the_adapter(tmp_path: Path) -> None:
    model, _ = _tuned("fp32")
    source = build("llama", "fp32")
    _, _, prompts, tail = _batch(source)
    out = lora.export(
        model.rep, tmp_path / "base", merged=False, quantize="int4", adapter_name="tuned"
    )
    adapter = out / "tuned.onnx_adapter"
    ours = {t.name: numpy_helper.to_array(t) for t in _graph(out).graph.initializer}
    builder = {
        t.name: numpy_helper.to_array(t) for t in _graph(build("llama", "int4")).graph.initializer
    }
    assert set(builder) < set(ours)
    for name, expected in builder.items():
        assert ours[name].dtype == expected.dtype and ours[name].tobytes() == expected.tobytes()
    assert all(".lora_" in name for name in set(ours) - set(builder))
    lora_nodes = [n for n in _graph(out).graph.node if "/lora_" in n.name]
    assert lora_nodes and all(n.op_type == "MatMul" for n in lora_nodes)
    int4 = build("llama", "int4")
    for prompt in prompts:
        assert _generate(out, prompt, adapter)[: len(tail)] == tail
        assert _generate(out, prompt) == _generate(int4, prompt)
    # int4 base + float adapter: near the float fine-tune, the same choice
    expected = _og_logits(out, prompts[0], adapter)
    tuned = model.forward(np.array([prompts[0]])).numpy()[0]
    assert np.abs(tuned - expected).max() < 0.15 * np.abs(tuned).max()
    assert expected[-1].argmax() == tail[0]


def test_quantize_errors(tmp_path: Path) -> None:
    model, _ = _tuned("fp32")
    with pytest.raises(
        BadInputError,
        match=r"quantize must be None or one of \['int4'\], "
        r"received 'int8'",
    ):
        lora.export(model.rep, tmp_path / "out", quantize="int8")
    qlora, _ = _tuned("int4")
    with pytest.raises(BadInputError, match="a 4-bit base is int4 already"):
        lora.export(qlora.rep, tmp_path / "out", quantize="int4")


def test_model_dir_comes_from_the_rep(tmp_path: Path) -> None:
    """The rep remembers its file through lora.add; a rep prepared from a ModelProto needs
    model_dir=, which still overrides."""
    model, _ = _tuned("fp32")
    source = build("llama", "fp32")
    assert model.rep.origin == str(source / "model.onnx")
    rep = sonnx.prepare(onnx.load(str(source / "model.onnx")))
    assert rep.origin is None
    lora.add(rep, ["lm_head"], rank=2)
    with pytest.raises(BadInputError, match="pass model_dir="):
        lora.export(rep, tmp_path / "out")
    out = lora.export(rep, tmp_path / "out", model_dir=source)
    assert (out / "genai_config.json").is_file()
