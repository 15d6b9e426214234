"""Shared checks for op tests: forward against a reference, gradient against central differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

import sonnx.autograd as autograd
from sonnx.tensor import Tensor


def param(array: np.ndarray | torch.Tensor) -> Tensor:
    """A trainable float64 tensor (gradients are checked in float64 for tight tolerances)."""
    data = torch.as_tensor(np.asarray(array)).to(torch.float64)
    return Tensor(data=data, requires_grad=True, stores_grad=True)


def check_grad(
    fn: Callable[..., Tensor],
    arrays: Sequence[np.ndarray],
    wrt: Sequence[int] | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-4,
    atol: float = 1e-6,
) -> None:
    """Compare sonnx's gradients of ``sum(fn(*inputs) * w)`` with central differences.

    ``wrt`` selects which inputs are differentiated (all by default); the others are passed as
    constants. ``w`` is a fixed random weighting so that every output element matters.
    """
    wrt = list(range(len(arrays))) if wrt is None else list(wrt)
    previous = autograd.training
    autograd.training = True
    try:
        inputs = [
            param(a) if i in wrt else Tensor(data=np.asarray(a), requires_grad=False)
            for i, a in enumerate(arrays)
        ]
        out = fn(*inputs)
        w = torch.from_numpy(np.random.default_rng(0).standard_normal(out.shape))
        grads = dict((id(p), g) for p, g in autograd.backward(out, Tensor(data=w)))
        for i in wrt:
            x = np.asarray(arrays[i], dtype=np.float64)
            numeric = np.zeros_like(x)
            flat = numeric.reshape(-1)
            for k in range(x.size):
                up, down = x.copy().reshape(-1), x.copy().reshape(-1)
                up[k] += eps
                down[k] -= eps
                f_up = _weighted(fn, arrays, i, up.reshape(x.shape), w)
                f_down = _weighted(fn, arrays, i, down.reshape(x.shape), w)
                flat[k] = (f_up - f_down) / (2 * eps)
            analytic = grads[id(inputs[i])].data.numpy()
            np.testing.assert_allclose(
                analytic, numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}"
            )
    finally:
        autograd.training = previous


def _weighted(fn, arrays, i, replaced, w) -> float:
    args = [
        Tensor(
            data=np.asarray(replaced if j == i else a, dtype=np.float64 if j == i else None),
            requires_grad=False,
        )
        for j, a in enumerate(arrays)
    ]
    with torch.no_grad():
        return float((fn(*args).data * w).sum())
