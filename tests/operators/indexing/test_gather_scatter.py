"""Indexing and data-dependent ops: forward against NumPy / onnx.reference, gradients against
central differences, bad inputs, and export through ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.indexing.helpers import reference, t

RNG = np.random.default_rng(1)


def run_ort(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ---- gathers -------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_matches_numpy_take_with_negative_indices(axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    idx = np.array([[0, -1], [1, 2]], dtype=np.int64)
    out = autograd.gather(t(x), axis, t(idx))
    np.testing.assert_array_equal(out.numpy(), np.take(x, idx, axis=axis))


@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.bool_, np.int8])
def test_gather_keeps_every_dtype(dtype):
    x = np.array([[1, 0, 3], [4, 5, 0]]).astype(dtype)
    out = autograd.gather(t(x), 1, [2, 0])
    assert out.dtype == torch.from_numpy(x).dtype
    np.testing.assert_array_equal(out.numpy(), x[:, [2, 0]])


def test_gather_gradient():
    x = RNG.standard_normal((4, 3))
    check_grad(lambda a: autograd.gather(a, 0, [1, 1, -1]), [x])


def test_gather_elements_matches_take_along_axis_and_grad():
    x = RNG.standard_normal((3, 4))
    idx = np.array([[0, -1], [2, 1], [3, 3]], dtype=np.int64)
    out = autograd.gather_elements(t(x), t(idx), axis=1)
    np.testing.assert_array_equal(out.numpy(), np.take_along_axis(x, idx % 4, axis=1))
    check_grad(lambda a: autograd.gather_elements(a, idx, axis=1), [x])


@pytest.mark.parametrize(
    ("data_shape", "indices", "batch_dims"),
    [
        ((2, 3, 4), [[0, 1], [1, -1]], 0),
        ((2, 3, 4), [[[1]], [[0]]], 0),
        ((2, 3, 4), [[1, 2], [0, -1]], 1),
        ((2, 3, 4), [[[2]], [[0]]], 1),
    ],
)
def test_gather_nd_matches_reference_and_grad(data_shape, indices, batch_dims):
    x = RNG.standard_normal(data_shape)
    idx = np.array(indices, dtype=np.int64)
    out = autograd.gather_nd(t(x), t(idx), batch_dims=batch_dims)
    dims = np.array(data_shape[batch_dims : batch_dims + idx.shape[-1]])
    wrapped = np.where(idx < 0, idx + dims, idx)
    (expected,) = reference("GatherND", [x, wrapped], batch_dims=batch_dims)
    np.testing.assert_allclose(out.numpy(), expected)
    check_grad(lambda a: autograd.gather_nd(a, idx, batch_dims=batch_dims), [x])


# ---- scatters ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_matches_reference(reduction):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, -1, 1], [0, 0, 2]], dtype=np.int64)
    upd = RNG.standard_normal((2, 3)).astype(np.float32)
    if reduction == "none":
        idx = np.array([[1, -1, 2], [0, 3, 2]], dtype=np.int64)
    out = autograd.scatter_elements(t(x), t(idx), t(upd), axis=1, reduction=reduction)
    (expected,) = reference("ScatterElements", [x, idx, upd], axis=1, reduction=reduction)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_scatter_elements_unsigned_max_compares_as_unsigned():
    x = np.array([1, 2**63 + 1, 5], dtype=np.uint64)
    out = autograd.scatter_elements(
        t(x), [0, 1], t(np.array([2**63, 3], dtype=np.uint64)), 0, "max"
    )
    np.testing.assert_array_equal(out.numpy(), np.array([2**63, 2**63 + 1, 5], dtype=np.uint64))


def test_scatter_elements_gradient_wrt_data_and_updates():
    x = RNG.standard_normal((3, 4))
    upd = RNG.standard_normal((2, 2))
    idx = np.array([[0, 3], [2, 1]], dtype=np.int64)
    check_grad(lambda a, u: autograd.scatter_elements(a, idx, u, axis=1), [x, upd])
    check_grad(lambda a, u: autograd.scatter_elements(a, idx, u, axis=1, reduction="add"), [x, upd])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_reference(reduction):
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[0, 1], [3, -1], [0, 1]], dtype=np.int64)
    if reduction == "none":
        idx = np.array([[0, 1], [3, -1], [2, 0]], dtype=np.int64)
    upd = RNG.standard_normal((3, 2)).astype(np.float32)
    out = autograd.scatter_nd(t(x), t(idx), t(upd), reduction=reduction)
    ref_idx = np.where(idx < 0, idx + np.array([4, 3]), idx)
    (expected,) = reference("ScatterND", [x, ref_idx, upd], reduction=reduction)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_scatter_nd_gradient_wrt_data_and_updates():
    x = RNG.standard_normal((4, 3))
    upd = RNG.standard_normal((2, 3))
    idx = np.array([[2], [0]], dtype=np.int64)
    check_grad(lambda a, u: autograd.scatter_nd(a, idx, u), [x, upd])


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_matches_reference_and_grad(mode):
    past = RNG.standard_normal((2, 3, 5, 2))
    upd = RNG.standard_normal((2, 3, 2, 2))
    wi = np.array([1, 4 if mode == "circular" else 3], dtype=np.int64)
    out = autograd.tensor_scatter(t(past), t(upd), t(wi), axis=2, mode=mode)
    (expected,) = reference("TensorScatter", [past, upd, wi], axis=2, mode=mode)
    np.testing.assert_allclose(out.numpy(), expected)
    check_grad(lambda p, u: autograd.tensor_scatter(p, u, wi, axis=2, mode=mode), [past, upd])


# ---- selections ----------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [True, False])
def test_topk_breaks_ties_by_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 5, 5, 0]], dtype=np.float32)
    values, indices = autograd.topk(t(x), 4, axis=1, largest=largest)
    ref_v, ref_i = reference("TopK", [x, np.array([4], np.int64)], 2, axis=1, largest=int(largest))
    np.testing.assert_array_equal(values.numpy(), ref_v)
    np.testing.assert_array_equal(indices.numpy(), ref_i)


def test_topk_uint64_and_gradient():
    x = np.array([2**63 + 7, 1, 2**64 - 1, 5], dtype=np.uint64)
    values, indices = autograd.topk(t(x), 2)
    np.testing.assert_array_equal(values.numpy(), np.array([2**64 - 1, 2**63 + 7], np.uint64))
    np.testing.assert_array_equal(indices.numpy(), [2, 0])
    y = RNG.standard_normal((3, 5))
    check_grad(lambda a: autograd.topk(a, 2, axis=0)[0], [y])


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_matches_reference(axis, sorted_):
    x = np.array([[2, 1, 2], [3, 1, 3], [2, 1, 2]], dtype=np.float32)
    outs = autograd.unique(t(x), axis=axis, sorted=sorted_)
    attrs = {"sorted": int(sorted_)} | ({} if axis is None else {"axis": axis})
    if sorted_:
        expected = reference("Unique", [x], 4, **attrs)
    else:
        # onnx.reference reorders unsorted output along axis 0 only; NumPy gives the truth.
        src = x.reshape(-1) if axis is None else x
        _, first, inverse, counts = np.unique(src, True, True, True, axis=axis)
        order = np.argsort(first)
        rank = np.argsort(order)
        y = np.take(src, first[order], axis=axis or 0)
        expected = [y, first[order], rank[inverse.reshape(-1)], counts[order]]
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_unique_y_is_differentiable():
    # Distinct values: central differences would split equal ones into two unique elements.
    x = np.array([1.5, -2.0, 3.0, 0.25])
    check_grad(lambda a: autograd.unique(a)[0], [x])


@pytest.mark.parametrize("fn", [autograd.argmax, autograd.argmin])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_argmin_match_reference(fn, last, keepdims):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)
    out = fn(t(x), axis=-2, keepdims=keepdims, select_last_index=last)
    op = "ArgMax" if fn is autograd.argmax else "ArgMin"
    (expected,) = reference(op, [x], axis=-2, keepdims=keepdims, select_last_index=last)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.dtype == torch.int64


def test_argmax_bool_and_uint64():
    assert autograd.argmax(t(np.array([False, True, True])), select_last_index=1).item() == 2
    assert autograd.argmin(t(np.array([2**63, 3, 2**64 - 1], np.uint64))).item() == 1


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_matches_reference(center):
    boxes = RNG.uniform(0, 1, (2, 12, 4)).astype(np.float32)
    boxes[..., 2:] += 0.3 if center else boxes[..., :2]
    scores = RNG.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]
    args = [np.array([4], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
    out = autograd.non_max_suppression(t(boxes), t(scores), 4, 0.3, 0.2, center_point_box=center)
    (expected,) = reference("NonMaxSuppression", [boxes, scores, *args], center_point_box=center)
    np.testing.assert_array_equal(out.numpy(), expected)


# ---- training flag, integer paths, bad inputs ---------------------------------------------


def test_integer_paths_carry_no_gradient_in_training():
    autograd.training = True
    x = t(np.array([[3, 1], [2, 7]], dtype=np.int32))
    for out in (
        autograd.gather(x, 1, [1]),
        autograd.scatter_elements(x, [[0], [1]], t(np.array([[9], [9]], np.int32)), axis=1),
        autograd.topk(x, 1)[0],
        autograd.argmax(x),
    ):
        assert not out.requires_grad


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: autograd.gather(t(np.zeros((2, 3))), 1, [3]), "Gather: input indices"),
        (lambda: autograd.gather(t(np.zeros((2, 3))), 2, [0]), "Gather: axis must be in"),
        (lambda: autograd.gather(t(np.zeros(3)), 0, t(np.zeros(1))), "integer element type"),
        (lambda: autograd.topk(t(np.zeros(3)), 4), "TopK: input K"),
        (lambda: autograd.gather_elements(t(np.zeros((2, 3))), [1]), "rank of data"),
        (
            lambda: autograd.scatter_nd(t(np.zeros((3, 2))), [[0]], t(np.zeros(3))),
            "ScatterND: input updates",
        ),
        (lambda: autograd.argmax(t(np.zeros((2, 0))), axis=1), "ArgMax: axis 1"),
        (
            lambda: autograd.scatter_elements(t(np.zeros(3)), [0], t(np.zeros(1)), 0, "avg"),
            "reduction must be one of",
        ),
    ],
)
def test_bad_inputs_raise_bad_input_error(call, message):
    with pytest.raises(BadInputError, match=message):
        call()


def test_gather_names_the_first_index_out_of_range_on_either_side():
    data = t(np.arange(12.0).reshape(4, 3))
    with pytest.raises(BadInputError, match=r"in \[-4, 3\], received -5"):
        autograd.gather(data, 0, [1, -5, 9])
    with pytest.raises(BadInputError, match=r"in \[-4, 3\], received 4"):
        autograd.gather(data, 0, [[0, 4], [-4, 3]])
    got = autograd.gather(data, 0, [[-1, 0], [3, -4]]).numpy()
    np.testing.assert_array_equal(got, np.take(np.arange(12.0).reshape(4, 3), [[3, 0], [3, 0]], 0))
    empty = autograd.gather(data, 0, np.zeros((0,), np.int64)).numpy()
    assert empty.shape == (0, 3)


# ---- export --------------------------------------------------------------------------------


def test_export_round_trips_through_onnxruntime():
    x = Tensor(data=RNG.standard_normal((3, 4)).astype(np.float32), requires_grad=False)
    values, indices = autograd.topk(x, 2, axis=1, largest=False)
    g = autograd.gather_nd(x, [[1], [0]])
    s = autograd.scatter_elements(x, [[1, 0]], t(np.ones((1, 2), np.float32)), 1, "max")
    a = autograd.argmax(x, axis=1, select_last_index=1)
    outs = [values, indices, g, s, a]
    model = to_onnx([x], outs, opset=18)
    got = run_ort(model, {model.graph.input[0].name: x.numpy()})
    for mine, theirs in zip(outs, got, strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs, rtol=1e-6)


def test_export_refuses_what_the_opset_lacks():
    x = t(np.zeros((2, 3), np.float32))
    with pytest.raises(ExportError, match="ArgMax: select_last_index=1 needs opset 12"):
        to_onnx([x], [autograd.argmax(x, select_last_index=1)], opset=11)
    out = autograd.scatter_nd(x, [[0]], t(np.ones((1, 3), np.float32)), reduction="max")
    with pytest.raises(ExportError, match="reduction='max'"):
        to_onnx([x], [out], opset=16)


def _model(node, inputs, outputs, opset: int):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_import_of_deprecated_scatter_and_topk_1_runs_as_modern_ops():
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    scatter = _model(
        helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1),
        [
            helper.make_tensor_value_info("x", f, [2, 3]),
            helper.make_tensor_value_info("i", i64, [2, 1]),
            helper.make_tensor_value_info("u", f, [2, 1]),
        ],
        [helper.make_tensor_value_info("y", f, [2, 3])],
        10,
    )
    x = np.zeros((2, 3), np.float32)
    (y,) = sonnx.prepare(scatter).run([x, np.array([[2], [0]]), np.ones((2, 1), np.float32)])
    np.testing.assert_array_equal(y.numpy(), [[0, 0, 1], [1, 0, 0]])
    topk = _model(
        helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=0),
        [helper.make_tensor_value_info("x", f, [4])],
        [helper.make_tensor_value_info("v", f, [2]), helper.make_tensor_value_info("i", i64, [2])],
        9,
    )
    v, i = sonnx.prepare(topk).run([np.array([1, 4, 4, 2], np.float32)])
    np.testing.assert_array_equal(v.numpy(), [4, 4])
    np.testing.assert_array_equal(i.numpy(), [1, 2])


def test_gather_wraps_a_constant_index_once_and_sees_it_change():
    """An imported graph hands a Gather the same constant index tensor at every run: it is
    checked and wrapped once, again after an in-place change, and again for another axis size."""
    op = autograd.Gather(axis=0)
    data = torch.arange(12.0).reshape(4, 3)
    index = torch.tensor(-1)
    np.testing.assert_array_equal(op.forward(data, index).numpy(), [9.0, 10.0, 11.0])
    wrapped = op._wrapped[3]
    np.testing.assert_array_equal(op.forward(data, index).numpy(), [9.0, 10.0, 11.0])
    assert op._wrapped[3] is wrapped
    np.testing.assert_array_equal(op.forward(data[:2], index).numpy(), [3.0, 4.0, 5.0])
    index.fill_(7)
    with pytest.raises(BadInputError, match=r"indices in \[-4, 3\], received 7"):
        op.forward(data, index)
    many = torch.zeros(2000, dtype=torch.int64)  # a large index tensor is never kept
    assert op.forward(data, many).shape == (2000, 3)
    assert op._wrapped is None or op._wrapped[0] is not many
