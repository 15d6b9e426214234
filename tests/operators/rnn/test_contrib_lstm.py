"""com.microsoft DynamicQuantizeLSTM: models ``quantize_dynamic`` writes from torch LSTMs (one
direction, per-tensor weights; bidirectional, per-channel weights; a CNN + BiLSTM OCR stand-in
like ddddocr's) and single nodes equal onnxruntime and export back; gradients reach the float
inputs straight through the rounding; bad weights raise a typed error naming the node.

onnxruntime is run with one thread: with more, its kernel splits the batch between threads for
the hidden state's product and quantizes each part from its own range, so its results move by
about 1e-3 with the thread count (sonnx equals its one-thread results; the module docstring of
``sonnx.operators.rnn.contrib_lstm`` says why). Weights are 7-bit (``reduce_range``) where
they are int8: onnxruntime's uint8 x int8 products saturate on x86 CPUs without VNNI
(tests/contrib_quant_helpers.py).

These tests run sonnx's torch path (``kernels="torch"``); onnxruntime's own kernel, which sonnx
calls by default, is tested in tests/operators/quantize/test_ort_lstm_kernel.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from torch import nn

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError
from sonnx.operators.rnn.contrib_lstm import DynamicQuantizeLSTM
from sonnx.operators.rnn.recurrent import lstm
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from sonnx.testing.zoo_text import CRNN, export_crnn
from tests.contrib_quant_helpers import node_model
from tests.onnx.export_check import param

RNG = np.random.default_rng(0)
F32 = np.float32
# What sonnx's float products and torch's sigmoid/tanh leave against onnxruntime's exact
# int32 sums and MLAS's approximations (measured: at most 6e-7 on these cases).
TOLERANCE = {"rtol": 1e-5, "atol": 2e-6}


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's CPU kernels on one thread, the nodes as written."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def sonnx_run(rep, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [to_numpy(o) for o in rep.run({n: Tensor(data=a) for n, a in feeds.items()})]


class _Recurrent(nn.Module):
    def __init__(self, bidirectional: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 24, bidirectional=bidirectional)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


def _quantized(module: nn.Module, folder: Path, **options) -> onnx.ModelProto:
    torch.manual_seed(0)
    source, target = folder / "float.onnx", folder / "dynamic.onnx"
    onnx.save(tm.export(module, (torch.randn(5, 2, 16),), 17, ["x"], dynamic_batch=False), source)
    quantize_dynamic(source, target, reduce_range=True, **options)
    model = onnx.load(target)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in model.graph.node}
    return model


@pytest.fixture(scope="module")
def lstm_models(tmp_path_factory) -> dict[str, onnx.ModelProto]:
    """One direction with a scale per direction; bidirectional with one per gate row."""
    made = {}
    for name, bidirectional, per_channel in (("forward", False, False), ("bi", True, True)):
        folder = tmp_path_factory.mktemp(name)
        made[name] = _quantized(_Recurrent(bidirectional), folder, per_channel=per_channel)
    return made


@pytest.mark.parametrize("name", ["forward", "bi"])
def test_quantize_dynamic_lstm_equals_onnxruntime_and_exports_back(lstm_models, name):
    model = lstm_models[name]
    node = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM")
    scale = next(i for i in model.graph.initializer if i.name == node.input[8])
    assert len(scale.dims) == (2 if name == "bi" else 1)  # per gate row / per direction
    feeds = {"x": RNG.standard_normal((5, 2, 16)).astype(F32)}
    rep = sonnx.prepare(model, kernels="torch")
    got = sonnx_run(rep, feeds)
    np.testing.assert_allclose(got[0], ort_run(model, feeds)[0], **TOLERANCE)
    xs = [Tensor(data=feeds["x"])]
    exported = sonnx.to_onnx(xs, rep.run(xs))
    assert list(exported.graph.node) == list(model.graph.node)
    assert ("com.microsoft", 1) in {(o.domain, o.version) for o in exported.opset_import}
    np.testing.assert_allclose(ort_run(exported, feeds)[0], got[0], **TOLERANCE)


@pytest.mark.parametrize("weight_type", [QuantType.QInt8, QuantType.QUInt8])
def test_quantized_cnn_lstm_ocr_stand_in_equals_onnxruntime(tmp_path, weight_type):
    """A ddddocr-shaped recogniser (conv stages, a BiLSTM over the columns, a linear CTC head)
    after quantize_dynamic: ConvInteger, MatMulInteger and DynamicQuantizeLSTM."""
    torch.manual_seed(0)
    source, target = tmp_path / "crnn.onnx", tmp_path / "crnn_dynamic.onnx"
    onnx.save(export_crnn(CRNN(num_classes=20, width=8, hidden=32)), source)
    quantize_dynamic(source, target, reduce_range=True, weight_type=weight_type)
    model = onnx.load(target)
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"} <= {
        n.op_type for n in model.graph.node
    }
    feeds = {"image": RNG.standard_normal((2, 3, 48, 64)).astype(F32)}
    (got,) = sonnx_run(sonnx.prepare(model, kernels="torch"), feeds)
    # Probabilities after a softmax; the convolutions' own uint8 rounding of each layer's
    # input may move a code where their float sums differ in order.
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def _node_inputs(
    direction: str,
    codes: type,
    per_row: bool,
    lengths: list[int] | None = None,
    hidden: int = 8,
    width: int = 10,
    batch: int = 3,
) -> dict[str, np.ndarray | None]:
    """Random DynamicQuantizeLSTM inputs: full-range uint8 codes with a zero point, or 7-bit
    int8 codes; initial states and peepholes."""
    d = 2 if direction == "bidirectional" else 1
    rows = 4 * hidden
    scales = (d, rows) if per_row else (d,)

    def weight(k: int) -> np.ndarray:
        if codes is np.uint8:
            return RNG.integers(0, 256, (d, k, rows)).astype(np.uint8)
        return RNG.integers(-64, 64, (d, k, rows)).astype(np.int8)

    def zero_point() -> np.ndarray:
        value = 0 if codes is np.int8 else 120 if per_row else RNG.integers(100, 150, scales)
        return np.full(scales, value).astype(codes)

    return {
        "X": RNG.standard_normal((6, batch, width)).astype(F32),
        "W": weight(width),
        "R": weight(hidden),
        "B": (RNG.standard_normal((d, 8 * hidden)) * 0.1).astype(F32),
        "sequence_lens": None if lengths is None else np.array(lengths, np.int32),
        "initial_h": RNG.standard_normal((d, batch, hidden)).astype(F32),
        "initial_c": RNG.standard_normal((d, batch, hidden)).astype(F32),
        "P": (RNG.standard_normal((d, 3 * hidden)) * 0.1).astype(F32),
        "W_scale": RNG.uniform(0.005, 0.02, scales).astype(F32),
        "W_zero_point": zero_point(),
        "R_scale": RNG.uniform(0.005, 0.02, scales).astype(F32),
        "R_zero_point": zero_point(),
    }


_STATES = ("X", "initial_h", "initial_c")


@pytest.mark.parametrize(
    ("direction", "codes", "per_row", "lengths", "attrs"),
    [
        ("forward", np.int8, False, None, {}),
        ("reverse", np.uint8, True, None, {}),
        ("bidirectional", np.uint8, False, None, {}),
        ("bidirectional", np.int8, True, None, {"clip": 2.0}),
        ("forward", np.uint8, True, None, {"input_forget": 1}),
        # Entries of different lengths: each step's ranges cover what onnxruntime's do (the
        # projected steps up to the longest, the hidden states of the entries still running,
        # a reverse direction's entries each reversed within its length).
        ("forward", np.int8, True, [5, 4, 2], {}),
        ("reverse", np.uint8, False, [6, 3, 1], {}),
        ("bidirectional", np.int8, False, [4, 6, 2], {}),
    ],
)
def test_node_equals_onnxruntime(direction, codes, per_row, lengths, attrs):
    """Every output, with initial states and peepholes; uint8 codes span their whole range."""
    inputs = _node_inputs(direction, codes, per_row, lengths)
    feeds = {k: inputs[k] for k in (*_STATES, "sequence_lens") if inputs[k] is not None}
    model = node_model(
        "DynamicQuantizeLSTM", inputs, feeds, outputs=(1, 1, 1), hidden_size=8,
        direction=direction, **attrs,
    )  # fmt: skip
    got = sonnx_run(sonnx.prepare(model, kernels="torch"), feeds)
    for g, e in zip(got, ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(g, e, **TOLERANCE)


def test_class_built_node_exports_and_onnxruntime_runs_it():
    inputs = _node_inputs("bidirectional", np.int8, True)
    x, h, c = (Tensor(data=inputs[k], requires_grad=False) for k in _STATES)
    rest = [
        None if v is None else Tensor(data=v, requires_grad=False)
        for k, v in inputs.items()
        if k not in _STATES
    ]  # W, R, B, sequence_lens, P, the scales and zero points
    op = DynamicQuantizeLSTM(direction="bidirectional")
    outs = op(x, *rest[:3], rest[3], h, c, *rest[4:])
    model = sonnx.to_onnx([x, h, c], list(outs))
    (node,) = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    assert node.domain == "com.microsoft"
    assert {a.name: a for a in node.attribute}["hidden_size"].i == 8
    names = [i.name for i in model.graph.input]
    feeds = dict(zip(names, (to_numpy(t) for t in (x, h, c)), strict=True))
    for got, e in zip(outs, ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(to_numpy(got), e, **TOLERANCE)


def test_gradients_reach_the_float_inputs_straight_through():
    """The gradients to X, B and the initial states are the float LSTM's on the dequantized
    weights up to the rounding of the values they are taken at (a few percent here)."""
    inputs = _node_inputs("forward", np.int8, True)
    dequantized = [
        (inputs[k].astype(F32) * inputs[f"{k}_scale"][:, None, :]).transpose(0, 2, 1)
        for k in ("W", "R")
    ]
    names = ("X", "B", "initial_h", "initial_c")
    grads = []
    previous = autograd.training
    autograd.training = True
    try:
        for quantized in (True, False):
            x, b, h, c = (param(inputs[k]) for k in names)
            if quantized:
                scales = (inputs[k] for k in ("W_scale", "W_zero_point", "R_scale", "R_zero_point"))
                codes = (Tensor(data=inputs[k]) for k in ("W", "R"))
                y = DynamicQuantizeLSTM(hidden_size=8)(x, *codes, b, None, h, c, None, *scales)[0]
            else:
                y = lstm(x, *(Tensor(data=w) for w in dequantized), b, h, c)[0]
            found = {id(t): g for t, g in autograd.backward(y, Tensor(data=np.ones(y.shape, F32)))}
            grads.append([to_numpy(found[id(t)]) for t in (x, b, h, c)])
    finally:
        autograd.training = previous
    for name, got, float_grad in zip(names, *grads, strict=True):
        assert np.isfinite(got).all() and np.abs(got).max() > 0, name
        np.testing.assert_allclose(got, float_grad, rtol=0.05, atol=0.05 * np.abs(float_grad).max())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"W": np.zeros((1, 10, 32), F32)},
            r"input W must be int8 or uint8 of shape \(1, 10, 32\)",
        ),
        ({"W": np.zeros((1, 32, 10), np.int8)}, r"received int8 \(1, 32, 10\)"),
        (
            {"R_scale": np.ones((1, 8), F32)},
            r"R_scale must be float32 of shape \(1,\) or \(1, 32\)",
        ),
        ({"W_zero_point": np.zeros(1, np.uint8)}, "W_zero_point must be int8"),
    ],
)
def test_bad_weights_raise_a_typed_error_naming_the_node_and_input(change, message):
    inputs = {**_node_inputs("forward", np.int8, False), **change}
    feeds = {k: inputs[k] for k in _STATES}
    model = node_model("DynamicQuantizeLSTM", inputs, feeds, outputs=(1,), hidden_size=8)
    model.graph.node[0].name = "rnn/quantized_lstm"
    with pytest.raises(
        BadInputError, match=f"DynamicQuantizeLSTM 'rnn/quantized_lstm': .*{message}"
    ):
        sonnx_run(sonnx.prepare(model), feeds)
