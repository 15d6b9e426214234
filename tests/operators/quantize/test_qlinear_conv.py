"""QLinearConv: forward against onnx.reference and a dequantize-convolve-quantize reference in
torch, bad inputs, export opset check."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx import autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor, to_numpy

RNG = np.random.default_rng(0)
F32 = np.float32


def _t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def reference(inputs: list, **attrs) -> np.ndarray:
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"][: len(inputs)]
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    return ReferenceEvaluator(node).run(None, dict(zip(names, inputs, strict=True)))[0]


def _operands(dtype, channels_out: int = 2, channels_in: int = 2, per_channel: bool = False):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (1, channels_in, 5, 6)).astype(dtype)
    w = RNG.integers(info.min, info.max + 1, (channels_out, channels_in, 3, 3)).astype(dtype)
    shape = (channels_out,) if per_channel else ()
    w_scale = RNG.uniform(0.001, 0.01, shape).astype(F32)
    w_zero = RNG.integers(info.min // 4, info.max // 4 + 1, shape).astype(dtype)
    return [
        x,
        F32(0.02),
        dtype(3),
        w,
        w_scale,
        w_zero,
        F32(0.5),
        dtype((int(info.min) + int(info.max)) // 2),
    ]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [1, 0, 2, 1], "strides": [2, 1]},
        {"auto_pad": "SAME_UPPER", "dilations": [1, 2]},
    ],
)
def test_matches_reference(dtype, per_channel, attrs):
    inputs = _operands(dtype, per_channel=per_channel)
    got = autograd.QLinearConv(**attrs)(*[_t(a) for a in inputs]).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, reference(inputs, **attrs))


def test_bias_groups_and_an_output_type_unlike_x():
    inputs = _operands(np.uint8, channels_out=4, channels_in=2, per_channel=True)
    inputs[3] = inputs[3][:, :1]  # W (4, 1, 3, 3): two groups
    inputs[7] = np.int8(-5)  # y in int8 while x is uint8
    bias = RNG.integers(-2000, 2000, 4).astype(np.int32)
    got = autograd.QLinearConv(group=2)(*[_t(a) for a in [*inputs, bias]]).numpy()
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, reference([*inputs, bias], group=2))


def test_equals_the_float_convolution_of_the_dequantized_operands():
    x, xs, xz, w, ws, wz, ys, yz = _operands(np.uint8, per_channel=True)
    y = autograd.qlinear_conv(*[_t(a) for a in (x, xs, xz, w, ws, wz, ys, yz)], padding=1)
    xf = (torch.from_numpy(x).double() - int(xz)) * float(xs)
    wf = (torch.from_numpy(w).double() - torch.from_numpy(wz).double().reshape(-1, 1, 1, 1)) * (
        torch.from_numpy(ws).double().reshape(-1, 1, 1, 1)
    )
    expected = torch.round(F.conv2d(xf, wf, padding=1) / float(ys)) + int(yz)
    got = y.numpy().astype(np.int64)
    # Same value up to the float32 rounding of the combined scale (a tie may land either way).
    assert np.abs(got - expected.clamp(0, 255).numpy()).max() <= 1
    assert y.shape == (1, 2, 5, 6)


def test_saturates_to_the_output_range():
    x = np.full((1, 1, 2, 2), 255, np.uint8)
    w = np.full((1, 1, 1, 1), 255, np.uint8)
    one = F32(1.0)
    high = autograd.QLinearConv()(
        *[_t(a) for a in (x, one, np.uint8(0), w, one)], _t(np.uint8(0)), _t(one), _t(np.uint8(0))
    )
    assert (high.numpy() == 255).all()
    low = autograd.QLinearConv()(
        *[_t(a) for a in (x, one, np.uint8(0), w, one)],
        _t(np.uint8(0)),
        _t(F32(-1.0)),
        _t(np.int8(0)),
    )
    assert (low.numpy() == -128).all()


def test_bad_inputs():
    x, xs, xz, w, ws, wz, ys, yz = _operands(np.uint8)
    op = autograd.QLinearConv()
    with pytest.raises(BadInputError, match="QLinearConv: input x must be int8 or uint8"):
        op(*[_t(a) for a in (x.astype(F32), xs, xz, w, ws, wz, ys, yz)])
    with pytest.raises(BadInputError, match="input x_zero_point must have the type of x"):
        op(*[_t(a) for a in (x, xs, np.int8(1), w, ws, wz, ys, yz)])
    with pytest.raises(BadInputError, match="input x_scale must be a scalar"):
        op(*[_t(a) for a in (x, np.ones(2, F32), xz, w, ws, wz, ys, yz)])
    with pytest.raises(
        BadInputError, match=r"w_scale must be a scalar or a 1-D tensor of length 2"
    ):
        op(*[_t(a) for a in (x, xs, xz, w, np.ones(3, F32), wz, ys, yz)])
    with pytest.raises(BadInputError, match="input B must be int32"):
        op(*[_t(a) for a in (x, xs, xz, w, ws, wz, ys, yz, np.zeros(2, np.int64))])
    with pytest.raises(BadInputError, match="QLinearConv: input B must have shape"):
        op(*[_t(a) for a in (x, xs, xz, w, ws, wz, ys, yz, np.zeros(3, np.int32))])


def test_export_needs_opset_10():
    with pytest.raises(ExportError, match="QLinearConv does not exist before opset 10"):
        autograd.QLinearConv().export(GraphBuilder(9), ["x"] * 8, ["y"])
    g = GraphBuilder(10)
    autograd.QLinearConv(group=1).export(g, ["x"] * 8, ["y"])
    assert g.nodes[0].op_type == "QLinearConv"


def test_compiled_graph_mode_runs_it_eagerly_and_equals_eager() -> None:
    """torch's inductor hands a CPU float64 convolution with a constant weight to oneDNN,
    which takes no float64 (the compiled graph failed at its first run): graph mode runs the
    node eagerly, compiles the rest and gives eager's values."""
    import onnx
    from onnx import TensorProto, numpy_helper

    import sonnx

    x, *constants = _operands(np.uint8)
    names = ["xs", "xz", "w", "ws", "wz", "ys", "yz"]
    inits = [
        numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, constants, strict=True)
    ]
    graph = helper.make_graph(
        [
            helper.make_node("QLinearConv", ["x", *names], ["q"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["y"], name="dequantize"),
        ],
        "qconv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [None, 2, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2, 5, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    (eager,) = sonnx.prepare(model).run([x])
    rep = sonnx.prepare(model, use_graph=True)
    with pytest.warns(RuntimeWarning, match="float64 convolution"):
        (compiled,) = rep.run([x])
    np.testing.assert_array_equal(to_numpy(compiled), to_numpy(eager))
    assert "eager (inductor would hand its float64 convolution to oneDNN): step 0" in rep.explain()
