"""sonnx.lora.add / merge on a small hand-made graph: which nodes take adapters, that a fresh
adapter changes nothing, that only the adapters train, merge, to_onnx, and the typed errors."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
import sonnx.lora as lora
from sonnx import autograd, opt
from sonnx.errors import BadInputError
from sonnx.lora import LoraTargetError
from sonnx.tensor import Tensor, to_numpy

RNG = np.random.default_rng(0)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name)


def _model() -> onnx.ModelProto:
    """x (2, 8) -> MatMul q_proj -> Relu -> Gemm (alpha, transB) up_proj -> FusedMatMul (alpha,
    transB) down_proj -> y; plus an activation product (x @ x^T) that no adapter may take."""
    nodes = [
        helper.make_node("MatMul", ["x", "w_q"], ["q"], name="/model/layers.0/attn/q_proj/MatMul"),
        helper.make_node("Relu", ["q"], ["r"], name="/model/layers.0/act/Relu"),
        helper.make_node(
            "Gemm",
            ["r", "w_up", "b_up"],
            ["u"],
            name="/model/layers.0/mlp/up_proj/Gemm",
            alpha=1.5,
            transB=1,
        ),
        helper.make_node(
            "FusedMatMul",
            ["u", "w_down"],
            ["y"],
            name="/model/layers.0/mlp/down_proj/MatMul",
            domain="com.microsoft",
            alpha=0.5,
            transB=1,
        ),
        helper.make_node("Transpose", ["x"], ["xt"], name="/scores/Transpose"),
        helper.make_node("MatMul", ["x", "xt"], ["s"], name="/scores/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", "batch"]),
        ],
        [
            _weight("w_q", 8, 16),
            _weight("w_up", 12, 16),
            _weight("b_up", 12),
            _weight("w_down", 6, 12),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


X = RNG.standard_normal((3, 8)).astype(np.float32)


def _run(rep: sonnx.SingaRep) -> np.ndarray:
    return to_numpy(rep.run([X])[0])


def _randomize_b(rep: sonnx.SingaRep) -> None:
    with torch.no_grad():
        for name, t in rep.params.items():
            if ".lora_B." in name:
                t.data.normal_(0, 0.5)


def test_add_selects_by_name_pattern_and_op_type_and_changes_nothing_yet() -> None:
    rep = sonnx.prepare(_model())
    before = _run(rep)
    assert lora.add(rep, ["q_proj", "Gemm", "FusedMatMul"], rank=2) == [
        "model.layers.0.attn.q_proj",
        "model.layers.0.mlp.up_proj",
        "model.layers.0.mlp.down_proj",
    ]
    np.testing.assert_array_equal(_run(rep), before)
    trainable = sorted(n for n, t in rep.params.items() if t.requires_grad)
    assert trainable == sorted(
        f"model.layers.0.{m}.lora_{ab}.MatMul.weight"
        for m in ("attn.q_proj", "mlp.up_proj", "mlp.down_proj")
        for ab in "AB"
    )
    assert rep.constants["model.layers.0.attn.q_proj.lora_A.MatMul.weight"].shape == (8, 2)
    assert rep.constants["model.layers.0.mlp.up_proj.lora_B.MatMul.weight"].shape == (2, 12)


def test_op_type_target_skips_products_of_two_activations() -> None:
    rep = sonnx.prepare(_model())
    assert lora.add(rep, "MatMul") == ["model.layers.0.attn.q_proj"]


def test_only_the_adapters_train_through_sonnxmodel_and_an_optimizer() -> None:
    model = sonnx.SONNXModel(_model())
    lora.add(model.rep, ["q_proj", "up_proj"], rank=2, alpha=4, dropout=0.1)
    base = {n: t.data.clone() for n, t in model.rep.params.items() if "lora" not in n}
    sgd = opt.SGD(lr=0.1)
    previous = autograd.training
    autograd.training = True
    try:
        for _ in range(3):
            y = model.forward(Tensor(data=X, requires_grad=False))[0]
            sgd(autograd.reduce_sum(autograd.mul(y, y), keepdims=0))
    finally:
        autograd.training = previous
    for name, value in base.items():
        torch.testing.assert_close(model.rep.params[name].data, value, rtol=0, atol=0)
    assert any("lora_B" in n for n in model.get_params())
    assert model.rep.params["model.layers.0.attn.q_proj.lora_B.MatMul.weight"].data.abs().sum() > 0


def test_merge_folds_adapters_into_the_weights_of_each_layout() -> None:
    rep = sonnx.prepare(_model())
    lora.add(rep, ["q_proj", "up_proj", "down_proj"], rank=3, alpha=6)
    _randomize_b(rep)
    adapted = _run(rep)
    lora.merge(rep)
    assert not any("lora" in n.name for n in rep.model.graph.node)
    assert not any("lora" in n for n in rep.params)
    np.testing.assert_allclose(_run(rep), adapted, rtol=1e-5, atol=1e-5)


def test_add_and_merge_keep_the_weights_tensors_where_they_were() -> None:
    rep = sonnx.prepare(_model())
    where = {n: t.data.data_ptr() for n, t in rep.params.items()}
    lora.add(rep, "q_proj", rank=2)
    lora.add(rep, "up_proj", rank=2)
    assert {n: rep.params[n].data.data_ptr() for n in where} == where
    q_b = "model.layers.0.attn.q_proj.lora_B.MatMul.weight"
    where[q_b] = rep.params[q_b].data.data_ptr()
    lora.add(rep, "down_proj", rank=2)
    assert rep.params[q_b].data.data_ptr() == where.pop(q_b)
    lora.merge(rep)
    assert {n: t.data.data_ptr() for n, t in rep.params.items()} == where


def test_to_onnx_of_a_rep_with_adapters_runs_in_onnxruntime() -> None:
    rep = sonnx.prepare(_model())
    lora.add(rep, ["q_proj", "down_proj"], rank=2)
    _randomize_b(rep)
    x = Tensor(data=X, requires_grad=False)
    outs = rep.run([x])
    exported = sonnx.to_onnx([x], outs)
    session = ort.InferenceSession(exported.SerializeToString())
    got = session.run(None, {exported.graph.input[0].name: X})
    np.testing.assert_allclose(got[0], to_numpy(outs[0]), rtol=1e-5, atol=1e-5)


def test_adding_more_adapters_keeps_the_trained_ones() -> None:
    rep = sonnx.prepare(_model())
    lora.add(rep, "q_proj", rank=2)
    _randomize_b(rep)
    adapted = _run(rep)
    lora.add(rep, "up_proj", rank=2)
    np.testing.assert_array_equal(_run(rep), adapted)


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ("k_proj", "'k_proj' matches no MatMul/Gemm/MatMulNBits/FusedMatMul node"),
        ("scores/MatMul", "an adapter needs a constant 2-D weight as input 1, received a computed"),
        ("q_proj[", "not a valid regular expression"),
        ([], "targets must be op types"),
        ("Conv", "'Conv' matches no"),
    ],
)
def test_bad_targets_are_typed_errors(targets, message: str) -> None:
    rep = sonnx.prepare(_model())
    with pytest.raises(LoraTargetError, match=message.replace("[", r"\[").replace("(", r"\(")):
        lora.add(rep, targets)


def test_bad_hyper_parameters_and_repeated_targets_are_typed_errors() -> None:
    rep = sonnx.prepare(_model())
    with pytest.raises(BadInputError, match="rank must be a positive int, received 0"):
        lora.add(rep, "q_proj", rank=0)
    with pytest.raises(BadInputError, match=r"dropout must be in \[0, 1\), received 1.5"):
        lora.add(rep, "q_proj", dropout=1.5)
    lora.add(rep, "q_proj")
    with pytest.raises(LoraTargetError, match="already have an adapter"):
        lora.add(rep, "q_proj")


def test_merge_and_save_without_adapters_are_typed_errors(tmp_path) -> None:
    rep = sonnx.prepare(_model())
    with pytest.raises(BadInputError, match="has no adapters"):
        lora.merge(rep)
    with pytest.raises(BadInputError, match="has no adapters"):
        lora.save(rep, tmp_path)
