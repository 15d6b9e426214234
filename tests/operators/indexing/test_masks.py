"""OneHot, NonZero and Compress: forward against NumPy / onnx.reference, gradients against
central differences, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx.autograd as autograd
from sonnx.errors import BadInputError
from tests.helpers import check_grad
from tests.operators.indexing.helpers import reference, t

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_onehot_matches_reference(axis):
    idx = np.array([[1, -1, 9], [0, 12, -13]], dtype=np.int64)
    values = np.array([2.0, 5.0], dtype=np.float32)
    out = autograd.onehot(axis, t(idx), 10, values)
    (expected,) = reference("OneHot", [idx, np.array(10.0, np.float32), values], axis=axis)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.dtype == torch.float32


def test_nonzero_and_compress():
    x = np.array([[0, 2, 0], [3, 0, 4]], dtype=np.uint32)
    np.testing.assert_array_equal(autograd.nonzero(t(x)).numpy(), np.array(np.nonzero(x)))
    y = RNG.standard_normal((3, 4))
    for axis in (None, 0, -1):
        out = autograd.compress(t(y), [True, False, True], axis=axis)
        np.testing.assert_array_equal(out.numpy(), np.compress([1, 0, 1], y, axis=axis))
    check_grad(lambda a: autograd.compress(a, [False, True, True], axis=1), [y])


def test_bad_inputs_raise_bad_input_error():
    with pytest.raises(BadInputError, match="Compress"):
        autograd.compress(t(np.zeros(2)), [False, False, True])
