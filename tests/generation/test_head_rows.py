"""The decoder's head on each sequence's last position only (sonnx.generation.head_rows)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.generation import load_decoder
from sonnx.generation.decoder import Decoder, last_logits
from sonnx.generation.head_rows import KEPT_ROWS, head_on_kept_rows, kept_rows_model
from sonnx.tensor import to_numpy
from tests.genai_builds import SENTENCES, build


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_a_prompts_logits_are_the_full_graphs_at_each_rows_last_token(precision: str) -> None:
    """A right-padded batch of two prompts of other lengths (genai's GroupQueryAttention
    graph): the rewrite's logits equal the full graph's at each row's last token, and the
    head (MatMul, or MatMulNBits for int4) reads the gathered rows."""
    model = load_decoder(build("llama", precision))
    decoder = Decoder(model.rep, model.layout)
    assert decoder.kept_rows and decoder.rep is not model.rep
    head = next(n for n in decoder.rep.model.graph.node if f"{KEPT_ROWS}/hidden" in n.input)
    assert head.op_type == ("MatMul" if precision == "fp32" else "MatMulNBits")
    prompts = [model.tokenizer.encode(s) for s in SENTENCES[:2]]
    width = max(map(len, prompts))
    ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    last = torch.tensor([len(p) - 1 for p in prompts])
    positions = torch.arange(width).expand(2, width)
    mask = (positions <= last[:, None]).long()

    def run(d: Decoder, rows: torch.Tensor | None) -> torch.Tensor:
        feed = d.feed(ids, mask, positions, d.empty_cache(2, width + 2), rows)
        return d.run(feed)[model.layout.logits]

    kept = run(decoder, last)
    assert kept.shape[:2] == (2, 1)
    torch.testing.assert_close(
        last_logits(kept), last_logits(run(_full_decoder(model), None), last)
    )


@pytest.mark.parametrize("kind", ["genai", "optimum"])
def test_greedy_tokens_equal_the_full_graphs(kind: str, request: pytest.FixtureRequest) -> None:
    """Generation through the rewrite gives the tokens the full graph gives, for one prompt
    and a left-padded batch of two: genai's graph (right-padded, a shared buffer) and an
    optimum export (left-padded, the past concatenated)."""
    model_dir = build("llama", "fp32") if kind == "genai" else request.getfixturevalue("llama_dir")
    model = load_decoder(model_dir)
    prompts = [model.tokenizer.encode(s) for s in SENTENCES[:2]]
    for batch in ([prompts[0]], prompts):
        expected = _greedy(_full_decoder(model), batch, 6)
        assert _greedy(Decoder(model.rep, model.layout), batch, 6) == expected


def test_the_rewrite_is_made_once_and_again_after_the_model_changes() -> None:
    model = load_decoder(build("llama", "fp32"))
    first = head_on_kept_rows(model.rep, model.layout.logits)
    assert head_on_kept_rows(model.rep, model.layout.logits) is first
    # The weights are held once: the rewrite's tensors are the model's.
    for name, t in model.rep.params.items():
        assert first.params[name].data.data_ptr() == t.data.data_ptr()
    sonnx.lora.add(model.rep, "qkv_proj", rank=2)
    again = head_on_kept_rows(model.rep, model.layout.logits)
    assert again is not first
    assert any(KEPT_ROWS in n.input for n in again.model.graph.node)
    assert set(again.params) > set(first.params)  # the adapters'
    # An adapter on the head itself: its logits are a sum of two products, not rewritten.
    sonnx.lora.add(model.rep, "lm_head", rank=2)
    assert head_on_kept_rows(model.rep, model.layout.logits) is None
    assert not Decoder(model.rep, model.layout).kept_rows


def _model(tail: list[onnx.NodeProto], opset: int = 17) -> onnx.ModelProto:
    """h (batch, seq, 4) -> MatMul by w (4, 6) -> ``tail`` -> logits."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 6], np.arange(24, dtype=np.float32))
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [6], np.ones(6, dtype=np.float32))
    nodes = [helper.make_node("MatMul", ["h", "w"], ["product"], name="head"), *tail]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 6])],
        [w, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    "tail",
    [
        [helper.make_node("Identity", ["product"], ["logits"])],
        [helper.make_node("Relu", ["product"], ["logits"])],
        [helper.make_node("Add", ["product", "product"], ["logits"])],
    ],
    ids=["identity", "relu", "add-of-itself"],
)
def test_a_head_behind_other_steps_is_not_rewritten(tail: list[onnx.NodeProto]) -> None:
    assert kept_rows_model(_model(tail), "logits") is None


def test_an_opset_before_13_is_not_rewritten() -> None:
    tail = [helper.make_node("Cast", ["product"], ["logits"], to=TensorProto.FLOAT)]
    assert kept_rows_model(_model(tail, opset=12), "logits") is None


def test_a_head_behind_a_bias_and_a_cast_reads_the_kept_rows() -> None:
    tail = [
        helper.make_node("Add", ["product", "bias"], ["biased"]),
        helper.make_node("Cast", ["biased"], ["logits"], to=TensorProto.FLOAT),
    ]
    original = _model(tail)
    rewritten = kept_rows_model(original, "logits")
    onnx.checker.check_model(rewritten, full_check=True)
    (logits,) = rewritten.graph.output  # one position now
    assert [d.dim_param or d.dim_value for d in logits.type.tensor_type.shape.dim] == [
        "batch",
        1,
        6,
    ]
    h = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    rows = np.array([4, 0, 2], dtype=np.int64)
    full = to_numpy(sonnx.prepare(original).run({"h": h})[0])
    expected = full[np.arange(3), rows][:, None]
    got = sonnx.prepare(rewritten).run({"h": h, KEPT_ROWS: rows})[0]
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-6)
    # A valid graph that onnxruntime runs the same.
    session = ort.InferenceSession(
        rewritten.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(session.run(None, {"h": h, KEPT_ROWS: rows})[0], expected, rtol=1e-5)


def _full_decoder(model) -> Decoder:
    """A decoder running ``model.rep`` itself, every position's logits."""
    decoder = Decoder(model.rep, model.layout)
    decoder.rep, decoder.kept_rows = model.rep, False
    return decoder


def _greedy(decoder: Decoder, prompts: list[list[int]], new: int) -> list[list[int]]:
    """Greedy tokens through ``decoder.step`` from left-padded ``prompts``."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    cache = decoder.empty_cache(len(prompts), width + new)
    out: list[list[int]] = [[] for _ in prompts]
    for _ in range(new):
        logits, cache = decoder.step(ids, mask, positions, cache)
        ids = logits.argmax(-1, keepdim=True)
        for row, token in zip(out, ids[:, 0].tolist(), strict=True):
            row.append(token)
        mask = torch.cat([mask, torch.ones_like(ids)], 1)
        positions = positions[:, -1:] + 1
    return out


def test_the_kept_rows_default_to_the_final_position_as_int64() -> None:
    model = load_decoder(build("llama", "fp32"))
    decoder = Decoder(model.rep, model.layout)
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    cache = decoder.empty_cache(2, 4)
    feed = decoder.feed(ids, torch.ones_like(ids), torch.arange(3).expand(2, 3), cache)
    rows = feed[KEPT_ROWS].data
    assert rows.dtype == torch.int64 and rows.tolist() == [2, 2]
