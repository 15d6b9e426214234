"""Resize, Upsample, GridSample, AffineGrid and RoiAlign against the ONNX reference and torch."""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx.autograd as autograd
from sonnx.autograd import AffineGrid, GridSample, Resize, RoiAlign
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.onnx.registry import REGISTRY, NodeInfo
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

RNG = np.random.default_rng(0)


def reference(op_type: str, inputs: list, opset: int, **attrs) -> np.ndarray:
    """Run one ONNX node with onnx.reference (``None`` inputs are absent)."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["out"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names if n],
        [helper.make_tensor_value_info("out", onnx.TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: x for n, x in zip(names, inputs, strict=True) if n}
    return ReferenceEvaluator(model).run(None, feeds)[0]


def const(x) -> Tensor:
    return Tensor(data=np.asarray(x), requires_grad=False)


RESIZE_CASES = [
    dict(mode="nearest", coordinate_transformation_mode="half_pixel"),
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    dict(mode="nearest", coordinate_transformation_mode="align_corners", nearest_mode="ceil"),
    dict(mode="nearest", nearest_mode="round_prefer_ceil"),
    dict(mode="linear", coordinate_transformation_mode="half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="linear", coordinate_transformation_mode="align_corners"),
    dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
    dict(mode="linear", antialias=1),
    dict(mode="cubic", coordinate_transformation_mode="asymmetric"),
    dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
    dict(mode="cubic", antialias=1),
]


@pytest.mark.parametrize("attrs", RESIZE_CASES)
@pytest.mark.parametrize("scales", [[1, 1, 1.7, 2.3], [1, 1, 0.6, 0.45]])
def test_resize_scales_matches_reference(attrs, scales):
    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    s = np.asarray(scales, np.float32)
    expected = reference("Resize", [x, None, s], 19, **attrs)
    got = Resize(**attrs)(const(x), None, const(s)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


TORCH_KERNEL_CASES = [  # (attributes, input shape, scales or None, sizes or None)
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     (2, 3, 5, 6), [1, 1, 2, 4], None),
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     (1, 2, 5, 3, 4), None, [1, 2, 10, 3, 8]),
    (dict(mode="nearest"), (2, 3, 5, 6), [1, 1, 8, 2], None),
    (dict(mode="nearest", nearest_mode="round_prefer_ceil"), (2, 3, 7), None, [2, 3, 28]),
    (dict(mode="linear"), (2, 3, 7, 9), [1, 1, 1.7, 0.45], None),
    (dict(mode="linear"), (2, 3, 7, 9), None, [2, 3, 14, 4]),
    (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
     (2, 3, 7, 9), None, [2, 3, 20, 36]),
    (dict(mode="linear", coordinate_transformation_mode="align_corners"),
     (1, 2, 4, 5, 6), [1, 1, 1.5, 2, 0.5], None),
    (dict(mode="linear"), (3, 2, 10), [1, 1, 2.5], None),
]  # fmt: skip


@pytest.mark.parametrize(("attrs", "shape", "scales", "sizes"), TORCH_KERNEL_CASES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_resize_by_torch_kernel_matches_reference(monkeypatch, attrs, shape, scales, sizes,
                                                  channels_last):  # fmt: skip
    """The modes torch's upsampling kernels compute exactly skip the separable gathers, give
    the reference's values and keep a channels-last map channels-last."""
    resize = importlib.import_module("sonnx.operators.image.resize")

    def no_gathers(*args):
        raise AssertionError("the separable gathers ran")

    monkeypatch.setattr(resize, "apply_plan", no_gathers)
    x = RNG.standard_normal(shape).astype(np.float32)
    s = None if scales is None else np.asarray(scales, np.float32)
    n = None if sizes is None else np.asarray(sizes, np.int64)
    expected = reference("Resize", [x, None, s, n], 19, **attrs)
    data = torch.from_numpy(x)
    layout = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(shape))
    if channels_last and layout is not None:
        data = data.contiguous(memory_format=layout)
    given = [None if v is None else const(v) for v in (s, n)]
    out = Resize(**attrs)(Tensor(data=data, requires_grad=False), None, *given)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    if channels_last and layout is not None:
        assert out.data.is_contiguous(memory_format=layout)


@pytest.mark.parametrize(
    ("attrs", "scales"),
    [
        (dict(mode="nearest", coordinate_transformation_mode="asymmetric",
              nearest_mode="floor"), [1, 1, 3, 2]),  # 3 is not a power of two
        (dict(mode="nearest", nearest_mode="floor"), [1, 1, 2, 2]),  # not torch's rounding
        (dict(mode="linear", exclude_outside=1), [1, 1, 1.5, 2]),
        (dict(mode="linear"), [1, 2, 1.5, 2]),  # channels resized
    ],
)  # fmt: skip
def test_resize_outside_torch_kernels_still_matches_reference(attrs, scales):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    s = np.asarray(scales, np.float32)
    expected = reference("Resize", [x, None, s], 19, **attrs)
    got = Resize(**attrs)(const(x), None, const(s)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_axes_policy_matches_reference(policy):
    x = RNG.standard_normal((2, 5, 6, 3)).astype(np.float32)
    sizes = np.array([4, 11], np.int64)
    attrs = dict(mode="linear", axes=[2, 1], keep_aspect_ratio_policy=policy)
    expected = reference("Resize", [x, None, None, sizes], 19, **attrs)
    got = Resize(**attrs)(const(x), None, None, const(sizes)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_resize_tf_crop_and_resize_extrapolates():
    x = RNG.standard_normal((1, 1, 5, 5)).astype(np.float32)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4], np.float32)
    sizes = np.array([1, 1, 4, 6], np.int64)
    attrs = dict(
        mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0
    )
    expected = reference("Resize", [x, roi, None, sizes], 19, **attrs)
    got = Resize(**attrs)(const(x), const(roi), None, const(sizes)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert (got == 7.0).any()


def test_resize_integer_input_nearest_keeps_dtype():
    x = RNG.integers(0, 255, (1, 2, 3, 4)).astype(np.uint8)
    s = np.array([1, 1, 2, 2], np.float32)
    got = Resize(mode="nearest")(const(x), None, const(s)).numpy()
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, reference("Resize", [x, None, s], 19, mode="nearest"))


@pytest.mark.parametrize(
    "attrs",
    [
        dict(mode="linear"),
        dict(mode="cubic", coordinate_transformation_mode="align_corners"),
        dict(mode="nearest"),
        dict(mode="linear", antialias=1),
    ],
)
def test_resize_gradient_wrt_x(attrs):
    x = RNG.standard_normal((1, 2, 4, 5))
    scales = np.array([1, 1, 1.5, 0.6], np.float32)
    check_grad(lambda t: Resize(**attrs)(t, None, const(scales)), [x])


def test_resize_and_upsample_functions():
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    up = autograd.upsample(const(x), 2)
    np.testing.assert_array_equal(up.numpy(), x.repeat(2, 2).repeat(2, 3))
    assert up.creator.op_type == "Resize"
    lin = autograd.resize(const(x), sizes=[1, 2, 6, 8], mode="linear")
    ref = F.interpolate(torch.from_numpy(x), size=(6, 8), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(lin.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def _convert(op_type: str, version: int, inputs: list, **attrs) -> Tensor:
    _, fn = REGISTRY.lookup("", op_type, version)
    info = NodeInfo(op_type, "", "n", version, version, 1)
    return fn(info, [None if x is None else const(x) for x in inputs], attrs)


def test_legacy_upsample_and_resize10_become_resize():
    x = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    scales = np.array([1, 1, 2.5, 1.5], np.float32)
    expected = reference(
        "Resize",
        [x, None, scales],
        19,
        mode="linear",
        coordinate_transformation_mode="asymmetric",
    )
    for out in (
        _convert("Upsample", 9, [x, scales], mode="linear"),
        _convert("Upsample", 7, [x], mode="bilinear", scales=list(scales)),
        _convert("Resize", 10, [x, scales], mode="linear"),
    ):
        assert out.creator.op_type == "Resize"
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    nearest = _convert("Upsample", 1, [x], mode="nearest", height_scale=2.0, width_scale=3.0)
    np.testing.assert_array_equal(nearest.numpy(), x.repeat(2, 2).repeat(3, 3))


def test_resize_export_forms():
    x = const(RNG.standard_normal((1, 1, 2, 2)).astype(np.float32))
    op = Resize(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    op(x, None, None, const(np.array([1, 1, 4, 6], np.int64)))
    g = GraphBuilder(10)
    op.export(g, ["x", "", "", "sizes"], ["y"])
    (node,) = g.nodes
    assert node.op_type == "Resize" and node.input[0] == "x" and len(node.input) == 2
    np.testing.assert_allclose(onnx.numpy_helper.to_array(g.initializers[0]), [1, 1, 2, 3])
    g11 = GraphBuilder(11)
    op.export(g11, ["x", "", "", "sizes"], ["y"])
    assert len(g11.nodes[0].input) == 4 and all(g11.nodes[0].input)
    axes_op = Resize(mode="linear", axes=[3, 2])
    axes_op(x, None, const(np.array([3, 2], np.float32)))
    g17 = GraphBuilder(17)
    axes_op.export(g17, ["x", "", "s"], ["y"])
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(g17.initializers[0]), [1, 1, 2, 3])
    with pytest.raises(ExportError, match="opset 17"):
        Resize(mode="linear", antialias=1).export(GraphBuilder(17), ["x", "", "s"], ["y"])
    with pytest.raises(ExportError, match="Resize-10"):
        Resize(mode="cubic").export(GraphBuilder(10), ["x", "", "s"], ["y"])


@pytest.mark.parametrize("opset", [11, 13, 17, 19])
def test_resize_export_runs_in_onnxruntime(opset):
    x = Tensor(data=RNG.standard_normal((1, 2, 3, 4)).astype(np.float32), name="x")
    outputs = [
        autograd.resize(x, scales=[1, 1, 2, 1.5], mode="cubic"),
        autograd.upsample(x, 2),
        autograd.resize(x, sizes=[5, 3], axes=[3, 2], mode="linear"),
    ]
    model = to_onnx([x], outputs, opset=opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, out in zip(session.run(None, {"x": x.numpy()}), outputs, strict=True):
        np.testing.assert_allclose(got, out.numpy(), rtol=1e-5, atol=1e-5)


def test_resize_bad_inputs():
    x = const(np.zeros((1, 1, 2, 2), np.float32))
    s = const(np.ones(4, np.float32))
    with pytest.raises(BadInputError, match="exactly one of the inputs scales and sizes"):
        Resize()(x, None, s, const(np.ones(4, np.int64)))
    with pytest.raises(BadInputError, match="one entry per resized axis"):
        Resize()(x, None, const(np.ones(3, np.float32)))
    with pytest.raises(BadInputError, match="attribute mode"):
        Resize(mode="area")(x, None, s)
    with pytest.raises(BadInputError, match="antialias"):
        Resize(mode="nearest", antialias=1)(x, None, s)
    with pytest.raises(BadInputError, match="roi"):
        Resize(coordinate_transformation_mode="tf_crop_and_resize")(x, None, s)
    with pytest.raises(BadInputError, match="scale_factor"):
        autograd.upsample(x, [2, 2, 2])


GRID_CASES = [
    (mode, padding, align)
    for mode in ("linear", "nearest", "cubic")
    for padding in ("zeros", "border", "reflection")
    for align in (0, 1)
]


@pytest.mark.parametrize(("mode", "padding", "align"), GRID_CASES)
def test_grid_sample_2d_matches_reference(mode, padding, align):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, (2, 3, 6, 2)).astype(np.float32)
    attrs = dict(mode=mode, padding_mode=padding, align_corners=align)
    expected = reference("GridSample", [x, grid], 22, **attrs)
    got = GridSample(**attrs)(const(x), const(grid)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 2, 7), (1, 2, 3, 4, 5)])
def test_grid_sample_1d_and_3d_match_reference(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    r = len(shape) - 2
    grid = RNG.uniform(-1.1, 1.1, (1, *([3] * r), r)).astype(np.float32)
    expected = reference("GridSample", [x, grid], 22, mode="linear", padding_mode="border")
    got = GridSample(mode="linear", padding_mode="border")(const(x), const(grid)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_grid_sample_gradients_wrt_x_and_grid(mode):
    x = RNG.standard_normal((1, 2, 3, 4))
    grid = RNG.uniform(-0.9, 0.9, (1, 2, 3, 2))
    check_grad(lambda a, b: autograd.grid_sample(a, b, mode=mode), [x, grid])


def test_grid_sample_exports_old_mode_names():
    x = const(np.zeros((1, 1, 2, 2), np.float32))
    op = GridSample(version=22, mode="cubic")
    op(x, const(np.zeros((1, 1, 1, 2), np.float32)))
    g = GraphBuilder(16)
    op.export(g, ["x", "grid"], ["y"])
    assert helper.get_attribute_value(g.nodes[0].attribute[0]) == b"bicubic"


def test_grid_sample_bad_inputs():
    with pytest.raises(BadInputError, match="grid"):
        GridSample()(const(np.zeros((1, 1, 2, 2))), const(np.zeros((1, 2, 2, 3))))
    with pytest.raises(BadInputError, match="padding_mode"):
        GridSample(padding_mode="wrap")(
            const(np.zeros((1, 1, 2, 2))), const(np.zeros((1, 2, 2, 2)))
        )


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_reference_and_differentiates(size, align):
    r = len(size) - 2
    theta = RNG.standard_normal((2, r, r + 1)).astype(np.float32)
    sizes = np.array(size, np.int64)
    expected = reference("AffineGrid", [theta, sizes], 20, align_corners=align)
    got = AffineGrid(align_corners=align)(const(theta), const(sizes)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    check_grad(lambda t: autograd.affine_grid(t, size, bool(align)), [theta.astype(np.float64)])


def test_affine_grid_bad_inputs():
    with pytest.raises(BadInputError, match="AffineGrid"):
        AffineGrid()(const(np.zeros((1, 2, 3), np.float32)), const(np.array([1, 1, 2], np.int64)))


ROI_CASES = [
    dict(mode="avg", coordinate_transformation_mode="half_pixel"),
    dict(mode="avg", coordinate_transformation_mode="output_half_pixel", sampling_ratio=2),
    dict(mode="max", coordinate_transformation_mode="half_pixel"),
]


@pytest.mark.parametrize("attrs", ROI_CASES)
def test_roi_align_matches_reference(attrs):
    x = RNG.standard_normal((2, 3, 8, 9)).astype(np.float32)
    rois = np.array([[0, 0, 7, 7], [1.5, 2.2, 6.1, 5.0], [-2, -1, 12, 3]], np.float32)
    batch = np.array([0, 1, 1], np.int64)
    attrs = dict(attrs, output_height=3, output_width=2, spatial_scale=0.9)
    expected = reference("RoiAlign", [x, rois, batch], 22, **attrs)
    got = RoiAlign(**attrs)(const(x), const(rois), const(batch)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_roi_align_gradient_and_errors():
    rois = np.array([[0.3, 0.6, 3.2, 2.9]])
    batch = np.array([0], np.int64)
    check_grad(
        lambda a: autograd.roi_align(a, const(rois), const(batch), (2, 2), sampling_ratio=2),
        [RNG.standard_normal((1, 2, 4, 4))],
    )
    with pytest.raises(BadInputError, match="batch_indices"):
        RoiAlign()(const(np.zeros((1, 1, 4, 4))), const(rois), const(np.array([3])))
    with pytest.raises(ExportError, match="opset 16"):
        RoiAlign().export_attrs(GraphBuilder(13))
