"""sonnx.tensor.kinds: string tensors, symbolic shape values, computed values, placeholders and
records — what each constructor makes and which of Tensor's arguments it ignores, as its
docstring says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sonnx import dtypes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.operators.activation.functions import Relu
from sonnx.strings import StringArray
from sonnx.symbolic_sizes import symbolic
from sonnx.tensor import (
    PlaceHolder,
    RecordedTensor,
    StringTensor,
    SymbolicTensor,
    Tensor,
    computed_tensor,
    string_tensor,
    symbolic_tensor,
    to_numpy,
)

# ---- StringTensor ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        ["ab", "c"],
        np.array(["ab", "c"]),
        np.array([b"ab", b"c"]),
        np.array(["ab", "c"], dtype=object),
        StringArray(np.array(["ab", "c"], dtype=object)),
    ],
    ids=["list", "unicode", "bytes", "object", "StringArray"],
)
def test_string_tensor_takes_every_spelling_of_strings(data) -> None:
    t = StringTensor(data=data, name="s")
    assert t.dtype is dtypes.STRING
    assert t.shape == (2,) and t.name == "s"
    assert t.device.torch_device == torch.device("cpu")
    assert to_numpy(t).tolist() == ["ab", "c"]  # bytes decoded as UTF-8


def test_string_tensor_from_another_string_tensor() -> None:
    source = StringTensor(data=[["a", "b"], ["c", "d"]])
    assert to_numpy(StringTensor(data=source)).tolist() == [["a", "b"], ["c", "d"]]


def test_string_tensor_without_data_holds_empty_strings_of_the_shape() -> None:
    t = StringTensor(shape=(2, 3))
    assert t.shape == (2, 3)
    assert (to_numpy(t) == "").all()


def test_string_tensor_ignores_device_dtype_and_gradient_flags() -> None:
    t = StringTensor(
        data=["a"], device=Device("meta"), dtype=torch.float32, requires_grad=True, stores_grad=True
    )
    assert t.dtype is dtypes.STRING
    assert t.device.torch_device == torch.device("cpu")
    assert not t.requires_grad and not t.stores_grad and not t.is_param


def test_tensor_with_strings_or_the_string_dtype_makes_a_string_tensor() -> None:
    assert isinstance(Tensor(data=np.array(["a", "b"])), StringTensor)
    empty = Tensor(shape=(3,), dtype="string")
    assert isinstance(empty, StringTensor) and to_numpy(empty).tolist() == ["", "", ""]
    source = Tensor(data=np.array(["x"]))
    assert isinstance(Tensor(data=source), StringTensor)


@pytest.mark.parametrize("data", [np.array([1, 2]), np.array([["a", 1]], dtype=object)])
def test_string_tensor_of_non_strings_is_a_typed_error(data) -> None:
    with pytest.raises(BadInputError, match="labels: expected strings, received"):
        StringTensor(data=data, name="labels")


def test_string_tensor_cannot_change_its_type_in_place() -> None:
    with pytest.raises(BadInputError, match="use Cast"):
        StringTensor(data=["1"]).to_type(torch.int64)


def test_string_tensor_clone_is_an_independent_copy_with_the_name() -> None:
    source = StringTensor(data=["a", "b"], name="s", creator=Relu())
    copy = source.clone()
    assert isinstance(copy, StringTensor)
    assert copy.name == "s" and copy.creator is None
    copy.data.array[0] = "z"
    assert to_numpy(source).tolist() == ["a", "b"]


def test_string_tensor_item() -> None:
    assert StringTensor(data=np.array("hello")).item() == "hello"
    with pytest.raises(ValueError):
        StringTensor(data=["a", "b"]).item()


# ---- string_tensor, symbolic_tensor, computed_tensor -------------------------------------------


def test_string_tensor_wraps_an_operator_output_with_its_creator() -> None:
    data = StringArray(np.array(["a", "b", "c"], dtype=object))
    op = Relu()
    t = string_tensor(data, op, index=1)
    assert isinstance(t, StringTensor)
    assert t.data is data  # wrapped, not copied
    assert t.creator is op and t.output_index == 1
    assert t.name is None and not t.requires_grad and not t.stores_grad
    assert t.shape == (3,) and t.dtype is dtypes.STRING


def test_symbolic_tensor_wraps_a_shape_value_with_its_creator() -> None:
    data = symbolic([2, 3, 4])
    op = Relu()
    t = symbolic_tensor(data, op, index=2)
    assert isinstance(t, SymbolicTensor)
    assert t.data is data
    assert t.creator is op and t.output_index == 2
    assert t.name is None and not t.requires_grad and not t.stores_grad
    assert t.shape == (3,) and t.dtype == torch.int64
    assert symbolic_tensor(data).creator is None


@pytest.mark.parametrize("tracks_grad", [False, True])
def test_computed_tensor_wraps_without_creator_or_copy(tracks_grad: bool) -> None:
    data = torch.ones(2, 3, requires_grad=tracks_grad)
    t = computed_tensor(data, name="h")
    assert type(t) is Tensor
    assert t.data is data
    assert t.creator is None and t.output_index == 0 and t.name == "h"
    assert t.requires_grad is tracks_grad  # follows the torch tensor
    assert not t.stores_grad and not t.is_param


# ---- PlaceHolder -------------------------------------------------------------------------------


def test_placeholder_stands_for_an_input_of_the_shape() -> None:
    p = PlaceHolder((4, 3), name="x")
    assert isinstance(p, Tensor)
    assert p.shape == (4, 3) and p.dtype == torch.float32 and p.name == "x"
    assert not p.requires_grad and p.creator is None
    assert p.device.torch_device == torch.device("cpu")


def test_placeholder_takes_a_dtype_and_a_device() -> None:
    p = PlaceHolder((2,), Device("cpu"), dtype="int64")
    assert p.dtype == torch.int64 and p.device.torch_device == torch.device("cpu")


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        ((2, -3), torch.float32, "non-negative dimensions, received \\(2, -3\\)"),
        (("a",), torch.float32, "sequence of integers"),
        ((2,), "nope", "not a data type: 'nope'"),
    ],
)
def test_placeholder_bad_shape_or_dtype_is_a_typed_error(shape, dtype, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        PlaceHolder(shape, dtype=dtype)


# ---- RecordedTensor ----------------------------------------------------------------------------


def test_recorded_tensor_keeps_where_it_came_from_not_its_values() -> None:
    op = Relu()
    source = computed_tensor(torch.zeros(2, 0, dtype=torch.float16), name="h")
    source.creator, source.output_index = op, 1
    record = RecordedTensor(source)
    assert record.creator is op and record.output_index == 1 and record.name == "h"
    assert record.shape == (2, 0) and record.dtype == torch.float16
    assert record.device.torch_device == torch.device("cpu")
    assert record.ndim() == 2 and record.size() == 0 and record.is_empty()
    with pytest.raises(BadInputError, match=r"'h' \(output 1 of Relu, shape \(2, 0\), float16\)"):
        _ = record.data
