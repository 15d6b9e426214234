"""Reductions: forward against onnx.reference for every op, empty sets, integer dtypes,
gradients against central differences, bad inputs, and export to the attribute/input forms."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import sonnx
import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor
from tests.helpers import check_grad

RNG = np.random.default_rng(2)

FUNCTIONS = {
    "ReduceSum": autograd.reduce_sum,
    "ReduceMean": autograd.reduce_mean,
    "ReduceMax": autograd.reduce_max,
    "ReduceMin": autograd.reduce_min,
    "ReduceProd": autograd.reduce_prod,
    "ReduceL1": autograd.reduce_l1,
    "ReduceL2": autograd.reduce_l2,
    "ReduceLogSum": autograd.reduce_log_sum,
    "ReduceLogSumExp": autograd.reduce_log_sum_exp,
    "ReduceSumSquare": autograd.reduce_sum_square,
}


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def reference(op_type: str, x: np.ndarray, axes, keepdims: int, noop: int = 0) -> np.ndarray:
    inputs = ["x"] if axes is None else ["x", "axes"]
    node = helper.make_node(op_type, inputs, ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    feeds = {"x": x} if axes is None else {"x": x, "axes": np.asarray(axes, np.int64)}
    with warnings.catch_warnings():  # NumPy warns about the mean of an empty set (NaN)
        warnings.simplefilter("ignore", RuntimeWarning)
        return ReferenceEvaluator(node).run(None, feeds)[0]


@pytest.mark.parametrize("op_type", sorted(FUNCTIONS))
@pytest.mark.parametrize(("axes", "keepdims"), [(None, 1), ([1], 0), ([-1, 0], 1), ([0, 2], 0)])
def test_forward_matches_reference(op_type, axes, keepdims):
    x = RNG.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    out = FUNCTIONS[op_type](t(x), axes, keepdims)
    expected = reference(op_type, x, axes, keepdims)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("op_type", sorted(FUNCTIONS))
def test_empty_set_gives_identity_element(op_type):
    x = np.zeros((2, 0, 4), dtype=np.float32)
    out = FUNCTIONS[op_type](t(x), [1], 1)
    expected = reference(op_type, x, [1], 1)
    assert out.shape == (2, 1, 4)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_noop_with_empty_axes_is_identity_and_empty_axes_reduce_all():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    empty = t(np.zeros(0, np.int64))
    same = autograd.ReduceSum(noop_with_empty_axes=1)(t(x), empty)
    np.testing.assert_array_equal(same.numpy(), x)
    total = autograd.ReduceMax(keepdims=0)(t(x), empty)
    np.testing.assert_allclose(total.numpy(), x.max())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.int8])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_integer_dtypes_are_kept(dtype, op_type):
    x = RNG.integers(0, 5, (3, 4)).astype(dtype)
    out = FUNCTIONS[op_type](t(x), [1], 0)
    assert out.numpy().dtype == dtype
    np.testing.assert_array_equal(out.numpy(), reference(op_type, x, [1], 0))


def test_unsigned_extremes_compare_as_unsigned_and_bool_max():
    x = np.array([[1, 2**64 - 1], [2**63, 3]], dtype=np.uint64)
    np.testing.assert_array_equal(autograd.reduce_max(t(x), [1], 0).numpy(), [2**64 - 1, 2**63])
    np.testing.assert_array_equal(autograd.reduce_min(t(x), [0], 0).numpy(), [1, 3])
    flags = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(autograd.reduce_max(t(flags), [1], 0).numpy(), [True, False])
    assert autograd.reduce_max(t(np.zeros((0,), bool))).numpy().tolist() == [False]


@pytest.mark.parametrize("op_type", sorted(FUNCTIONS))
def test_gradients_match_central_differences(op_type):
    x = RNG.uniform(0.5, 2.0, (2, 3, 4))
    check_grad(lambda a: FUNCTIONS[op_type](a, [0, -1], 1), [x])
    check_grad(lambda a: FUNCTIONS[op_type](a, None, 0), [x])


def test_reduce_l2_gradient_is_finite_at_zero():
    autograd.training = True
    x = Tensor(data=torch.zeros(3, dtype=torch.float64), stores_grad=True)
    (_, grad), *_ = autograd.backward(autograd.reduce_l2(x))
    assert torch.isfinite(grad.data).all()


def test_integer_reduction_in_training_carries_no_gradient():
    autograd.training = True
    out = autograd.reduce_mean(t(np.array([[1, 2], [4, 5]], np.int64)), [1])
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [[1], [4]])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: autograd.reduce_sum(t(np.zeros((2, 3))), [2]), "ReduceSum: axes must be in"),
        (lambda: autograd.reduce_max(t(np.zeros((2, 3))), [1, -1]), "must not repeat"),
        (lambda: autograd.reduce_sum(t(np.zeros(2, bool))), "ReduceSum: input data"),
    ],
)
def test_bad_inputs_raise_bad_input_error(call, message):
    with pytest.raises(BadInputError, match=message):
        call()


def _ort(model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


@pytest.mark.parametrize("opset", [11, 13, 17, 18, 20])
@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceLogSumExp"])
def test_export_writes_attribute_or_input_axes_by_opset(opset, op_type):
    x = Tensor(data=RNG.standard_normal((2, 3, 4)).astype(np.float32), requires_grad=False)
    out = FUNCTIONS[op_type](x, [-1, 0], 0)
    model = to_onnx([x], [out], opset=opset)
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    input_form = opset >= (13 if op_type == "ReduceSum" else 18)
    assert len(node.input) == (2 if input_form else 1)
    assert any(a.name == "axes" for a in node.attribute) != input_form
    np.testing.assert_allclose(_ort(model, x.numpy()), out.numpy(), rtol=1e-5)


def test_export_noop_empty_axes_before_input_form_is_identity():
    x = Tensor(data=np.ones((2, 2), np.float32), requires_grad=False)
    out = autograd.ReduceMean(noop_with_empty_axes=1)(x, t(np.zeros(0, np.int64)))
    model = to_onnx([x], [out], opset=13)
    ops = [n.op_type for n in model.graph.node]
    assert "ReduceMean" not in ops
    assert ops[0] == "Identity"


def test_export_refuses_computed_axes_and_old_bool_max():
    x = t(np.ones((2, 3), np.float32))
    axes = autograd.reduce_sum(t(np.array([1], np.int64)), [0])
    out = autograd.ReduceProd()(x, axes)
    with pytest.raises(ExportError, match="ReduceProd: input axes is computed"):
        to_onnx([x], [out], opset=17)
    flags = t(np.ones(2, bool))
    with pytest.raises(ExportError, match="ReduceMax: a boolean input exists in ONNX only"):
        to_onnx([flags], [autograd.reduce_max(flags)], opset=18)


def test_import_of_attribute_axes_runs_and_exports_its_own_form():
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    xt = Tensor(data=x, requires_grad=False)
    (y,) = sonnx.prepare(model).run([xt])
    np.testing.assert_allclose(y.numpy(), x.mean(axis=1), rtol=1e-6)
    assert list(sonnx.to_onnx([xt], [y]).graph.node) == [node]
