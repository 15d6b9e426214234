"""The activations of ``functions`` and the softmax family: forward vs onnx.reference,
gradients, errors, export (the gated activations are in test_gated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.activation import functions as act
from sonnx.operators.activation import softmax as sm
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.activation.helpers import reference, run_exported, tensor

RNG = np.random.default_rng(0)


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
    (act.Tanh, {}, 13),
    (act.Softplus, {}, 22),
    (act.Softsign, {}, 22),
    (act.ThresholdedRelu, {"alpha": 0.5}, 22),
    (act.Shrink, {"bias": 0.5, "lambd": 1.0}, 9),
]


@pytest.mark.parametrize(("cls", "attrs", "opset"), UNARY)
def test_unary_forward_matches_reference(cls, attrs, opset):
    got = cls(**attrs)(tensor(X)).numpy()
    ref = reference(cls.op_type, [X], opset, **attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("cls", "attrs", "opset"), [u for u in UNARY if u[0] is not act.Shrink])
def test_unary_gradients(cls, attrs, opset):
    # Keep points away from kinks (0, thresholds) so central differences are smooth.
    x = np.array([[-2.3, -0.7, 0.35, 1.8], [2.9, -1.6, 0.8, -3.1]])
    check_grad(lambda t: cls(**attrs)(t), [x])


def test_shrink_gradient_and_integers():
    check_grad(lambda t: act.shrink(t, 0.5, 1.0), [np.array([-2.5, -0.2, 0.3, 1.7])])
    xi = np.array([-3, -1, 0, 1, 3], dtype=np.int32)
    got = act.Shrink(bias=1.0, lambd=1.5)(tensor(xi)).numpy()
    np.testing.assert_array_equal(got, np.array([-2, 0, 0, 0, 2], dtype=np.int32))


def test_relu_keeps_integer_types():
    xi = np.array([-2, 0, 5], dtype=np.int64)
    assert act.relu(tensor(xi)).numpy().tolist() == [0, 0, 5]


def test_prelu_broadcast_forward_and_gradients():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    got = act.prelu(tensor(x), tensor(slope)).numpy()
    np.testing.assert_allclose(got, reference("PRelu", [x, slope], 16), rtol=1e-6)
    xd = np.array([[-1.5, 0.4, -0.3], [2.0, -2.2, 0.9]])
    check_grad(act.prelu, [xd, np.array([[0.25], [0.5]])])


def test_singa_function_defaults_equal_onnx():
    t = tensor(X)
    np.testing.assert_allclose(
        act.selu(t).numpy(), reference("Selu", [X], 22), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(act.leakyrelu(t).numpy(), reference("LeakyRelu", [X], 16))
    np.testing.assert_allclose(act.hardsigmoid(t).numpy(), reference("HardSigmoid", [X], 22))
    ref = reference("Softmax", [X], 13, axis=1)
    np.testing.assert_allclose(sm.softmax(t).numpy(), ref, rtol=1e-6)


X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("version", [1, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_versions(op_type, version, axis):
    op = getattr(sm, op_type)(version=version, axis=axis)
    got = op(tensor(X3)).numpy()
    if version < 13:
        # onnx.reference implements only the one-axis meaning: coerce to 2-D by hand.
        rows = int(np.prod(X3.shape[: axis % X3.ndim]))
        flat = X3.reshape(rows, -1)
        ref = reference(op_type, [flat], 13, axis=1).reshape(X3.shape)
    else:
        ref = reference(op_type, [X3], version, axis=axis)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("version", "target"), [(11, 13), (13, 11), (11, 11), (None, 18)])
def test_softmax_family_exports_across_the_opset_13_change(op_type, version, target):
    op = getattr(sm, op_type)(version=version, axis=1)
    expected = op(tensor(X3)).numpy()
    np.testing.assert_allclose(run_exported(op, [X3], target), expected, rtol=1e-5, atol=1e-6)


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
        (act.Celu, {"alpha": 1.5}, 11),
        (act.ThresholdedRelu, {"alpha": 0.2}, 9),
    ],
)
def test_late_activations_decompose_for_old_opsets(cls, attrs, opset):
    op = cls(**attrs)
    expected = op(tensor(X)).numpy()
    np.testing.assert_allclose(run_exported(op, [X], opset), expected, rtol=1e-5, atol=1e-6)


def test_legacy_consumed_inputs_is_not_exported():
    op = act.Relu(version=1, consumed_inputs=[0])
    op(tensor(X))
    g = GraphBuilder(14)
    op.export(g, ["x"], ["y"])
    assert [a.name for a in g.nodes[0].attribute] == []


def test_shrink_cannot_be_written_before_it_existed():
    op = act.Shrink()
    op(tensor(X))
    with pytest.raises(ExportError, match="Shrink"):
        op.export(GraphBuilder(8), ["x"], ["y"])


def test_bad_inputs():
    with pytest.raises(BadInputError, match="Sigmoid: input X must be a floating-point"):
        act.sigmoid(tensor(np.array([1, 2])))
    with pytest.raises(BadInputError, match="PRelu: input slope must broadcast"):
        act.prelu(tensor(X), tensor(np.ones(3, dtype=np.float32)))
    with pytest.raises(BadInputError, match="Softmax: attribute axis"):
        sm.softmax(tensor(X), axis=2)
    with pytest.raises(BadInputError, match="Relu: input X must be a signed"):
        act.relu(tensor(np.array([1], dtype=np.uint8)))


def test_float16_softmax_rounds_like_the_onnx_reference():
    x = (RNG.standard_normal((4, 7)) * 3).astype(np.float16)
    got = sm.softmax(tensor(x), axis=1).numpy()
    np.testing.assert_array_equal(got, reference("Softmax", [x], 13, axis=1))


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
