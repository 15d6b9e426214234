"""sonnx.tensor.creation: making tensors from NumPy, torch, constants and random numbers, and
reading their values back, as each function's docstring promises (dtype kept, zero-copy where
documented, typed errors on bad input)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from sonnx import dtypes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.tensor import (
    StringTensor,
    Tensor,
    from_numpy,
    from_torch,
    ones,
    random,
    to_host,
    to_numpy,
    zeros,
)

CPU = Device("cpu")


# ---- from_numpy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("np_dtype", "torch_dtype"),
    [
        (np.float32, torch.float32),
        (np.float16, torch.float16),
        (np.float64, torch.float64),
        (np.int8, torch.int8),
        (np.int32, torch.int32),
        (np.int64, torch.int64),
        (np.uint8, torch.uint8),
        (np.bool_, torch.bool),
    ],
)
def test_from_numpy_keeps_dtype_shape_and_values(np_dtype, torch_dtype) -> None:
    array = (np.arange(6).reshape(2, 3) % 2).astype(np_dtype)
    t = from_numpy(array, CPU)
    assert t.dtype == torch_dtype
    assert t.shape == (2, 3)
    assert t.device.torch_device == torch.device("cpu")
    assert not t.requires_grad and t.creator is None
    np.testing.assert_array_equal(to_numpy(t), array)


def test_from_numpy_on_the_cpu_shares_memory_with_the_array() -> None:
    array = np.zeros((2, 2), np.float32)
    t = from_numpy(array)
    array[0, 1] = 7.0  # seen through the tensor: no copy was made
    assert t.data[0, 1].item() == 7.0


def test_from_numpy_keeps_bfloat16_from_ml_dtypes() -> None:
    array = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    t = from_numpy(array)
    assert t.dtype == torch.bfloat16
    back = to_numpy(t)
    assert back.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back.astype(np.float32), [1.5, -2.0])


@pytest.mark.parametrize("not_an_array", [[1.0, 2.0], torch.ones(2), 3.0])
def test_from_numpy_refuses_what_is_not_a_numpy_array(not_an_array) -> None:
    received = type(not_an_array).__name__
    with pytest.raises(BadInputError, match=rf"NumPy array, received {received}"):
        from_numpy(not_an_array)


# ---- from_torch --------------------------------------------------------------------------------


def test_from_torch_wraps_without_copying() -> None:
    source = torch.arange(4, dtype=torch.int32)
    t = from_torch(source)
    assert t.data is source
    assert t.dtype == torch.int32 and t.shape == (4,)
    assert t.device.torch_device == source.device
    assert not t.requires_grad


def test_from_torch_sets_requires_grad() -> None:
    assert from_torch(torch.ones(2), requires_grad=True).requires_grad


def test_from_torch_refuses_what_is_not_a_torch_tensor() -> None:
    with pytest.raises(BadInputError, match="torch tensor, received ndarray"):
        from_torch(np.ones(2))  # type: ignore[arg-type]


# ---- to_numpy ----------------------------------------------------------------------------------


def test_to_numpy_of_a_cpu_tensor_shares_its_memory() -> None:
    t = from_torch(torch.zeros(3))
    array = to_numpy(t)
    t.data[1] = 5.0
    assert array[1] == 5.0
    assert array.dtype == np.float32


def test_to_numpy_detaches_a_tensor_that_tracks_gradients() -> None:
    t = Tensor(data=np.ones(2, np.float32), requires_grad=True, stores_grad=True)
    assert t.data.requires_grad
    np.testing.assert_array_equal(to_numpy(t), [1.0, 1.0])


def test_to_numpy_of_strings_is_an_object_array_of_str() -> None:
    array = to_numpy(Tensor(data=np.array([b"ab", b"c"])))
    assert array.dtype == object
    assert array.tolist() == ["ab", "c"]


# ---- to_host -----------------------------------------------------------------------------------


def test_to_host_is_a_named_copy_outside_the_graph() -> None:
    source = Tensor(data=np.ones((2, 2), np.float32), stores_grad=True, name="w")
    host = to_host(source)
    assert host is not source
    assert host.name == "w" and host.creator is None
    assert not host.requires_grad
    assert host.device.torch_device == torch.device("cpu")
    host.data.fill_(3.0)  # a copy: the source keeps its values
    np.testing.assert_array_equal(to_numpy(source), np.ones((2, 2), np.float32))
    assert source.requires_grad  # left as it was


def test_to_host_copies_strings() -> None:
    source = Tensor(data=np.array(["a", "b"]), name="s")
    host = to_host(source)
    assert isinstance(host, StringTensor) and host.name == "s"
    host.data.array[0] = "z"
    assert to_numpy(source).tolist() == ["a", "b"]


# ---- zeros, ones, random -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, "float16", np.int8, torch.bool])
def test_zeros_and_ones_take_shape_dtype_and_device(dtype) -> None:
    expected = dtypes.as_torch_dtype(dtype)
    for make, value in ((zeros, 0), (ones, 1)):
        t = make((2, 3), CPU, dtype)
        assert t.shape == (2, 3) and t.dtype == expected
        assert t.device.torch_device == torch.device("cpu")
        assert not t.requires_grad
        assert (t.data == value).all()


def test_zeros_default_is_float32_and_an_int_is_a_1d_shape() -> None:
    t = zeros(4)  # type: ignore[arg-type]
    assert t.shape == (4,) and t.dtype == torch.float32
    assert zeros(()).shape == ()
    assert ones((0, 2)).is_empty()


def test_zeros_of_strings_are_empty_strings_and_ones_of_strings_are_refused() -> None:
    t = zeros((2,), dtype="string")
    assert isinstance(t, StringTensor)
    assert to_numpy(t).tolist() == ["", ""]
    with pytest.raises(BadInputError, match="ones: strings have no one"):
        ones((2,), dtype="string")


@pytest.mark.parametrize("make", [zeros, ones, random])
@pytest.mark.parametrize(
    ("shape", "message"),
    [((2, -1), "non-negative dimensions"), ((2, "a"), "sequence of integers")],
)
def test_bad_shape_is_a_typed_error(make, shape, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        make(shape)


@pytest.mark.parametrize("make", [zeros, ones])
def test_unknown_dtype_is_a_typed_error(make) -> None:
    with pytest.raises(BadInputError, match="not a data type: 'nope'"):
        make((2,), None, "nope")


def test_random_is_float32_uniform_in_zero_one() -> None:
    torch.manual_seed(0)
    t = random((1000,), CPU)
    assert t.shape == (1000,) and t.dtype == torch.float32
    assert not t.requires_grad
    values = to_numpy(t)
    assert values.min() >= 0.0 and values.max() < 1.0
    assert 0.4 < values.mean() < 0.6  # spread over the interval, not a constant
    assert len(np.unique(values)) > 900
