"""Conv, ConvTranspose, ConvInteger, DeformConv, Col2Im: forward against torch and ONNX's
reference evaluator, gradients against central differences, bad-input errors, export forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.conv import conv as conv_module
from sonnx.operators.conv import windows as conv_common
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

rng = np.random.default_rng(0)


def _t(a: np.ndarray) -> Tensor:
    return Tensor(data=a, requires_grad=False)


def reference(op_type: str, inputs: list[np.ndarray | None], **attrs) -> np.ndarray:
    """The output of ONNX's reference implementation of one node (absent inputs: None)."""
    names = ["" if a is None else f"i{k}" for k, a in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if a is not None}
    return ReferenceEvaluator(node).run(None, feeds)[0]


def run(op: autograd.Operator, *inputs: np.ndarray | None) -> np.ndarray:
    return op(*[None if a is None else _t(a) for a in inputs]).numpy()


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def rand64(*shape: int) -> np.ndarray:
    """float64 values for gradient checks."""
    return rng.standard_normal(shape)


# ---- Conv -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "group", "stride", "dilation"),
    [(1, 1, 1, 1), (1, 2, 2, 2), (2, 1, 2, 1), (2, 3, 1, 2), (3, 1, 2, 1), (3, 2, 1, 2)],
)
def test_conv_matches_torch(n, group, stride, dilation):
    x = randn(2, 6, *[7] * n)
    w = randn(6, 6 // group, *[3] * n)
    b = randn(w.shape[0])
    op = autograd.Conv(
        strides=[stride] * n, dilations=[dilation] * n, group=group, pads=[1] * 2 * n
    )
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    expected = conv(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, 1, dilation, group
    ).numpy()
    np.testing.assert_allclose(run(op, x, w, b), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [1, 0, 2, 3], "strides": [2, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 3], "dilations": [2, 1]},
        {"auto_pad": "VALID", "strides": [2, 2]},
        {"pads": [0, 2, 1, 0], "dilations": [2, 2], "group": 2},
    ],
)
def test_conv_padding_matches_reference(attrs):
    x = randn(1, 4, 7, 8)
    w = randn(4, 4 // attrs.get("group", 1), 3, 2)
    np.testing.assert_allclose(
        run(autograd.Conv(**attrs), x, w), reference("Conv", [x, w], **attrs), rtol=1e-4, atol=1e-5
    )


def test_conv_float16_and_kernel_shape_attribute():
    x, w = randn(1, 2, 5, 5, dtype=np.float16), randn(3, 2, 3, 3, dtype=np.float16)
    y = autograd.Conv(kernel_shape=[3, 3])(_t(x), _t(w))
    assert y.dtype == torch.float16 and y.shape == (1, 3, 3, 3)
    expected = reference("Conv", [x.astype(np.float32), w.astype(np.float32)])
    np.testing.assert_allclose(y.numpy().astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_conv_gradients_with_groups_and_dilation():
    x, w, b = rand64(1, 4, 3, 3), rand64(4, 2, 2, 2), rand64(4)
    check_grad(
        lambda x, w, b: autograd.conv2d(
            x, w, b, stride=(2, 1), padding=[1, 0, 0, 2], dilation=2, group=2
        ),
        [x, w, b],
    )


def test_conv_gradient_1d_same_lower():
    x, w = rand64(1, 2, 7), rand64(2, 2, 3)
    check_grad(lambda x, w: autograd.Conv(auto_pad="SAME_LOWER", strides=[2])(x, w), [x, w])


@pytest.mark.parametrize(
    ("channels", "length", "kernel", "stride", "pad"),
    [(1, 768, 256, 128, 0), (129, 5, 3, 1, 1), (64, 3, 1, 1, 0), (8, 9, 4, 3, 2)],
)
def test_small_1d_conv_is_one_matrix_product_equal_to_torchs(channels, length, kernel, stride, pad):
    x, w, b = randn(3, channels, length), randn(16, channels, kernel), randn(16)
    assert conv_common._small_for_a_gemm(
        torch.from_numpy(x), torch.from_numpy(w), stride, pad, 1, 1
    )
    expected = F.conv1d(*map(torch.from_numpy, (x, w, b)), stride=stride, padding=pad)
    y = run(autograd.Conv(strides=[stride], pads=[pad, pad]), x, w, b)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)
    check_grad(
        lambda x, w, b: autograd.Conv(strides=[2], pads=[1, 1])(x, w, b),
        [rand64(2, 3, 6), rand64(4, 3, 3), rand64(4)],
    )


def test_only_small_plain_1d_convs_of_a_fixed_length_take_the_matrix_product():
    x, w = torch.zeros(1, 64, 50), torch.zeros(64, 64, 3)  # 0.6M multiply-adds a sample
    small = conv_common._small_for_a_gemm
    assert small(x, w, 1, 1, 1, 1)
    assert not small(torch.zeros(1, 512, 1000), torch.zeros(512, 512, 3), 1, 1, 1, 1)  # 786M
    assert not small(x, torch.zeros(64, 32, 3), 1, 1, 1, 2)  # grouped
    assert not small(x, w, 1, 2, 2, 1)  # dilated
    assert not small(x.half(), w.half(), 1, 1, 1, 1)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    free_length = mode.from_tensor(
        x, symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 3)
    )
    assert not small(free_length, w, 1, 1, 1, 1)  # a graph for every length


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_a_1x1_conv_of_one_point_is_a_matrix_product_equal_to_torchs(rank, monkeypatch):
    """Squeeze-and-excitation's conv of a pooled image skips the convolution's set-up; a
    padded one (a larger output) is still a convolution."""
    convolutions: list[int] = []

    def counted(f):
        return lambda *args: (convolutions.append(rank), f(*args))[1]

    monkeypatch.setattr(conv_module, "CONV", {k: counted(f) for k, f in conv_module.CONV.items()})
    point = [1] * rank
    x, w, b = randn(3, 6, *point), randn(4, 6, *point), randn(4)
    torch_conv = getattr(F, f"conv{rank}d")
    y = run(autograd.Conv(strides=[2] * rank), x, w, b)
    expected = torch_conv(*map(torch.from_numpy, (x, w, b)), stride=2)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert convolutions == []
    check_grad(
        lambda x, w, b: autograd.Conv()(x, w, b),
        [rand64(2, 3, *point), rand64(4, 3, *point), rand64(4)],
    )
    assert convolutions == []
    padded = run(autograd.Conv(pads=[1] * 2 * rank), x, w, b)
    expected = torch_conv(*map(torch.from_numpy, (x, w, b)), padding=1)
    np.testing.assert_allclose(padded, expected.numpy(), rtol=1e-5, atol=1e-6)
    assert padded.shape == (3, 4, *[3] * rank) and convolutions == [rank]


def test_conv_functions_match_torch():
    x, w, b = randn(1, 2, 6, 6), randn(4, 2, 3, 3), randn(4)
    y = autograd.conv2d(_t(x), _t(w), _t(b), stride=2, padding=(1, 2))
    expected = F.conv2d(*map(torch.from_numpy, (x, w, b)), stride=2, padding=(1, 2))
    np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    x1, w1 = randn(1, 2, 9), randn(3, 2, 3)
    np.testing.assert_allclose(
        autograd.conv1d(_t(x1), _t(w1), padding=1).numpy(),
        F.conv1d(torch.from_numpy(x1), torch.from_numpy(w1), padding=1).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    x3, w3 = randn(1, 1, 4, 5, 6), randn(2, 1, 2, 2, 2)
    np.testing.assert_allclose(
        autograd.conv3d(_t(x3), _t(w3), stride=(1, 2, 2)).numpy(),
        F.conv3d(torch.from_numpy(x3), torch.from_numpy(w3), stride=(1, 2, 2)).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_bad_inputs():
    x, w = _t(randn(3, 224)), _t(randn(2, 3, 3))
    with pytest.raises(BadInputError, match=r"Conv: input X must be 3-D to 5-D.*\(3, 224\)"):
        autograd.Conv()(x, w)
    with pytest.raises(BadInputError, match="group=2"):
        autograd.Conv(group=2)(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="kernel_shape"):
        autograd.Conv(kernel_shape=[2, 2])(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="input B"):
        autograd.Conv()(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)), _t(randn(3)))
    with pytest.raises(BadInputError, match="pads must have 4"):
        autograd.Conv(pads=[1, 1])(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="share one element type"):
        autograd.Conv()(_t(randn(1, 3, 5, 5)), _t(rand64(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="auto_pad"):
        autograd.Conv(auto_pad="SAME")(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="does not fit"):
        autograd.Conv()(_t(randn(1, 3, 2, 2)), _t(randn(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="padding must be"):
        autograd.conv2d(_t(randn(1, 3, 5, 5)), _t(randn(2, 3, 3, 3)), padding=(1, 2, 3))


def test_one_conv_operator_checks_each_new_input_signature():
    """The geometry kept for the last shapes serves those shapes only: another size gets its
    own pads (SAME_UPPER depends on it), and a bad input after a good one is still refused."""
    op = autograd.Conv(auto_pad="SAME_UPPER", strides=[2, 2])
    w = randn(2, 3, 3, 3)
    for size in (7, 7, 8, 7):
        x = randn(1, 3, size, size)
        (y,) = [op.forward(torch.from_numpy(x), torch.from_numpy(w))]
        expected = reference("Conv", [x, w], auto_pad="SAME_UPPER", strides=[2, 2])
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(BadInputError, match="share one element type"):
        op.forward(torch.from_numpy(x), torch.from_numpy(rand64(2, 3, 3, 3)))
    with pytest.raises(BadInputError, match="W must have shape"):
        op.forward(torch.from_numpy(x), torch.from_numpy(randn(2, 2, 3, 3)))


# ---- ConvTranspose ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "group", "stride", "dilation", "pad", "out_pad"),
    [(1, 1, 2, 1, 0, 1), (2, 2, 2, 2, 1, 1), (2, 1, 3, 1, 2, 2), (3, 1, 2, 1, 1, 0)],
)
def test_conv_transpose_matches_torch(n, group, stride, dilation, pad, out_pad):
    x = randn(2, 4, *[4] * n)
    w = randn(4, 6 // group, *[3] * n)
    b = randn(6)
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    expected = fn(
        *map(torch.from_numpy, (x, w, b)),
        stride=stride,
        padding=pad,
        output_padding=out_pad,
        groups=group,
        dilation=dilation,
    ).numpy()
    op = autograd.ConvTranspose(
        strides=[stride] * n,
        pads=[pad] * 2 * n,
        output_padding=[out_pad] * n,
        group=group,
        dilations=[dilation] * n,
    )
    np.testing.assert_allclose(run(op, x, w, b), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [3, 2], "output_shape": [10, 8]},
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"strides": [2, 3], "auto_pad": "SAME_LOWER", "dilations": [1, 2]},
        {"strides": [2, 2], "pads": [0, 1, 2, 0], "output_padding": [1, 0]},
    ],
)
def test_conv_transpose_matches_reference(attrs):
    x, w, b = randn(1, 2, 3, 3), randn(2, 3, 3, 3), randn(3)
    np.testing.assert_allclose(
        run(autograd.ConvTranspose(**attrs), x, w, b),
        reference("ConvTranspose", [x, w, b], **attrs),
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_transpose_gradients():
    x, w, b = rand64(1, 4, 3, 3), rand64(4, 1, 2, 3), rand64(2)
    check_grad(
        lambda x, w, b: autograd.conv_transpose2d(
            x, w, b, stride=2, padding=[0, 1, 1, 0], output_padding=1, group=2
        ),
        [x, w, b],
    )


def test_conv_transpose_bad_inputs():
    with pytest.raises(BadInputError, match="ConvTranspose: X has 3 channels"):
        autograd.ConvTranspose()(_t(randn(1, 3, 4, 4)), _t(randn(2, 2, 3, 3)))
    with pytest.raises(BadInputError, match="output_shape"):
        autograd.ConvTranspose(output_shape=[5])(_t(randn(1, 2, 4, 4)), _t(randn(2, 2, 3, 3)))


def test_conv_transpose_functions_1d_3d():
    x1, w1 = randn(1, 2, 5), randn(2, 3, 3)
    np.testing.assert_allclose(
        autograd.conv_transpose1d(_t(x1), _t(w1), stride=2).numpy(),
        F.conv_transpose1d(torch.from_numpy(x1), torch.from_numpy(w1), stride=2).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )
    x3, w3 = randn(1, 2, 2, 3, 2), randn(2, 1, 2, 2, 2)
    np.testing.assert_allclose(
        autograd.conv_transpose3d(_t(x3), _t(w3), padding=1, stride=2).numpy(),
        F.conv_transpose3d(torch.from_numpy(x3), torch.from_numpy(w3), padding=1, stride=2).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


# ---- ConvInteger ------------------------------------------------------------------------------


def test_conv_integer_matches_reference():
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-128, 127, (3, 2, 2, 2)).astype(np.int8)
    xz, wz = np.uint8(7), np.array([1, -2, 3], dtype=np.int8)
    y = run(autograd.ConvInteger(pads=[1, 0, 0, 1]), x, w, np.array(xz), wz)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(
        y, reference("ConvInteger", [x, w, np.array(xz), wz], pads=[1, 0, 0, 1])
    )
    np.testing.assert_array_equal(
        run(autograd.ConvInteger(), x, w), reference("ConvInteger", [x, w])
    )


def test_conv_integer_rejects_float():
    with pytest.raises(BadInputError, match="ConvInteger: input x must be int8 or uint8"):
        autograd.ConvInteger()(_t(randn(1, 1, 3, 3)), _t(np.ones((1, 1, 2, 2), np.int8)))
    x, w = np.ones((1, 1, 3, 3), np.uint8), np.ones((1, 1, 2, 2), np.uint8)
    with pytest.raises(BadInputError, match="x_zero_point must be a scalar"):
        autograd.ConvInteger()(_t(x), _t(w), _t(np.ones(2, np.uint8)))


# ---- DeformConv -------------------------------------------------------------------------------


def test_deform_conv_zero_offsets_is_conv():
    x, w, b = randn(2, 4, 6, 5), randn(6, 2, 3, 2), randn(6)
    offset = np.zeros((2, 2 * 2 * 6, 3, 3), np.float32)
    y = autograd.deform_conv2d(
        _t(x), _t(w), _t(offset), _t(b), stride=2, padding=1, group=2, offset_group=2
    )
    expected = F.conv2d(*map(torch.from_numpy, (x, w, b)), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_deform_conv_matches_reference():
    x, w, b = randn(1, 4, 5, 6), randn(2, 2, 2, 2), randn(2)
    attrs = {"group": 2, "offset_group": 2, "pads": [1, 0, 0, 1], "dilations": [1, 2]}
    offset = randn(1, 2 * 2 * 4, 5, 5) * 1.5
    mask = rng.random((1, 2 * 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(
        run(autograd.DeformConv(**attrs), x, w, offset, b, mask),
        reference("DeformConv", [x, w, offset, b, mask], **attrs),
        rtol=1e-4,
        atol=1e-5,
    )


def test_deform_conv_gradients():
    x, w = rand64(1, 2, 4, 4), rand64(2, 2, 2, 2)
    # Offsets away from integers: bilinear sampling is not differentiable at grid points.
    offset = (rng.random((1, 8, 3, 3)) * 0.8 + 0.1) * rng.choice([-1, 1], (1, 8, 3, 3))
    mask = rng.random((1, 4, 3, 3))
    check_grad(lambda x, w, o, m: autograd.deform_conv2d(x, w, o, mask=m), [x, w, offset, mask])


def test_deform_conv_bad_inputs():
    with pytest.raises(BadInputError, match="only 2-D"):
        autograd.DeformConv()(_t(randn(1, 2, 5)), _t(randn(2, 2, 3)), _t(randn(1, 6, 3)))
    with pytest.raises(BadInputError, match="must cover the output positions"):
        autograd.DeformConv()(_t(randn(1, 2, 4, 4)), _t(randn(2, 2, 2, 2)), _t(randn(1, 8, 2, 3)))
    with pytest.raises(BadInputError, match="input offset must have shape"):
        autograd.DeformConv()(_t(randn(1, 2, 4, 4)), _t(randn(2, 2, 2, 2)), _t(randn(1, 4, 3, 3)))


# ---- Col2Im -----------------------------------------------------------------------------------


def test_col2im_matches_fold():
    cols = randn(2, 3 * 2 * 3, 4 * 3)
    y = autograd.col2im(
        _t(cols), [5, 6], [2, 3], stride=(1, 2), padding=[0, 1, 1, 0], dilation=(2, 1)
    )
    # Folding into the padded 6 x 7 image and cropping the pads gives the same result.
    folded = F.fold(torch.from_numpy(cols), (6, 7), (2, 3), dilation=(2, 1), stride=(1, 2))
    folded = folded[:, :, 0:5, 1:7]
    np.testing.assert_allclose(y.numpy(), folded.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [([9], [3], {"strides": [2]}), ([3, 4, 3], [2, 2, 2], {"pads": [0, 1, 0, 1, 0, 1]})],
)
def test_col2im_matches_reference(image, block, attrs):
    n = len(image)
    pads, strides = attrs.get("pads", [0] * 2 * n), attrs.get("strides", [1] * n)
    blocks = int(
        np.prod([(image[d] + pads[d] + pads[n + d] - block[d]) // strides[d] + 1 for d in range(n)])
    )
    cols = randn(1, 2 * int(np.prod(block)), blocks)
    shape, block_shape = np.array(image, np.int64), np.array(block, np.int64)
    np.testing.assert_allclose(
        run(autograd.Col2Im(**attrs), cols, shape, block_shape),
        reference("Col2Im", [cols, shape, block_shape], **attrs),
        rtol=1e-5,
        atol=1e-6,
    )


def test_col2im_gradient_and_errors():
    check_grad(lambda c: autograd.col2im(c, [4, 4], [2, 2], stride=2), [rand64(1, 4, 4)])
    with pytest.raises(BadInputError, match=r"Col2Im: input must have shape \(N, C\*4, 9\)"):
        autograd.col2im(_t(randn(1, 4, 5)), [4, 4], [2, 2])


# ---- export -----------------------------------------------------------------------------------


def test_conv_exports_one_node_with_its_attributes():
    g = GraphBuilder(13)
    autograd.Conv(strides=[2, 2], pads=[1, 1, 1, 1]).export(g, ["x", "w", ""], ["y"])
    (node,) = g.nodes
    assert node.op_type == "Conv" and list(node.input) == ["x", "w"]
    assert {a.name for a in node.attribute} == {"strides", "pads"}


def test_new_operators_refuse_old_opsets():
    with pytest.raises(ExportError, match="DeformConv does not exist before opset 19"):
        autograd.DeformConv().export(GraphBuilder(18), ["x", "w", "o"], ["y"])
    with pytest.raises(ExportError, match="Col2Im"):
        autograd.Col2Im().export(GraphBuilder(17), ["x", "s", "b"], ["y"])
    with pytest.raises(ExportError, match="ConvInteger"):
        autograd.ConvInteger().export(GraphBuilder(9), ["x", "w"], ["y"])


def test_module_exports_singa_names():
    for name in ("conv2d", "conv1d", "conv3d", "conv_transpose2d", "Conv", "ConvTranspose"):
        assert name in conv_module.__all__
        assert hasattr(autograd, name)


def test_import_conv_opset_1():
    from onnx import TensorProto

    import sonnx

    x, w = randn(1, 2, 5, 5), randn(3, 2, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 0, 1], strides=[2, 1])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
            for n, a in (("x", x), ("w", w))
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    (y,) = sonnx.prepare(model).run({"x": x, "w": w})
    expected = reference("Conv", [x, w], pads=[1, 0, 0, 1], strides=[2, 1])
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)
