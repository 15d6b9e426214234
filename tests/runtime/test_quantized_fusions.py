"""A DynamicQuantizeLinear with the int8 product it feeds (quantize_dynamic's MatMul: the
MatMulInteger, Cast and Mul chain) runs as one call where its input needs a gradient: the
nodes' values bit for bit, and the gradient passed straight through the rounding. In
inference the chain runs onnxruntime's DynamicQuantizeMatMul kernel where the bridge is on."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd
from sonnx.tensor import Tensor, to_numpy
from tests.contrib_quant_helpers import int8_weights_7_bits, ort_run, reference_run

RNG = np.random.default_rng(0)
K, N = 6, 5
CHAIN = "DynamicQuantizeLinear+MatMulInteger"


def _chain(
    per_column: bool, codes_out: bool = False, full_range: bool = False
) -> tuple[onnx.ModelProto, dict]:
    """``y = (x + b) @ W`` as quantize_dynamic writes it (W int8, 7-bit: onnxruntime is exact
    there; ``full_range``: 8-bit), with W's scale and zero point per tensor or per column;
    ``codes_out`` also returns the quantized activation."""
    shape = (N,) if per_column else ()
    weights = RNG.integers(-128, 128, (K, N)).astype(np.int8)
    initializers = {
        "b": RNG.standard_normal(K).astype(np.float32),
        "w": weights if full_range else int8_weights_7_bits(RNG, K, N),
        "w_scale": RNG.uniform(0.01, 0.03, shape).astype(np.float32),
        "w_zero": RNG.integers(-3, 4, shape).astype(np.int8),
    }
    nodes = [
        helper.make_node("Add", ["x", "b"], ["xb"]),
        helper.make_node("DynamicQuantizeLinear", ["xb"], ["q", "q_scale", "q_zero"]),
        helper.make_node("Mul", ["q_scale", "w_scale"], ["scales"]),
        helper.make_node("MatMulInteger", ["q", "w", "q_zero", "w_zero"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc_float", "scales"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if codes_out:
        outputs.append(helper.make_tensor_value_info("q", TensorProto.UINT8, None))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, K])],
        outputs,
        [numpy_helper.from_array(v, n) for n, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model, initializers


def _run(rep: sonnx.SingaRep, x: np.ndarray, training: bool) -> Tensor:
    autograd.training = training
    try:
        return rep.run([Tensor(data=x, requires_grad=False)])[0]
    finally:
        autograd.training = False


@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_the_chain_trains_the_bias_before_it_with_the_nodes_values(per_column) -> None:
    """Fused in training: the output equals the nodes' (inference) bit for bit and
    onnxruntime's; the bias's gradient is the straight-through one, ``sum over rows of
    dy @ dequantize(W).T``, computed here in float64 from the int8 codes."""
    model, values = _chain(per_column)
    rep = sonnx.prepare(model)
    assert [f.name for f in rep.program.fusions.values()] == [CHAIN]
    x = RNG.standard_normal((3, 4, K)).astype(np.float32)
    inference = to_numpy(_run(rep, x, False))
    np.testing.assert_allclose(inference, ort_run(model, {"x": x})[0], rtol=1e-6, atol=1e-6)
    out = _run(rep, x, True)
    np.testing.assert_array_equal(to_numpy(out), inference)
    weighting = RNG.standard_normal(out.shape)
    autograd.training = True
    try:
        loss = autograd.reduce_sum(autograd.mul(out, Tensor(data=weighting.astype(np.float32))))
        grads = {p.name: to_numpy(g) for p, g in autograd.backward(loss)}
    finally:
        autograd.training = False
    dequantized = (values["w"] - values["w_zero"].astype(np.float64)) * values["w_scale"]
    expected = (weighting @ dequantized.T).reshape(-1, K).sum(0)
    # a per-column scale is a float vector read by a Mul: a weight, as node by node
    assert set(grads) == ({"b", "w_scale"} if per_column else {"b"})
    np.testing.assert_allclose(grads["b"], expected, rtol=1e-5, atol=1e-6)


def test_a_chain_whose_codes_the_run_returns_runs_its_nodes() -> None:
    """An intermediate read outside the group keeps its nodes: no gradient reaches the bias,
    and backward says why."""
    model, _ = _chain(False, codes_out=True)
    rep = sonnx.prepare(model)
    assert CHAIN not in [f.name for f in rep.program.fusions.values()]
    out = _run(rep, RNG.standard_normal((3, 4, K)).astype(np.float32), True)
    assert not out.data.requires_grad


@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_in_inference_the_chain_runs_onnxruntimes_dynamic_quantize_matmul(per_column) -> None:
    """No gradient needed: the group is one call of onnxruntime's DynamicQuantizeMatMul kernel
    (what onnxruntime's optimizer makes of the chain), equal to onnxruntime's nodes bit for bit,
    and explain() says so."""
    model, _ = _chain(per_column)
    rep = sonnx.prepare(model)
    x = RNG.standard_normal((3, 4, K)).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(_run(rep, x, False)), ort_run(model, {"x": x})[0])
    assert "onnxruntime's DynamicQuantizeMatMul, for the DynamicQuantizeLinear chain" in (
        rep.explain()
    )


def test_full_range_int8_weights_keep_the_exact_sums_through_the_kernel() -> None:
    """8-bit weights against inputs whose codes reach 255: onnxruntime's uint8 x int8 product
    saturates pairs of terms on x86 without VNNI; the group hands the kernel uint8 weights,
    whose product is exact, and equals onnx.reference's exact chain."""
    model, _ = _chain(True, full_range=True)
    rep = sonnx.prepare(model)
    x = (RNG.standard_normal((3, 4, K)) * 4).astype(np.float32)
    got = to_numpy(_run(rep, x, False))
    np.testing.assert_allclose(got, reference_run(model, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert "onnxruntime's DynamicQuantizeMatMul" in rep.explain()


def test_the_group_declines_where_no_gradient_is_needed_and_the_bridge_is_off() -> None:
    """kernels="torch": inference and graph mode's traces (no gradient) run the nodes."""
    model, values = _chain(True)
    rep = sonnx.prepare(model, kernels="torch")
    (fusion,) = rep.program.fusions.values()
    x = torch.from_numpy(RNG.standard_normal((3, 4, K)).astype(np.float32))
    weights = [torch.from_numpy(values[n]) for n in ("w", "w_scale", "w_zero")]
    assert fusion.inputs == ("xb", "w", "w_scale", "w_zero")
    assert fusion.compute(x, *weights) is None
    assert fusion.compute(x.requires_grad_(True), *weights) is not None
    with torch.no_grad():
        assert fusion.compute(x, *weights) is None
    nodes = to_numpy(_run(rep, x.detach().numpy(), False))
    bridged = to_numpy(_run(sonnx.prepare(model), x.detach().numpy(), False))
    np.testing.assert_allclose(nodes, bridged, rtol=1e-6, atol=1e-6)
