"""CUDA-graph capture (sonnx.runtime.cuda_graphs) where it can be checked without a GPU: what
capture refuses, how a captured run checks its feeds, and the held inputs it reads and writes
in place. Capture and replay themselves are in tests/test_cuda.py and, for a decode step,
tests/generation/test_decode_steps.py (marked cuda)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.runtime.cuda_graphs import CapturedRun, capture_cuda_graph
from sonnx.tensor import Tensor


def _relu_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_capture_needs_a_cuda_device() -> None:
    rep = sonnx.prepare(_relu_model(), use_graph=True)
    feeds = {"x": Tensor(data=np.ones((2, 3), np.float32), requires_grad=False)}
    with pytest.raises(BadInputError, match=r"CUDA graphs need a CUDA device.*cpu"):
        capture_cuda_graph(rep, feeds)


class _Replays:
    """Stands in for a torch.cuda.CUDAGraph: a replay doubles the input buffer into the
    output buffer, as a captured ``y = 2 * x`` would."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def replay(self) -> None:
        torch.mul(self.x, 2, out=self.y)


def _captured() -> CapturedRun:
    x, y = torch.zeros(2, 3), torch.zeros(2, 3)
    fixed = {"sr": torch.tensor(16000)}
    return CapturedRun(_Replays(x, y), {"x": x}, fixed, [y], keep=None)


def test_a_captured_run_copies_its_feeds_in_and_returns_the_graph_outputs() -> None:
    run = _captured()
    for value in (1.0, 3.0):
        (out,) = run.run({"x": torch.full((2, 3), value)})
        np.testing.assert_array_equal(out.data.numpy(), np.full((2, 3), 2 * value))
    assert run.replays == 2


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"x": torch.zeros(3, 2)}, r"input 'x' must be a tensor of shape \(2, 3\) .* \(3, 2\)"),
        ({"x": torch.zeros(2, 3, dtype=torch.float64)}, r"dtype torch.float32.*received .*float64"),
        ({"sr": torch.tensor(8000)}, r"input 'sr' was baked into the graph at capture \(16000\)"),
        ({"z": torch.zeros(2, 3)}, r"no input 'z'; the inputs are \['x'\]"),
        ({}, r"inputs \['x'\] are not fed"),
    ],
)
def test_a_captured_run_rejects_feeds_unlike_the_captured_ones(feeds, message) -> None:
    run = _captured()
    with pytest.raises(BadInputError, match=message):
        run.run(feeds)
    assert run.replays == 0


class _Accumulates:
    """Stands in for a captured graph that writes an input in place (as a decode step writes
    its KV cache): a replay adds ``x`` into ``total`` and copies the sum out."""

    def __init__(self, x: torch.Tensor, total: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.total, self.y = x, total, y

    def replay(self) -> None:
        self.total.add_(self.x)
        self.y.copy_(self.total)


def test_a_held_input_is_the_callers_buffer_and_is_not_fed() -> None:
    x, total, y = torch.zeros(2), torch.zeros(2), torch.zeros(2)
    inputs = {"x": x, "total": total}
    run = CapturedRun(_Accumulates(x, total, y), inputs, {}, [y], None, held=frozenset({"total"}))
    for value in (1.0, 2.0):
        (out,) = run.run({"x": torch.full((2,), value)})
    assert total.tolist() == [3.0, 3.0] and out.data.tolist() == [3.0, 3.0]
    with pytest.raises(BadInputError, match=r"input 'total' is held: .* change that tensor"):
        run.run({"x": torch.ones(2), "total": torch.zeros(2)})
    assert run.replays == 2


@pytest.mark.parametrize(
    ("held", "x", "message"),
    [
        (("h",), torch.ones(2, 3), r"held input 'h' is not among the feeds \['x'\]"),
        (("x",), torch.ones(3, 2).t(), r"held input 'x' must be a contiguous tensor.*\(1, 2\)"),
    ],
)
def test_capture_checks_its_held_inputs_before_anything_else(held, x, message) -> None:
    rep = sonnx.prepare(_relu_model(), use_graph=True)
    with pytest.raises(BadInputError, match=message):
        capture_cuda_graph(rep, {"x": Tensor(data=x, requires_grad=False)}, held=held)
