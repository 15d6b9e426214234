"""The trigonometric and hyperbolic operators (Sin, Cos, Tan, their inverses, Sinh, Cosh and
theirs): forward against NumPy, gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx import autograd
from tests.helpers import check_grad
from tests.operators.elementwise.helpers import run

RNG = np.random.default_rng(0)

UNARY = [
    # (function, numpy reference, low, high) — the range keeps inputs inside the domain
    (autograd.sin, np.sin, -3, 3),
    (autograd.cos, np.cos, -3, 3),
    (autograd.tan, np.tan, -1, 1),
    (autograd.asin, np.arcsin, -0.9, 0.9),
    (autograd.acos, np.arccos, -0.9, 0.9),
    (autograd.atan, np.arctan, -3, 3),
    (autograd.sinh, np.sinh, -2, 2),
    (autograd.cosh, np.cosh, -2, 2),
    (autograd.asinh, np.arcsinh, -2, 2),
    (autograd.acosh, np.arccosh, 1.2, 3),
    (autograd.atanh, np.arctanh, -0.9, 0.9),
]


@pytest.mark.parametrize(
    ("fn", "ref", "low", "high"), UNARY, ids=lambda v: getattr(v, "__name__", "")
)
def test_unary_forward_and_grad(fn, ref, low, high):
    x = RNG.uniform(low, high, (3, 4))
    np.testing.assert_allclose(run(fn, x.astype(np.float32)), ref(x), rtol=1e-5, atol=1e-6)
    check_grad(fn, [x])
