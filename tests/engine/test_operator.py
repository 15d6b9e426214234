"""What an operator keeps of its inputs: enough to export and back-propagate, not activations.

A computed input larger than ``KEPT_VALUE_SIZE`` elements is kept as a RecordedTensor (creator,
shape, dtype, name), so the recorded graph does not hold activations alive after torch's
autograd has released them.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnxruntime as ort
import pytest
import torch

import sonnx
from sonnx import autograd
from sonnx.engine.operator import KEPT_VALUE_SIZE
from sonnx.errors import BadInputError
from sonnx.tensor import RecordedTensor, Tensor, to_numpy


@pytest.fixture
def inference():
    previous = autograd.training
    autograd.training = False
    yield
    autograd.training = previous


def test_a_dropped_activation_is_freed_and_the_graph_still_exports(inference) -> None:
    x = Tensor(data=np.random.default_rng(0).standard_normal((4, 300)).astype(np.float32))
    x.requires_grad = False
    hidden = autograd.relu(x)
    out = autograd.neg(hidden)
    freed = weakref.ref(hidden.data)
    del hidden
    gc.collect()
    assert freed() is None, "the Neg operator kept its input's values alive"

    record = out.creator.inputs[0]
    assert isinstance(record, RecordedTensor)
    assert record.shape == (4, 300) and record.dtype == torch.float32
    assert record.creator.op_type == "Relu" and record.ndim() == 2 and record.size() == 1200

    model = sonnx.to_onnx([x], [out])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {model.graph.input[0].name: to_numpy(x)})
    np.testing.assert_allclose(to_numpy(out), expected)


def test_reading_a_records_values_names_the_tensor(inference) -> None:
    x = Tensor(data=np.ones((10, 10), np.float32), requires_grad=False)
    hidden = autograd.relu(x)
    hidden.name = "hidden"
    out = autograd.neg(hidden)
    with pytest.raises(BadInputError, match=r"'hidden' \(output 0 of Relu, shape \(10, 10\)"):
        _ = out.creator.inputs[0].data


def test_small_computed_inputs_parameters_and_leaves_are_kept_whole(inference) -> None:
    x = Tensor(data=np.ones((2, 3), np.float32), requires_grad=False)
    w = Tensor(data=np.ones((3, 70), np.float32), stores_grad=True)
    small = autograd.relu(x)
    y = autograd.matmul(small, w)
    kept_small, kept_w = y.creator.inputs
    assert kept_small is small and kept_w is w
    assert small.size() <= KEPT_VALUE_SIZE < w.size()


def test_backward_through_records_reaches_every_parameter() -> None:
    previous = autograd.training
    autograd.training = True
    try:
        w = Tensor(data=np.full((50, 50), 0.1, np.float32), stores_grad=True, name="w")
        x = Tensor(data=np.ones((8, 50), np.float32), requires_grad=False)
        loss = autograd.reduce_sum(autograd.relu(autograd.matmul(autograd.tanh(x), w)))
        (param, grad), *rest = autograd.backward(loss)
        assert param is w and not rest
        reference = torch.tanh(torch.ones(8, 50)).sum(0, keepdim=True).T.expand(50, 50)
        torch.testing.assert_close(grad.data, reference)
    finally:
        autograd.training = previous


def test_host_ints_reads_a_scalar_shape_value() -> None:
    """A scalar (GroupQueryAttention's total_sequence_length computed from a shape) gives a
    one-element list, from a tensor and from a symbolic shape value alike."""
    from sonnx.engine.operator import host_ints
    from sonnx.symbolic_sizes import SymbolicInts

    assert host_ints(torch.tensor(7)) == [7]
    assert host_ints(SymbolicInts(np.array(7, dtype=object), torch.int64)) == [7]
