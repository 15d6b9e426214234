"""The trigonometric and hyperbolic operators (Sin, Cos, Tan, their inverses, Sinh, Cosh and
theirs): forward against NumPy, gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx
from sonnx import autograd
from sonnx.tensor import to_numpy
from tests.helpers import check_grad
from tests.operators.elementwise.helpers import run
from tests.operators.shape.helpers import one_node_model

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


def test_acosh_of_large_values_in_graph_mode() -> None:
    """inductor's acosh squared its input: graph mode gave inf past 1.8e19 where the answer is
    44 to 89 (verify=False: nothing but the compiled graph computes the result)."""
    x = np.array([1.0, 1.0001, 1.5, 3.0, 1e4, 1e8, 1e9, 2e19, 1e30, 3.4e38, np.inf], np.float32)
    model, feeds = one_node_model("Acosh", [x], 22)
    rep = sonnx.prepare(model, use_graph=True, verify=False)
    for _ in range(2):  # the first run and the compiled graph's
        (got,) = rep.run(feeds)
        np.testing.assert_allclose(to_numpy(got), np.arccosh(x), rtol=1e-6)
    assert rep.graph_runner.fallback is None
