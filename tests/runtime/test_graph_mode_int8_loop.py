"""Graph mode on two families that kept inductor compiling for minutes: an int8 encoder from
onnxruntime's ``quantize_dynamic`` (MatMulInteger by constant weights) and a ``Loop``
decoder with a long fixed trip count. Both must compile (the Loop itself running eagerly)
and equal eager."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

import sonnx
from sonnx.errors import GraphModeWarning
from sonnx.runtime.subgraphs import UNROLL_LIMIT
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm


def _int8_encoder(tmp_path: Path) -> onnx.ModelProto:
    torch.manual_seed(0)
    module = tm.TinyBert(vocab=50, hidden=32, heads=2, layers=1, ffn=64, max_len=8)
    path = tmp_path / "encoder.onnx"
    onnx.save(
        tm.export(module, tm.bert_inputs(1, 8, 50), 17, ["input_ids", "attention_mask"]), path
    )
    quantize_dynamic(path, tmp_path / "int8.onnx", weight_type=QuantType.QInt8)
    return onnx.load(tmp_path / "int8.onnx")


def test_an_int8_encoder_from_quantize_dynamic_compiles_whole_and_equals_eager(tmp_path) -> None:
    model = _int8_encoder(tmp_path)
    assert any(n.op_type == "MatMulInteger" for n in model.graph.node)
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    for batch in (2, 3):
        ids, mask = tm.bert_inputs(batch, 8, 50, seed=batch)
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        with warnings.catch_warnings():
            warnings.simplefilter("error", GraphModeWarning)
            (got,) = rep.run(feeds)
        np.testing.assert_allclose(to_numpy(got), to_numpy(eager.run(feeds)[0]), atol=1e-5)
    assert rep.graph_runner.fallback is None
    assert rep.graph_runner.compile_count == 1


def _loop_decoder(trips: int, hidden: int = 8, vocab: int = 6) -> onnx.ModelProto:
    """A greedy decoder: ``trips`` times, h = tanh(h W + E[token]), token = argmax(h P); the
    logits of every step are stacked and soft-maxed."""
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.3,
        "E": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "P": rng.standard_normal((hidden, vocab)).astype(np.float32),
    }
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["E", "tok_in"], ["emb"], axis=0),
            helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
            helper.make_node("Add", ["hw", "emb"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("MatMul", ["h_out", "P"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=-1, keepdims=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["n", hidden]),
            helper.make_tensor_value_info("tok_in", TensorProto.INT64, ["n"]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["n", hidden]),
            helper.make_tensor_value_info("tok_out", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", vocab]),
        ],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h0"], name="start"),
        helper.make_node("ArgMax", ["x"], ["first"], axis=1, keepdims=0, name="first"),
        helper.make_node("Mod", ["first", "vocab"], ["tok0"], name="clamp"),
        helper.make_node(
            "Loop",
            ["trips", "go", "h0", "tok0"],
            ["h", "tokens", "steps"],
            body=body,
            name="decode",
        ),
        helper.make_node("Softmax", ["steps"], ["y"], axis=-1, name="probabilities"),
    ]
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    initializers += [
        numpy_helper.from_array(np.array(trips, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "go"),
        numpy_helper.from_array(np.array(vocab, np.int64), "vocab"),
    ]
    graph = helper.make_graph(
        nodes,
        "decoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", hidden])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["t", "n", vocab]),
            helper.make_tensor_value_info("tokens", TensorProto.INT64, ["n"]),
        ],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("trips", [3, 150])
def test_a_loop_decoder_unrolls_a_few_trips_and_runs_a_long_loop_eagerly(trips) -> None:
    model = _loop_decoder(trips)
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32) * 3
    long = trips * 7 > UNROLL_LIMIT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GraphModeWarning)
        got = rep.run([x])
    expected = eager.run([x])
    np.testing.assert_allclose(to_numpy(got[0]), to_numpy(expected[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(to_numpy(got[1]), to_numpy(expected[1]))
    parts = [(p.nodes, p.compiled) for p in rep.graph_runner.parts()]
    if long:
        assert [str(w.message) for w in caught] == [
            f"graph mode runs node 'decode' (subgraph 'decode.body' would be unrolled into "
            f"more than {UNROLL_LIMIT} steps of a compiled graph (74 runs of 7 steps)) "
            "eagerly; the rest stays compiled, with the same results"
        ]
        assert parts == [
            (("start", "first", "clamp"), True),
            (("decode",), False),
            (("probabilities",), True),
        ]
    else:
        assert not caught
        assert parts == [(("start", "first", "clamp", "decode", "probabilities"), True)]
