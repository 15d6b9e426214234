"""Activations and the softmax family: forward vs onnx.reference, gradients, errors, export."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx.autograd as autograd
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.activation import functions as act
from sonnx.operators.activation import gated
from sonnx.operators.activation import softmax as sm
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

RNG = np.random.default_rng(0)


def _tensor(a: np.ndarray) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def _reference(op_type: str, inputs: list[np.ndarray], opset: int, **attrs) -> np.ndarray:
    """Run one ONNX node with onnx.reference at ``opset``."""
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, elem, None) for n in names],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]


def _run_exported(op: Operator, inputs: list[np.ndarray], opset: int) -> np.ndarray:
    """Export ``op`` (already called) at ``opset`` into a model and run it with onnxruntime.

    onnxruntime, unlike onnx.reference, implements the pre-13 softmax family's 2-D coercion.
    """
    g = GraphBuilder(opset)
    names = [f"x{i}" for i in range(len(inputs))]
    op.export(g, names, ["y"])
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        g.nodes,
        "g",
        [
            helper.make_tensor_value_info(n, elem, a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info("y", elem, inputs[0].shape)],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(zip(names, inputs, strict=True)))[0]


X = RNG.standard_normal((3, 4)).astype(np.float32) * 3

# (op class, attrs, onnx opset for the reference)
UNARY = [
    (act.Relu, {}, 14),
    (act.LeakyRelu, {"alpha": 0.1}, 16),
    (act.Elu, {"alpha": 0.7}, 22),
    (act.Selu, {}, 22),
    (act.Celu, {"alpha": 2.0}, 12),
    (act.Sigmoid, {}, 13),
    (act.HardSigmoid, {"alpha": 0.3, "beta": 0.4}, 22),
    (gated.HardSwish, {}, 22),
    (act.Tanh, {}, 13),
    (act.Softplus, {}, 22),
    (act.Softsign, {}, 22),
    (act.ThresholdedRelu, {"alpha": 0.5}, 22),
    (gated.Gelu, {}, 20),
    (gated.Gelu, {"approximate": "tanh"}, 20),
    (gated.Mish, {}, 22),
    (gated.Swish, {"alpha": 1.5}, 24),
    (act.Shrink, {"bias": 0.5, "lambd": 1.0}, 9),
]


@pytest.mark.parametrize(("cls", "attrs", "opset"), UNARY)
def test_unary_forward_matches_reference(cls, attrs, opset):
    got = cls(**attrs)(_tensor(X)).numpy()
    ref = _reference(cls.op_type, [X], opset, **attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("cls", "attrs", "opset"), [u for u in UNARY if u[0] is not act.Shrink])
def test_unary_gradients(cls, attrs, opset):
    # Keep points away from kinks (0, thresholds) so central differences are smooth.
    x = np.array([[-2.3, -0.7, 0.35, 1.8], [2.9, -1.6, 0.8, -3.1]])
    check_grad(lambda t: cls(**attrs)(t), [x])


def test_shrink_gradient_and_integers():
    check_grad(lambda t: act.shrink(t, 0.5, 1.0), [np.array([-2.5, -0.2, 0.3, 1.7])])
    xi = np.array([-3, -1, 0, 1, 3], dtype=np.int32)
    got = act.Shrink(bias=1.0, lambd=1.5)(_tensor(xi)).numpy()
    np.testing.assert_array_equal(got, np.array([-2, 0, 0, 0, 2], dtype=np.int32))


def test_relu_keeps_integer_types():
    xi = np.array([-2, 0, 5], dtype=np.int64)
    assert act.relu(_tensor(xi)).numpy().tolist() == [0, 0, 5]


def test_prelu_broadcast_forward_and_gradients():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    got = act.prelu(_tensor(x), _tensor(slope)).numpy()
    np.testing.assert_allclose(got, _reference("PRelu", [x, slope], 16), rtol=1e-6)
    xd = np.array([[-1.5, 0.4, -0.3], [2.0, -2.2, 0.9]])
    check_grad(act.prelu, [xd, np.array([[0.25], [0.5]])])


def test_swiglu_forward_and_gradients():
    a, b = X, RNG.standard_normal(X.shape).astype(np.float32)
    got = gated.swiglu(_tensor(a), _tensor(b), alpha=1.7).numpy()
    np.testing.assert_allclose(got, _reference("SwiGLU", [a, b], 28, alpha=1.7), rtol=1e-5)
    check_grad(lambda p, q: gated.swiglu(p, q, 0.8), [a.astype(np.float64), b.astype(np.float64)])


def test_singa_function_defaults_equal_onnx():
    t = _tensor(X)
    np.testing.assert_allclose(
        act.selu(t).numpy(), _reference("Selu", [X], 22), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(act.leakyrelu(t).numpy(), _reference("LeakyRelu", [X], 16))
    np.testing.assert_allclose(act.hardsigmoid(t).numpy(), _reference("HardSigmoid", [X], 22))
    ref = _reference("Softmax", [X], 13, axis=1)
    np.testing.assert_allclose(sm.softmax(t).numpy(), ref, rtol=1e-6)


X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("version", [1, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_versions(op_type, version, axis):
    op = getattr(sm, op_type)(version=version, axis=axis)
    got = op(_tensor(X3)).numpy()
    if version < 13:
        # onnx.reference implements only the one-axis meaning: coerce to 2-D by hand.
        rows = int(np.prod(X3.shape[: axis % X3.ndim]))
        flat = X3.reshape(rows, -1)
        ref = _reference(op_type, [flat], 13, axis=1).reshape(X3.shape)
    else:
        ref = _reference(op_type, [X3], version, axis=axis)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("version", "target"), [(11, 13), (13, 11), (11, 11), (None, 18)])
def test_softmax_family_exports_across_the_opset_13_change(op_type, version, target):
    op = getattr(sm, op_type)(version=version, axis=1)
    expected = op(_tensor(X3)).numpy()
    np.testing.assert_allclose(_run_exported(op, [X3], target), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [sm.softmax, sm.log_softmax])
def test_softmax_gradients(fn):
    check_grad(lambda t: fn(t, axis=1), [RNG.standard_normal((2, 3, 2))])


def test_hardmax_has_no_gradient_and_picks_first_maximum():
    autograd.training = True
    x = Tensor(data=np.array([[1.0, 3.0, 3.0]]), requires_grad=True, stores_grad=True)
    y = sm.hardmax(x)
    assert y.numpy().tolist() == [[0.0, 1.0, 0.0]]
    assert not y.requires_grad


@pytest.mark.parametrize(
    ("cls", "attrs", "opset"),
    [
        (gated.Gelu, {}, 13),
        (gated.Gelu, {"approximate": "tanh"}, 13),
        (gated.Mish, {}, 13),
        (gated.HardSwish, {}, 13),
        (gated.Swish, {"alpha": 2.0}, 13),
        (act.Celu, {"alpha": 1.5}, 11),
        (act.ThresholdedRelu, {"alpha": 0.2}, 9),
    ],
)
def test_late_activations_decompose_for_old_opsets(cls, attrs, opset):
    op = cls(**attrs)
    expected = op(_tensor(X)).numpy()
    np.testing.assert_allclose(_run_exported(op, [X], opset), expected, rtol=1e-5, atol=1e-6)


def test_swiglu_decomposes_for_old_opsets():
    b = RNG.standard_normal(X.shape).astype(np.float32)
    op = gated.SwiGLU(alpha=0.5)
    expected = op(_tensor(X), _tensor(b)).numpy()
    np.testing.assert_allclose(_run_exported(op, [X, b], 18), expected, rtol=1e-5, atol=1e-6)


def test_legacy_consumed_inputs_is_not_exported():
    op = act.Relu(version=1, consumed_inputs=[0])
    op(_tensor(X))
    g = GraphBuilder(14)
    op.export(g, ["x"], ["y"])
    assert [a.name for a in g.nodes[0].attribute] == []


def test_shrink_cannot_be_written_before_it_existed():
    op = act.Shrink()
    op(_tensor(X))
    with pytest.raises(ExportError, match="Shrink"):
        op.export(GraphBuilder(8), ["x"], ["y"])


def test_bad_inputs():
    with pytest.raises(BadInputError, match="Sigmoid: input X must be a floating-point"):
        act.sigmoid(_tensor(np.array([1, 2])))
    with pytest.raises(BadInputError, match="PRelu: input slope must broadcast"):
        act.prelu(_tensor(X), _tensor(np.ones(3, dtype=np.float32)))
    with pytest.raises(BadInputError, match="Softmax: attribute axis"):
        sm.softmax(_tensor(X), axis=2)
    with pytest.raises(BadInputError, match="SwiGLU: inputs A and B"):
        gated.swiglu(_tensor(X), _tensor(X[:2]))
    with pytest.raises(BadInputError, match="Gelu: attribute approximate"):
        gated.gelu(_tensor(X), approximate="erf")
    with pytest.raises(BadInputError, match="Relu: input X must be a signed"):
        act.relu(_tensor(np.array([1], dtype=np.uint8)))


def test_half_precision_runs():
    x = torch.linspace(-3, 3, 7, dtype=torch.bfloat16)
    y = gated.gelu(Tensor(data=x, requires_grad=False))
    assert y.dtype == torch.bfloat16


def test_float16_softmax_rounds_like_the_onnx_reference():
    x = (RNG.standard_normal((4, 7)) * 3).astype(np.float16)
    got = sm.softmax(_tensor(x), axis=1).numpy()
    np.testing.assert_array_equal(got, _reference("Softmax", [x], 13, axis=1))


def test_prelu_before_version_7_has_one_slope_per_channel_and_exports_as_such():
    import onnxruntime as ort

    from sonnx.onnx.exporter import to_onnx
    from sonnx.operators.activation.functions import PRelu
    from sonnx.tensor import Tensor

    rng = np.random.default_rng(0)
    x = Tensor(
        data=rng.standard_normal((2, 3, 4)).astype(np.float32), requires_grad=False, name="x"
    )
    slope = Tensor(data=np.array([0.1, 0.2, 0.3], np.float32), requires_grad=False)
    y = PRelu(version=6)(x, slope)
    xs = x.data.numpy()
    expected = np.where(xs < 0, xs * np.array([0.1, 0.2, 0.3], np.float32)[:, None], xs)
    np.testing.assert_allclose(y.data.numpy(), expected, rtol=1e-6)
    session = ort.InferenceSession(
        to_onnx([x], [y]).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(session.run(None, {"x": xs})[0], expected, rtol=1e-6)
