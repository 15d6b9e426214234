"""Shape manipulation ops: forward against NumPy / onnx.reference, gradients against central
differences, bad inputs, old-version converters and exports at old opsets (Pad and
CenterCropPad on their own: test_padding.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
import sonnx.autograd as autograd
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.shape.helpers import assert_same, ints, one_node_model, randn, run_node, t


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# ---- forward -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "allowzero", "expected"),
    [
        ([4, 0, -1], 0, (4, 3, 2)),
        ([-1], 0, (24,)),
        ([2, 0, 4], 1, None),
        ([0, 4, 0], 1, None),
    ],
)
def test_reshape(shape, allowzero, expected):
    x = np.arange(24).reshape(4, 3, 2) if expected else np.zeros((0, 4, 0))
    y = autograd.Reshape(allowzero=allowzero)(t(x), ints(shape))
    assert y.shape == (expected or tuple(shape))


def test_reshape_function_records_int64_constant():
    y = autograd.reshape(t(np.ones((2, 6), dtype=bool)), [3, 4])
    assert y.shape == (3, 4) and y.dtype == torch.bool
    assert y.creator.inputs[1].dtype == torch.int64


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -4])
def test_flatten(axis):
    x = randn(2, 3, 4, 5)
    lead = int(np.prod(x.shape[: axis % 4]))
    np.testing.assert_array_equal(autograd.flatten(t(x), axis).numpy(), x.reshape(lead, -1))


def test_transpose_default_and_perm():
    x = randn(2, 3, 4)
    np.testing.assert_array_equal(autograd.transpose(t(x)).numpy(), x.transpose())
    np.testing.assert_array_equal(t(x).transpose([1, 0, 2]).numpy(), x.transpose(1, 0, 2))
    np.testing.assert_array_equal(t(x).T.numpy(), x.T)


def test_concat_and_cat_alias():
    a, b = np.arange(6).reshape(2, 3), np.zeros((2, 0), dtype=np.int64)
    np.testing.assert_array_equal(
        autograd.concat([t(a), t(b), t(a)], -1).numpy(), np.hstack([a, a])
    )
    assert autograd.cat is autograd.concat


def test_split_variants():
    x = t(np.arange(7))
    assert [p.shape for p in autograd.split(x, 0, [2, 0, 5])] == [(2,), (0,), (5,)]
    assert [p.shape for p in autograd.split(x, 0, None, num_output=4)] == [(2,), (2,), (2,), (1,)]
    op = autograd.Split(axis=0, version=13)
    op.requested_outputs = 7
    assert len(op(x)) == 7


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ([1, 0], [3, 10], [0, 1], [1, 2]),
        ([-1], [-1000], [1], [-1]),
        ([2**63 - 1], [-(2**63)], [0], [-2]),
        ([-100], [2**63 - 1], [-1], None),
        ([5], [1], [0], [1]),
        ([20], [1000], [1], [1]),
    ],
)
def test_slice_matches_python_slicing(starts, ends, axes, steps):
    x = np.arange(40).reshape(4, 10)
    index = [slice(None)] * 2
    for i, a in enumerate(axes):
        index[a] = slice(starts[i], ends[i], 1 if steps is None else steps[i])
    y = autograd.slice(t(x), starts, ends, axes, steps)
    np.testing.assert_array_equal(y.numpy(), x[tuple(index)])


@pytest.mark.parametrize(
    ("start", "end", "step"),
    [(-100, -100, -1), (-6, -(2**63), -2), (-7, -6, -1), (-2, 1, -1), (9, -(2**63), -3)],
)
def test_a_backward_slice_clamps_as_onnx_does_not_as_python(start, end, step):
    """ONNX clamps a backward start to [0, dim - 1]: a start before the first element takes
    it (onnxruntime does; Python's ``slice.indices`` takes nothing)."""
    x = np.arange(5, dtype=np.float32)
    bounds = [np.array([v], np.int64) for v in (start, end, 0, step)]
    model, feeds = one_node_model("Slice", [x, *bounds], 13)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.FLOAT, None))
    (expected,) = ort_run(model, feeds)
    got = autograd.slice(t(x), [start], [end], [0], [step])
    np.testing.assert_array_equal(got.numpy(), expected)


def test_squeeze_unsqueeze():
    x = t(np.zeros((1, 3, 1, 0)))
    assert autograd.squeeze(x).shape == (3, 0)
    assert autograd.squeeze(x, -2).shape == (1, 3, 0)
    assert autograd.unsqueeze(t(np.zeros((3, 4))), [0, -1, 2]).shape == (1, 3, 1, 4, 1)
    assert autograd.unsqueeze(Tensor(data=torch.tensor(5.0)), 0).shape == (1,)


def test_tile_expand():
    x = np.arange(6).reshape(2, 3) > 2
    np.testing.assert_array_equal(autograd.tile(t(x), [2, 3]).numpy(), np.tile(x, (2, 3)))
    np.testing.assert_array_equal(autograd.tile(t(x), 2).numpy(), np.tile(x, 2))
    y = autograd.expand(t(np.arange(3).reshape(3, 1)), [2, 1, 4])
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(np.arange(3)[:, None], (2, 3, 4)))


def test_shape_size():
    x = t(np.zeros((2, 3, 4)))
    assert autograd.shape(x).numpy().tolist() == [2, 3, 4]
    assert autograd.Shape(start=-2)(x).numpy().tolist() == [3, 4]
    assert autograd.Shape(start=2, end=1)(x).numpy().tolist() == []
    s = autograd.size(x)
    assert s.shape == () and s.dtype == torch.int64 and s.item() == 24


def test_constant_every_attribute_form():
    assert autograd.Constant(value=np.arange(3, dtype=np.int8))().dtype == torch.int8
    assert autograd.Constant(value_float=2.5)().numpy().tolist() == 2.5
    assert autograd.Constant(value_floats=[1.0, 2.0])().dtype == torch.float32
    assert autograd.Constant(value_int=3)().numpy().tolist() == 3
    assert autograd.Constant(value_ints=[1, 2])().dtype == torch.int64
    assert autograd.Constant(sparse_value=np.eye(2))().shape == (2, 2)
    with pytest.raises(BadInputError, match="strings"):
        autograd.Constant(value_string="a")()


def test_constant_of_shape_range_eyelike():
    y = autograd.constant_of_shape([2, 0, 3], 7)
    assert y.shape == (2, 0, 3) and y.dtype == torch.int64
    assert autograd.constant_of_shape([], True).numpy().tolist() is True
    assert autograd.range(10, 4, -2).numpy().tolist() == [10, 8, 6]
    np.testing.assert_allclose(autograd.range(0.0, 1.0, 0.3).numpy(), np.arange(0, 1, 0.3))
    half = autograd.Range()(*(t(np.array(v, dtype=np.float16)) for v in (1.0, 3.0, 0.5)))
    assert half.dtype == torch.float16 and half.shape == (4,)
    eye = autograd.eye_like(t(np.zeros((3, 4), dtype=np.int32)), k=1, dtype=torch.float64)
    np.testing.assert_array_equal(eye.numpy(), np.eye(3, 4, k=1))


def test_identity_depth_space_roundtrip():
    x = randn(2, 8, 3, 5)
    assert np.array_equal(autograd.identity(t(x)).numpy(), x)
    for mode in ("DCR", "CRD"):
        y = autograd.depth_to_space(t(x), 2, mode)
        assert y.shape == (2, 2, 6, 10)
        np.testing.assert_array_equal(autograd.space_to_depth(y, 2, mode).numpy(), x)


def test_depth_to_space_crd_is_pixel_shuffle():
    x = randn(1, 8, 2, 3)
    y = autograd.depth_to_space(t(x), 2, "CRD").data
    assert torch.equal(y, torch.nn.functional.pixel_shuffle(torch.from_numpy(x), 2))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_trilu(upper, k):
    x = np.arange(2 * 3 * 5).reshape(2, 3, 5) % 4 == 1
    ref = np.triu(x, k) if upper else np.tril(x, k)
    np.testing.assert_array_equal(autograd.trilu(t(x), k, upper).numpy(), ref)


def test_center_crop_pad_and_reverse_sequence():
    x = np.arange(20.0).reshape(4, 5)
    y = autograd.center_crop_pad(t(x), [2, 8])
    ref = np.zeros((2, 8))
    ref[:, 1:6] = x[1:3]
    np.testing.assert_array_equal(y.numpy(), ref)
    got = autograd.reverse_sequence(t(x), [4, 3, 2, 1, 0], batch_axis=1, time_axis=0).numpy()
    ref = x.copy()
    for b, n in enumerate([4, 3, 2, 1, 0]):
        ref[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(got, ref)


def test_uint16_and_zero_size_survive():
    x = Tensor(data=torch.arange(6, dtype=torch.int32).to(torch.uint16).reshape(2, 3))
    assert autograd.trilu(x).dtype == torch.uint16
    assert autograd.reverse_sequence(x, [1, 2, 2], batch_axis=1, time_axis=0).dtype == torch.uint16
    empty = t(np.zeros((0, 3)))
    assert autograd.pad(empty, "constant", [1, 0, 1, 0]).shape == (2, 3)
    assert autograd.slice(empty, [0], [2], [1]).shape == (0, 2)


# ---- gradients -----------------------------------------------------------------------------

GRAD_CASES = {
    "reshape": (lambda x: autograd.reshape(x, [3, -1]), [randn(2, 3, 2)]),
    "flatten": (lambda x: autograd.flatten(x, 2), [randn(2, 3, 2)]),
    "transpose": (lambda x: autograd.transpose(x, [2, 0, 1]), [randn(2, 3, 2)]),
    "concat": (lambda a, b: autograd.concat([a, b, a], 1), [randn(2, 2), randn(2, 3)]),
    "split": (lambda x: autograd.split(x, 1, [1, 3])[1] * 2.0, [randn(2, 4)]),
    "slice": (lambda x: autograd.slice(x, [3, 0], [0, 4], [0, 1], [-1, 2]), [randn(4, 4)]),
    "squeeze": (lambda x: autograd.squeeze(x, 0), [randn(1, 3)]),
    "unsqueeze": (lambda x: autograd.unsqueeze(x, [0, 2]), [randn(2, 3)]),
    "tile": (lambda x: autograd.tile(x, [2, 3]), [randn(2, 2)]),
    "expand": (lambda x: autograd.expand(x, [2, 3, 4]), [randn(3, 1)]),
    "depth_to_space": (lambda x: autograd.depth_to_space(x, 2, "CRD"), [randn(1, 4, 2, 2)]),
    "space_to_depth": (lambda x: autograd.space_to_depth(x, 2), [randn(1, 2, 2, 4)]),
    "trilu": (lambda x: autograd.trilu(x, 1, upper=False), [randn(3, 4)]),
    "identity": (autograd.identity, [randn(3)]),
    "reverse_sequence": (lambda x: autograd.reverse_sequence(x, [2, 3, 1]), [randn(3, 3, 2)]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients(name):
    fn, arrays = GRAD_CASES[name]
    check_grad(fn, arrays)


# ---- bad inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: autograd.reshape(t(np.zeros(6)), [4, -1]), "Reshape: cannot reshape"),
        (lambda: autograd.reshape(t(np.zeros(6)), [-1, -1]), "at most one -1"),
        (lambda: autograd.flatten(t(np.zeros((2, 3))), 3), "Flatten: axis must be in"),
        (lambda: autograd.transpose(t(np.zeros((2, 3))), [0, 0]), "permutation"),
        (lambda: autograd.concat([t(np.zeros((2, 3))), t(np.zeros(3))]), "same rank"),
        (lambda: autograd.concat([t(np.zeros((2, 3))), t(np.zeros((3, 3)))], 1), "every dim"),
        (lambda: autograd.split(t(np.zeros(5)), 0, [2, 2]), "sum to 5"),
        (lambda: autograd.split(t(np.zeros(5)), 0, None), "parts"),
        (lambda: autograd.slice(t(np.zeros(5)), [0], [2], [0], [0]), "non-zero"),
        (lambda: autograd.slice(t(np.zeros(5)), [0, 1], [2], None), "equal lengths"),
        (lambda: autograd.squeeze(t(np.zeros((2, 3))), 1), "do not have size 1"),
        (lambda: autograd.unsqueeze(t(np.zeros(2)), [0, 0]), "must not repeat"),
        (lambda: autograd.tile(t(np.zeros(2)), [1, 2]), "at most 1"),
        (lambda: autograd.Tile()(t(np.zeros(2)), ints([1, 2])), "Tile: repeats must hold 1"),
        (lambda: autograd.expand(t(np.zeros(3)), [2, 4]), "cannot be broadcast"),
        (lambda: autograd.depth_to_space(t(np.zeros((1, 3, 2, 2))), 2), "multiple of"),
        (lambda: autograd.space_to_depth(t(np.zeros((1, 3, 2))), 2), "must be 4-D"),
        (lambda: autograd.depth_to_space(t(np.zeros((1, 4, 2, 2))), 2, "XYZ"), "mode must be"),
        (lambda: autograd.trilu(t(np.zeros(3))), "at least 2-D"),
        (lambda: autograd.eye_like(t(np.zeros(3))), "must be 2-D"),
        (lambda: autograd.range(0, 5, 0), "non-zero"),
        (lambda: autograd.Constant()(), "exactly one"),
        (lambda: autograd.constant_of_shape([2, -1]), "non-negative"),
        (lambda: autograd.reverse_sequence(t(np.zeros((3, 2))), [4, 1]), r"in \[0, 3\]"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(BadInputError, match=match):
        call()


# ---- importer: old versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op_type", "inputs", "opset", "n_outputs", "attrs"),
    [
        ("Split", [randn(6, 2)], 2, 3, {"axis": 0}),
        ("Split", [randn(6, 2)], 11, 2, {"axis": -2, "split": [1, 5]}),
        ("Split", [randn(2, 6), np.array([2, 4], dtype=np.int64)], 13, 2, {"axis": 1}),
        ("Split", [randn(7)], 18, 3, {"num_outputs": 3}),
        ("Slice", [randn(5, 4)], 1, 1, {"starts": [1, -3], "ends": [100, -1], "axes": [0, 1]}),
        ("Squeeze", [randn(1, 3, 1)], 1, 1, {"axes": [2]}),
        ("Squeeze", [randn(1, 3, 1)], 11, 1, {}),
        ("Unsqueeze", [randn(3)], 11, 1, {"axes": [-1, 0]}),
        ("DepthToSpace", [randn(1, 8, 2, 2)], 1, 1, {"blocksize": 2}),
        ("SpaceToDepth", [randn(1, 2, 4, 4)], 1, 1, {"blocksize": 2}),
        ("Flatten", [randn(2, 3, 4)], 1, 1, {"axis": 2}),
        ("Shape", [randn(2, 3, 4)], 15, 1, {"start": 1}),
        ("ConstantOfShape", [np.array([2, 3])], 9, 1, {}),
        ("EyeLike", [randn(3, 4)], 9, 1, {"k": -1}),
        ("ReverseSequence", [randn(3, 2), np.array([2, 3])], 10, 1, {}),
    ],
)
def test_import_old_versions_match_reference(op_type, inputs, opset, n_outputs, attrs):
    got, expected = run_node(op_type, inputs, opset, n_outputs, **attrs)
    assert_same(got, expected)


def test_import_versions_the_reference_lacks():
    x = randn(2, 3)
    for op_type, inputs, attrs, expected in [
        ("Reshape", [x], {"shape": [1, 0, -1]}, x.reshape(1, 3, 2)),
        ("Tile", [x, np.array([3]), np.array([1])], {}, np.tile(x, (1, 3))),
        ("Concat", [x, x[:, :1]], {}, np.hstack([x, x[:, :1]])),
    ]:
        model, feeds = one_node_model(op_type, inputs, 1, **attrs)
        (got,) = sonnx.prepare(model).run(feeds)
        np.testing.assert_array_equal(got.numpy(), expected)


def test_import_of_attribute_axes_runs_and_exports_its_own_form():
    node = helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0])
    model = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        ),
        opset_imports=[helper.make_opsetid("", 11)],
    )
    x = Tensor(data=np.ones(2, dtype=np.float32), requires_grad=False)
    (y,) = sonnx.prepare(model).run([x])
    assert y.shape == (1, 2)
    assert list(sonnx.to_onnx([x], [y]).graph.node) == [node]


# ---- export ----------------------------------------------------------------------------------


def _graph_for_export():
    """x -> reshape, squeeze/unsqueeze, slice with steps, split (uneven), pad (axes), shape."""
    x = Tensor(data=randn(2, 1, 6).astype(np.float32), requires_grad=False, name="x")
    y = autograd.reshape(x, [2, 6])
    y = autograd.unsqueeze(autograd.squeeze(autograd.unsqueeze(y, 0), [0]), [1])
    y = autograd.slice(y, [0, 5], [2, -100], [0, 2], [1, -2])
    parts = autograd.split(y, 2, None, num_output=2)
    padded = autograd.Pad(mode="reflect")(parts[0], ints([1, 1]), None, ints([-1]))
    return x, [padded, parts[1], autograd.Shape(start=1)(y)]


@pytest.mark.parametrize("opset", [11, 13, 17, 18, 21])
def test_export_at_old_and_new_opsets_runs_in_onnxruntime(opset):
    x, outs = _graph_for_export()
    model = to_onnx([x], outs, opset=opset)
    ops = {n.op_type: n for n in model.graph.node}
    if opset < 13:
        assert [a.name for a in ops["Squeeze"].attribute] == ["axes"]
        assert len(ops["Split"].input) == 1
    got = ort_run(model, {"x": x.numpy()})
    for g, want in zip(got, outs, strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6)


def test_export_computed_axes_below_13_is_an_error():
    x = Tensor(data=np.zeros((1, 3), dtype=np.float32), requires_grad=False, name="x")
    axes = autograd.Shape(end=1)(x) - 1
    y = autograd.Squeeze()(x, axes)
    with pytest.raises(ExportError, match="Squeeze: at opset 12 'axes' must be an attribute"):
        to_onnx([x], [y], opset=12)


def _export_one(op: Operator, opset: int, names: list[str]) -> onnx.NodeProto:
    g = GraphBuilder(opset)
    op.export(g, names, ["y"])
    return g.nodes


def test_attribute_forms_of_the_oldest_opsets():
    x = t(randn(4, 4))
    sliced = autograd.slice(x, [1], [3], [1])
    (node,) = _export_one(sliced.creator, 9, ["x", "s", "e", "a"])
    assert helper.get_attribute_value(node.attribute[0]) == [1] and len(node.input) == 1
    stepped = autograd.slice(x, [3], [0], [1], [-1])
    with pytest.raises(ExportError, match="steps other than 1"):
        _export_one(stepped.creator, 9, ["x", "s", "e", "a", "p"])
    padded = autograd.pad(x, "constant", [1, 0, 0, 1], 3.0)
    (node,) = _export_one(padded.creator, 2, ["x", "p", "v"])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["pads"] == [1, 0, 0, 1] and attrs["value"] == 3.0
    reshaped = autograd.reshape(x, [2, 8])
    (node,) = _export_one(reshaped.creator, 4, ["x", "s"])
    assert helper.get_attribute_value(node.attribute[0]) == [2, 8]


def test_export_refusals():
    x = t(randn(1, 8, 2, 2))
    crd = autograd.space_to_depth(x, 2, "CRD")
    with pytest.raises(ExportError, match="CRD"):
        _export_one(crd.creator, 21, ["x"])
    wrapped = autograd.pad(t(randn(2, 2)), "wrap", [1, 1, 1, 1])
    with pytest.raises(ExportError, match="wrap"):
        _export_one(wrapped.creator, 18, ["x", "p"])
    zero = autograd.Reshape(allowzero=1)(t(np.zeros((0, 2))), ints([2, 0]))
    with pytest.raises(ExportError, match="allowzero"):
        _export_one(zero.creator, 13, ["x", "s"])


def test_export_constant_trilu_range_and_constant_of_shape():
    x = Tensor(data=randn(3, 3).astype(np.float32), requires_grad=False, name="x")
    c = autograd.Constant(value_ints=[1, 2, 3])()
    n = autograd.size(x)
    r = autograd.Range()(autograd.Constant(value_int=0)(), n, autograd.Constant(value_int=2)())
    outs = [
        autograd.trilu(x, -1),
        autograd.concat([c, r]),
        autograd.constant_of_shape(autograd.shape(x), 1.5),
        autograd.depth_to_space(autograd.reshape(x, [1, 9, 1, 1]), 3),
    ]
    model = to_onnx([x], outs, opset=17)
    for g, want in zip(ort_run(model, {"x": x.numpy()}), outs, strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6)


def test_one_reshape_operator_resolves_each_new_shape_or_input_size():
    """The target kept for the last shape tensor and input sizes serves only those: a 0 copies
    the new input's dimension, an in-place change of the shape tensor is seen, and a bad
    target after good ones is still refused."""
    from sonnx.operators.shape.layout import Reshape

    op = Reshape(14)
    shape = torch.tensor([0, -1])
    for rows, cols in ((2, 6), (2, 6), (3, 4), (2, 6)):
        x = torch.arange(rows * cols * 1.0).reshape(rows, cols, 1)
        assert tuple(op.forward(x, shape).shape) == (rows, cols)
    shape.copy_(torch.tensor([3, -1]))  # same tensor, new values
    assert tuple(op.forward(torch.zeros(2, 6, 1), shape).shape) == (3, 4)
    with pytest.raises(BadInputError, match=r"cannot reshape input of shape \(2, 5, 1\)"):
        op.forward(torch.zeros(2, 5, 1), shape)


def test_one_slice_operator_resolves_each_new_bound_or_input_size():
    """The index kept for the last bound tensors and input sizes serves only those: bounds
    clamp to each new size, an in-place change of a bound is seen, negative steps still flip."""
    from sonnx.operators.shape.slicing import Slice

    op = Slice(13)
    starts, ends = torch.tensor([1, -1]), torch.tensor([100, -100])
    axes, steps = torch.tensor([0, 1]), torch.tensor([1, -2])
    for rows, cols in ((3, 5), (3, 5), (4, 7), (3, 5)):
        x = np.arange(rows * cols).reshape(rows, cols)
        got = op.forward(torch.from_numpy(x), starts, ends, axes, steps)
        np.testing.assert_array_equal(got.numpy(), x[1:100, -1:-100:-2])
    starts.copy_(torch.tensor([0, -2]))  # same tensor, new values
    got = op.forward(torch.from_numpy(x), starts, ends, axes, steps)
    np.testing.assert_array_equal(got.numpy(), x[0:100, -2:-100:-2])
