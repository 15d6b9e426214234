"""StringArray and SymbolicInts answer the tensor protocol of sonnx.host_arrays alike."""

import numpy as np
import pytest
import torch

from sonnx.host_arrays import HostArray
from sonnx.strings import StringArray
from sonnx.symbolic_sizes import SymbolicInts


def _stand_ins() -> list[HostArray]:
    strings = StringArray(np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object))
    sizes = SymbolicInts(np.array([[1, 2, 3], [4, 5, 6]], dtype=object), torch.int64)
    return [strings, sizes]


@pytest.mark.parametrize("value", _stand_ins(), ids=["strings", "sizes"])
def test_stand_ins_answer_the_tensor_protocol_alike(value):
    assert isinstance(value, HostArray)
    assert value.shape == torch.Size([2, 3]) and value.size() == torch.Size([2, 3])
    assert value.size(1) == 3 and value.dim() == 2 and value.numel() == 6 and len(value) == 2
    assert value.device == torch.device("cpu")
    assert not value.requires_grad and value.grad is None and value.detach() is value
    assert not value.is_complex() and not value.is_floating_point()
    reshaped = value.reshape(3, 2)
    assert type(reshaped) is type(value) and reshaped.shape == torch.Size([3, 2])
    assert value.reshape((6,)).tolist() == np.asarray(value.tolist()).reshape(-1).tolist()


def test_symbolic_ints_keep_their_dtype_through_reshape():
    sizes = SymbolicInts(np.array([1.5, 2.5], dtype=object), torch.float32)
    assert sizes.reshape(2, 1).dtype == torch.float32 and sizes.is_floating_point()
