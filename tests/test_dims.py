"""``sonnx.dims.Dim``: sizes from ``Tensor.shape`` are ints that remember their source."""

from __future__ import annotations

import json
import pickle

import numpy as np
import torch

from sonnx.dims import Dim, has_dims
from sonnx.tensor import Tensor


def test_dims_behave_as_ints_everywhere() -> None:
    x = Tensor(data=np.zeros((2, 3), np.float32))
    assert x.shape == (2, 3) and all(isinstance(d, Dim) for d in x.shape)
    assert pickle.loads(pickle.dumps(x.shape)) == (2, 3)
    assert type(pickle.loads(pickle.dumps(x.shape[0]))) is int
    assert json.dumps(x.shape) == "[2, 3]"
    assert torch.zeros(x.shape).shape == (2, 3) and np.zeros(x.shape).shape == (2, 3)
    assert {x.shape[0]: "a"}[2] == "a" and repr(x.shape[1]) == "3"


def test_arithmetic_records_the_computation_and_floats_do_not() -> None:
    x = Tensor(data=np.zeros((2, 3, 5), np.float32))
    n = x.shape[1] * x.shape[2] // 3 + 1 - x.shape[0]
    assert n == 4 and isinstance(n, Dim)
    assert sorted(axis for _, axis in n.leaves()) == [0, 1, 2]
    assert all(t is x for t, _ in n.leaves())
    assert 10 - x.shape[0] == 8 and isinstance(10 - x.shape[0], Dim)
    half = x.shape[1] * 0.5
    assert half == 1.5 and not isinstance(half, Dim)
    assert has_dims([x.shape[0], -1]) and not has_dims([2, -1]) and not has_dims(x.shape[0])


def test_a_dim_of_a_dropped_tensor_is_a_plain_number() -> None:
    size = Tensor(data=np.zeros((4, 2), np.float32)).shape[0]
    assert size == 4 and not has_dims([size, -1])
