"""The host-read counter (sonnx.testing.host_reads) on the CPU standing in for a GPU."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.run_state import CPU_AS_DEVICE
from sonnx.tensor import Tensor
from sonnx.testing.host_reads import count_host_reads, device_values


def test_reads_of_values_computed_from_device_values_are_counted_in_order() -> None:
    x = torch.tensor([3.0, -1.0, 2.0])
    with count_host_reads([x]) as reads:
        y = x * 2
        bool((y > 0).any())
        y.sum().item()
        np.asarray(y)
        y[y > 0]
        y.nonzero()
        y.tolist()
    assert reads.functions == ["__bool__", "item", "__array__", "__getitem__", "nonzero", "tolist"]
    assert reads.count == 6


def test_shape_arithmetic_and_other_host_values_read_freely() -> None:
    x = torch.zeros(2, 5)
    with count_host_reads([x]) as reads:
        shape = torch.tensor(x.shape)  # a Shape node: sizes, not values
        assert int(shape[1]) == 5 and shape.tolist() == [2, 5]
        assert float(torch.ones(3).sum()) == 3.0
        assert x.to(torch.float64).dtype == torch.float64  # no host read
    assert reads.count == 0


def test_only_the_counting_thread_is_counted_and_nothing_stays_installed() -> None:
    x = torch.ones(3)
    with count_host_reads([x]) as reads:
        other = threading.Thread(target=lambda: x.sum().item())
        other.start()
        other.join()
        assert CPU_AS_DEVICE.get()
    x.sum().item()
    assert reads.count == 0
    assert not CPU_AS_DEVICE.get()


def _gather_model() -> onnx.ModelProto:
    """Embedding-style Gather of a weight table by fed indices."""
    table = helper.make_tensor("table", TensorProto.FLOAT, [4, 2], np.arange(8.0).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "gather",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [table],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_run_reads_its_deferred_index_check_once_and_still_rejects_bad_indices() -> None:
    """Counting with stand-ins defers the CPU's index checks as a GPU's are: one read at the
    run's end, and an index out of range is still a BadInputError naming the node's input."""
    rep = sonnx.prepare(_gather_model())
    feeds = {"ids": Tensor(data=np.array([0, 3, -1]), requires_grad=False)}
    with count_host_reads(device_values(rep, feeds)) as reads:
        out = rep.run(feeds)[0]
    assert reads.functions == ["__bool__"]
    np.testing.assert_array_equal(out.data.numpy(), [[0, 1], [6, 7], [6, 7]])
    bad = {"ids": Tensor(data=np.array([0, 4, 1]), requires_grad=False)}
    with (
        count_host_reads(device_values(rep, bad)),
        pytest.raises(BadInputError, match=r"Gather: input indices .* received 4"),
    ):
        rep.run(bad)
