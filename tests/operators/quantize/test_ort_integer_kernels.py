"""onnxruntime's ``DynamicQuantizeMatMul`` and ``MatMulIntegerToFloat`` kernels under sonnx
(sonnx.operators.quantize.ort_kernels): equal to onnxruntime's run bit for bit (its u8 x s8
rounding included, which saturates on CPUs without VNNI), one extern call in graph mode; a
weight that is not a constant, ``kernels="torch"`` and a gradient take the torch path."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

import sonnx
from sonnx import autograd
from tests.contrib_quant_helpers import node_model, ort_run

RNG = np.random.default_rng(145)
F32 = np.float32


def dqmm_case(rows, k=70, n=9, zero_point=False, per_column=False, bias=True):
    """A one-node DynamicQuantizeMatMul model over full-range 8-bit weights, and its input."""
    if zero_point:
        b = RNG.integers(0, 256, (k, n)).astype(np.uint8)
        zp = RNG.integers(100, 156, n if per_column else ()).astype(np.uint8)
    else:
        b, zp = RNG.integers(-128, 128, (k, n)).astype(np.int8), None
    inputs = {
        "A": RNG.standard_normal((*rows, k)).astype(F32),
        "B": b,
        "b_scale": RNG.uniform(0.001, 0.01, n if per_column else ()).astype(F32),
        "b_zero_point": zp,
        "bias": RNG.standard_normal(n).astype(F32) if bias else None,
    }
    feeds = {"A": inputs["A"]}
    return node_model("DynamicQuantizeMatMul", inputs, feeds), feeds


def mitf_case(rows, k=70, n=9):
    """A one-node MatMulIntegerToFloat model whose A, a_scale and a_zero_point are graph
    inputs (as DynamicQuantizeLinear makes them), and its feeds."""
    inputs = {
        "A": RNG.integers(0, 256, (*rows, k)).astype(np.uint8),
        "B": RNG.integers(-128, 128, (k, n)).astype(np.int8),
        "a_scale": np.array(0.02, F32),
        "b_scale": RNG.uniform(0.001, 0.01, n).astype(F32),
        "a_zero_point": np.array(131, np.uint8),
        "b_zero_point": None,
        "bias": RNG.standard_normal(n).astype(F32),
    }
    feeds = {name: inputs[name] for name in ("A", "a_scale", "a_zero_point")}
    return node_model("MatMulIntegerToFloat", inputs, feeds), feeds


def run_rep(rep, feeds):
    """The output as NumPy, and the kernel the node's operator used."""
    (y,) = rep.run(list(feeds.values()))
    return y.numpy(), rep.program.steps[0].op.kernel_used


@pytest.mark.parametrize("rows", [(1,), (5,), (2, 3)])
@pytest.mark.parametrize("zero_point,per_column", [(False, False), (False, True), (True, True)])
def test_dynamic_quantize_matmul_equals_onnxruntime_exactly(rows, zero_point, per_column):
    model, feeds = dqmm_case(rows, zero_point=zero_point, per_column=per_column)
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == "onnxruntime's DynamicQuantizeMatMul"
    np.testing.assert_array_equal(got, expected)


def test_matmul_integer_to_float_equals_onnxruntime_exactly():
    model, feeds = mitf_case((4,))
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == "onnxruntime's MatMulIntegerToFloat"
    np.testing.assert_array_equal(got, expected)


def test_kernels_torch_and_a_weight_fed_at_run_time_take_the_torch_path():
    # 7-bit weights: onnxruntime's u8 x s8 kernel does not saturate, so torch's exact sums
    # equal its results.
    model, feeds = dqmm_case((3,), bias=False)
    b = model.graph.initializer[0]
    b.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(b) // 2, "B"))
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model, kernels="torch"), feeds)
    assert kernel == "torch's"
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # B as a graph input: a session holds its constants, so a weight that may change at every
    # run is never bridged.
    fed = onnx.ModelProto()
    fed.CopyFrom(model)
    (weight,) = [t for t in fed.graph.initializer if t.name == "B"]
    fed.graph.input.append(helper.make_tensor_value_info("B", TensorProto.INT8, weight.dims))
    fed.graph.initializer.remove(weight)
    both = {**feeds, "B": numpy_helper.to_array(weight)}
    got, kernel = run_rep(sonnx.prepare(fed), both)
    assert kernel == "torch's"
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_a_gradient_takes_the_torch_path():
    model, feeds = dqmm_case((2,), k=16, n=4)
    rep = sonnx.prepare(model)
    autograd.training = True
    try:
        (y,) = rep.run([sonnx.tensor.Tensor(data=feeds["A"], requires_grad=True)])
    finally:
        autograd.training = False
    assert rep.program.steps[0].op.kernel_used == "torch's"
    assert y.creator is not None or y.data.requires_grad


def test_graph_mode_compiles_the_kernel_call_once_for_every_length(tmp_path, monkeypatch):
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    model, _ = dqmm_case((1,), k=64, n=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    rep = sonnx.prepare(model, use_graph=True)
    for rows in (1, 4, 7):
        feeds = {"A": RNG.standard_normal((rows, 64)).astype(F32)}
        (expected,) = ort_run(model, feeds)
        np.testing.assert_array_equal(rep.run([feeds["A"]])[0].numpy(), expected)
    assert [p.compiled for p in rep.graph_runner.parts()] == [True]
    assert len(list((tmp_path / "graphs").glob("*/*/graph.json"))) == 1
    assert "onnxruntime's DynamicQuantizeMatMul kernel" in rep.explain([feeds["A"]])


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(48, 64), torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def test_an_mlp_from_quantize_dynamic_and_onnxruntimes_optimizer_equals_onnxruntime(tmp_path):
    """onnxruntime's quantize_dynamic writes DynamicQuantizeLinear -> MatMulInteger -> Mul;
    its optimizer fuses those into DynamicQuantizeMatMul and MatMulIntegerToFloat."""
    torch.manual_seed(0)
    plain, quantized, optimized = (tmp_path / f"{n}.onnx" for n in ("f", "q", "o"))
    x = torch.randn(3, 48)
    torch.onnx.export(
        _Mlp(), (x,), plain, input_names=["x"], output_names=["y"],
        dynamic_axes={"x": {0: "n"}}, opset_version=17, dynamo=False,
    )  # fmt: skip
    quantize_dynamic(plain, quantized, weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(optimized)
    ort.InferenceSession(str(quantized), options, providers=["CPUExecutionProvider"])
    model = onnx.load(optimized)
    ops = {node.op_type for node in model.graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}, ops
    feeds = {"x": RNG.standard_normal((5, 48)).astype(F32)}
    (expected,) = ort_run(model, feeds)
    rep = sonnx.prepare(model)
    np.testing.assert_array_equal(rep.run([feeds["x"]])[0].numpy(), expected)
    assert "onnxruntime's" in rep.explain([feeds["x"]])
