"""The gated activations (HardSwish, Gelu, Mish, Swish, SwiGLU): forward vs onnx.reference,
gradients, errors, and their decompositions for opsets that predate them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx.errors import BadInputError
from sonnx.operators.activation import gated
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.activation.helpers import reference, run_exported, tensor

RNG = np.random.default_rng(0)

X = RNG.standard_normal((3, 4)).astype(np.float32) * 3

# (op class, attrs, onnx opset for the reference)
UNARY = [
    (gated.HardSwish, {}, 22),
    (gated.Gelu, {}, 20),
    (gated.Gelu, {"approximate": "tanh"}, 20),
    (gated.Mish, {}, 22),
    (gated.Swish, {"alpha": 1.5}, 24),
]


@pytest.mark.parametrize(("cls", "attrs", "opset"), UNARY)
def test_unary_forward_matches_reference(cls, attrs, opset):
    got = cls(**attrs)(tensor(X)).numpy()
    ref = reference(cls.op_type, [X], opset, **attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("cls", "attrs", "opset"), UNARY)
def test_unary_gradients(cls, attrs, opset):
    # Keep points away from kinks (0, thresholds) so central differences are smooth.
    x = np.array([[-2.3, -0.7, 0.35, 1.8], [2.9, -1.6, 0.8, -3.1]])
    check_grad(lambda t: cls(**attrs)(t), [x])


def test_swiglu_forward_and_gradients():
    a, b = X, RNG.standard_normal(X.shape).astype(np.float32)
    got = gated.swiglu(tensor(a), tensor(b), alpha=1.7).numpy()
    np.testing.assert_allclose(got, reference("SwiGLU", [a, b], 28, alpha=1.7), rtol=1e-5)
    check_grad(lambda p, q: gated.swiglu(p, q, 0.8), [a.astype(np.float64), b.astype(np.float64)])


@pytest.mark.parametrize(
    ("cls", "attrs", "opset"),
    [
        (gated.Gelu, {}, 13),
        (gated.Gelu, {"approximate": "tanh"}, 13),
        (gated.Mish, {}, 13),
        (gated.HardSwish, {}, 13),
        (gated.Swish, {"alpha": 2.0}, 13),
    ],
)
def test_late_activations_decompose_for_old_opsets(cls, attrs, opset):
    op = cls(**attrs)
    expected = op(tensor(X)).numpy()
    np.testing.assert_allclose(run_exported(op, [X], opset), expected, rtol=1e-5, atol=1e-6)


def test_swiglu_decomposes_for_old_opsets():
    b = RNG.standard_normal(X.shape).astype(np.float32)
    op = gated.SwiGLU(alpha=0.5)
    expected = op(tensor(X), tensor(b)).numpy()
    np.testing.assert_allclose(run_exported(op, [X, b], 18), expected, rtol=1e-5, atol=1e-6)


def test_bad_inputs():
    with pytest.raises(BadInputError, match="SwiGLU: inputs A and B"):
        gated.swiglu(tensor(X), tensor(X[:2]))
    with pytest.raises(BadInputError, match="Gelu: attribute approximate"):
        gated.gelu(tensor(X), approximate="erf")


def test_half_precision_runs():
    x = torch.linspace(-3, 3, 7, dtype=torch.bfloat16)
    y = gated.gelu(Tensor(data=x, requires_grad=False))
    assert y.dtype == torch.bfloat16
