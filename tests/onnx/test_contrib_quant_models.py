"""Models written by onnxruntime's quantization tools from small torch modules run in sonnx as
in onnxruntime: MatMulNBitsQuantizer (MatMulNBits), quantize_static in QOperator and QDQ form
(per tensor and per channel), quantize_dynamic, and onnxruntime's own optimizer writing
DynamicQuantizeMatMul, FusedConv and FusedGemm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
from torch import nn

import sonnx
from sonnx import autograd
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from tests.contrib_quant_helpers import both, reference_run, sonnx_run

RNG = np.random.default_rng(0)


def _mlp() -> onnx.ModelProto:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32), nn.Tanh())
    # A 3-D input (batch, tokens, features): torch writes MatMul, which the quantizer rewrites.
    return tm.export(module, (torch.randn(2, 3, 64),), 17, ["x"])


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits_quantizer_mlp_matches_onnxruntime(symmetric, block_size, accuracy_level):
    """At accuracy_level 0 both compute in float32; at level 4 both round each MatMulNBits
    input to int8 per block of K. Either way they agree to 1e-4 relative."""
    quantizer = MatMulNBitsQuantizer(
        _mlp(), bits=4, block_size=block_size, is_symmetric=symmetric, accuracy_level=accuracy_level
    )
    quantizer.process()
    model = quantizer.model.model
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("MatMulNBits") == 2, ops
    x = RNG.standard_normal((5, 3, 64)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_matmul_nbits_model_passes_gradients_to_its_input():
    """The 4-bit weights stay frozen (integers) while the gradient reaches the model's input,
    as it would a layer before it: equal to central differences of the model's output."""
    quantizer = MatMulNBitsQuantizer(_mlp(), bits=4, block_size=32)
    quantizer.process()
    rep = sonnx.prepare(quantizer.model.model)
    x = RNG.standard_normal((2, 3, 64)).astype(np.float32)
    dy = RNG.standard_normal((2, 3, 32)).astype(np.float32)
    previous = autograd.training
    autograd.training = True
    try:
        xt = Tensor(data=x, requires_grad=True, stores_grad=True)
        (y,) = rep.run([xt])
        grads = [g for p, g in autograd.backward(y, Tensor(data=dy)) if p is xt]
    finally:
        autograd.training = previous
    assert len(grads) == 1
    eps = 1e-2
    for index in [(0, 0, 0), (1, 2, 17), (0, 1, 63)]:
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        outs = [to_numpy(rep.run([v])[0]) for v in (up, down)]
        numeric = float(((outs[0] - outs[1]) * dy).sum() / (2 * eps))
        np.testing.assert_allclose(to_numpy(grads[0])[index], numeric, rtol=1e-2, atol=1e-3)


def test_matmul_nbits_model_in_graph_mode_equals_eager():
    """The one compile of these tests: the dequantization traces into the compiled graph."""
    quantizer = MatMulNBitsQuantizer(_mlp(), bits=4, block_size=32)
    quantizer.process()
    model = quantizer.model.model
    x = RNG.standard_normal((2, 3, 64)).astype(np.float32)
    rep = sonnx.prepare(model, use_graph=True)
    got = to_numpy(rep.run([x])[0])
    assert rep.graph_runner.compile_count == 1
    np.testing.assert_allclose(
        got, to_numpy(sonnx.prepare(model).run([x])[0]), rtol=1e-5, atol=1e-6
    )


class SmallCNN(nn.Module):
    """Conv, Add, Mul, Sigmoid, LeakyRelu, Concat, AveragePool, GlobalAveragePool, Gemm."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.skip = nn.Conv2d(3, 8, 1)
        self.pool = nn.AvgPool2d(2)
        self.global_pool = nn.AdaptiveAvgPool2d(1)  # written as GlobalAveragePool
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.conv1(x))
        b = self.conv2(a) + self.skip(x)
        c = nn.functional.leaky_relu(b * torch.sigmoid(a), 0.1)
        pooled = self.global_pool(self.pool(torch.cat([a, c], 1)))
        return self.head(pooled.flatten(1))


class Batches(CalibrationDataReader):
    """A few random batches for calibration."""

    def __init__(self, count: int = 4) -> None:
        rng = np.random.default_rng(1)
        self._feeds = iter(
            {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(count)
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = tm.export(SmallCNN(), (torch.randn(2, 3, 8, 8),), 17, ["x"])
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    onnx.save(model, path)
    return path


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that writes the graph's output."""
    last = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    assert last.op_type == "DequantizeLinear"
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(scales[last.input[1]])


QOPERATOR_OPS = {
    "QGemm",
    "QLinearAdd",
    "QLinearAveragePool",
    "QLinearConcat",
    "QLinearGlobalAveragePool",
    "QLinearLeakyRelu",
    "QLinearMul",
    "QLinearSigmoid",
}


@pytest.mark.parametrize(
    "options",
    [
        {"quant_format": QuantFormat.QOperator},
        {"quant_format": QuantFormat.QOperator, "per_channel": True},
        {"quant_format": QuantFormat.QOperator, "activation_type": QuantType.QInt8},
        {"quant_format": QuantFormat.QDQ},
        {"quant_format": QuantFormat.QDQ, "per_channel": True},
    ],
    ids=["qoperator", "qoperator-per-channel", "qoperator-int8", "qdq", "qdq-per-channel"],
)
def test_quantize_static_cnn_within_one_output_step(cnn_path, tmp_path, options):
    """Within one step of the output's quantization: the QOperator graphs come out equal here;
    in QDQ form both run the float operators between the Q/DQ pairs, whose sums in another
    order may round a tie to the next step."""
    path = tmp_path / "quantized.onnx"
    quantize_static(cnn_path, path, Batches(), **options)
    model = onnx.load(path)
    ms_ops = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert ms_ops == (QOPERATOR_OPS if options["quant_format"] == QuantFormat.QOperator else set())
    x = RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=0, atol=_output_step(model) * 1.0001)
    # import -> export writes the same graph, com.microsoft opset import included
    xs = [Tensor(data=x, requires_grad=False)]
    exported = sonnx.to_onnx(xs, sonnx.prepare(model).run(xs))
    assert list(exported.graph.node) == list(model.graph.node)
    opsets = {(o.domain, o.version) for o in model.opset_import}
    assert {(o.domain, o.version) for o in exported.opset_import} == opsets


def _optimized(path: Path, tmp_path: Path) -> onnx.ModelProto:
    """The model as onnxruntime's extended graph optimizer rewrites it (its fused kernels)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


def _quantize_dynamic(path: Path, tmp_path: Path, reduce_range: bool) -> Path:
    quantized = tmp_path / "dynamic.onnx"
    quantize_dynamic(path, quantized, reduce_range=reduce_range)
    return quantized


# reduce_range: 7-bit weights, where onnxruntime's uint8 x int8 products are exact on every x86
# CPU (tests/contrib_quant_helpers.py); the full_range tests cover quantize_dynamic's 8 bits.
def test_quantize_dynamic_cnn_matches_onnxruntime(cnn_path, tmp_path):
    model = onnx.load(_quantize_dynamic(cnn_path, tmp_path, reduce_range=True))
    x = RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_quantize_dynamic_cnn_full_range_equals_exact_reference(cnn_path, tmp_path):
    """ConvInteger and MatMulInteger on 8-bit weights, whose products with uint8 onnxruntime
    saturates in int16 on x86 without VNNI: sonnx equals onnx.reference's exact ones."""
    model = onnx.load(_quantize_dynamic(cnn_path, tmp_path, reduce_range=False))
    feeds = {"x": RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(
        sonnx_run(model, feeds)[0], reference_run(model, feeds)[0], rtol=1e-4, atol=1e-5
    )


def _optimized_dynamic_mlp(tmp_path: Path, reduce_range: bool) -> onnx.ModelProto:
    """quantize_dynamic then onnxruntime's optimizer: DynamicQuantizeMatMul."""
    path = _quantize_dynamic(_saved(_mlp(), tmp_path), tmp_path, reduce_range)
    model = _optimized(path, tmp_path)
    assert "DynamicQuantizeMatMul" in {n.op_type for n in model.graph.node}
    return model


def test_optimized_quantize_dynamic_mlp_matches_onnxruntime(tmp_path):
    model = _optimized_dynamic_mlp(tmp_path, reduce_range=True)
    x = RNG.standard_normal((5, 3, 64)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_optimized_quantize_dynamic_mlp_full_range_equals_exact_reference(tmp_path):
    """DynamicQuantizeMatMul on 8-bit weights: sonnx's torch path equals the exact product
    (its default, onnxruntime's own kernel, saturates as onnxruntime does on x86 without VNNI:
    test_ort_integer_kernels.py)."""
    model = _optimized_dynamic_mlp(tmp_path, reduce_range=False)
    x = RNG.standard_normal((5, 3, 64)).astype(np.float32)
    (got,) = sonnx.prepare(model, kernels="torch").run([x])
    np.testing.assert_allclose(
        to_numpy(got), reference_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5
    )


def test_optimized_float_cnn_matches_onnxruntime(cnn_path, tmp_path):
    """onnxruntime's optimizer folds Conv + Relu into FusedConv."""
    model = _optimized(cnn_path, tmp_path)
    assert "FusedConv" in {n.op_type for n in model.graph.node}
    x = RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)
    (expected,), (got,) = both(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _saved(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path
