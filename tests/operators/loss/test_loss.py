"""Losses: ONNX NLL / SoftmaxCrossEntropy against torch, SINGA losses, gradients, export."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from sonnx.errors import BadInputError, ExportError
from sonnx.operators.loss import (
    BinaryCrossEntropy,
    CrossEntropy,
    MeanSquareError,
    NegativeLogLikelihoodLoss,
    SoftmaxCrossEntropy,
    SoftmaxCrossEntropyLoss,
    binary_cross_entropy,
    cross_entropy,
    mse_loss,
    nll_loss,
    softmax_cross_entropy,
    softmax_cross_entropy_loss,
)
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

rng = np.random.default_rng(0)


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def export_model(op, inputs: list[np.ndarray], opset: int) -> onnx.ModelProto:
    """A checked one-op model: ``op`` (already run) exported at ``opset``."""
    g = GraphBuilder(opset)
    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(op.num_outputs)]
    op.export(g, names, outputs)
    graph = helper.make_graph(
        g.nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in outputs],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def run_exported(op, inputs: list[np.ndarray], opset: int) -> list[np.ndarray]:
    """Export one recorded op at ``opset`` and run it with onnx's reference evaluator."""
    model = export_model(op, inputs, opset)
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))


# ---- ONNX NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss -----------------------------------
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ignore_index", [None, 1, -1])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_matches_torch(reduction, ignore_index, weighted):
    x = rng.standard_normal((3, 4, 2, 2)).astype(np.float32)
    target = rng.integers(0, 4, (3, 2, 2))
    if ignore_index is not None:
        target[0, 0, 0] = ignore_index
    weight = rng.uniform(0.5, 2, 4).astype(np.float32) if weighted else None
    y = nll_loss(t(x), t(target), None if weight is None else t(weight), reduction, ignore_index)
    ref = torch.nn.functional.nll_loss(
        torch.from_numpy(x),
        torch.from_numpy(target),
        weight=None if weight is None else torch.from_numpy(weight),
        reduction=reduction,
        ignore_index=-100 if ignore_index is None else ignore_index,
    )
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_loss_log_prob_output_and_gradients():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    labels = np.array([0, 4, 2])
    op = SoftmaxCrossEntropyLoss(reduction="sum")
    op.requested_outputs = 2
    loss, log_prob = op(t(x), t(labels))
    ref = torch.nn.functional.cross_entropy(
        torch.from_numpy(x), torch.from_numpy(labels), reduction="sum"
    )
    np.testing.assert_allclose(loss.numpy(), ref.numpy(), rtol=1e-5)
    np.testing.assert_allclose(
        log_prob.numpy(), torch.log_softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5
    )
    weights = rng.uniform(0.5, 2, 4)
    check_grad(
        lambda a: softmax_cross_entropy_loss(a, t(np.array([[1, 3], [0, 2]])), t(weights)),
        [rng.standard_normal((2, 4, 2))],
    )
    check_grad(
        lambda a: nll_loss(a, t(np.array([1, 3])), reduction="none"),
        [rng.standard_normal((2, 4))],
    )


def test_onnx_loss_bad_inputs():
    x = t(rng.standard_normal((3, 4)).astype(np.float32))
    with pytest.raises(BadInputError, match=r"target must have shape \(3,\)"):
        nll_loss(x, t(np.zeros((3, 1), np.int64)))
    with pytest.raises(BadInputError, match=r"class indices in \[0, 4\)"):
        nll_loss(x, t(np.array([0, 1, 7])))
    with pytest.raises(BadInputError, match="integer class indices"):
        softmax_cross_entropy_loss(x, t(np.zeros(3, np.float32)))
    with pytest.raises(BadInputError, match="reduction must be one of"):
        nll_loss(x, t(np.zeros(3, np.int64)), reduction="avg")


def test_onnx_loss_export_needs_opset_12():
    op = NegativeLogLikelihoodLoss(reduction="mean")
    op(t(rng.standard_normal((2, 3))), t(np.array([0, 1])))
    with pytest.raises(ExportError, match="opset 11"):
        op.export(GraphBuilder(11), ["x", "t"], ["y"])


# ---- SINGA losses -------------------------------------------------------------------------------
def test_softmax_cross_entropy_one_hot_and_labels_agree():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([2, 0, 1, 1])
    one_hot = np.eye(3, dtype=np.float32)[labels]
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(labels))
    for target in (one_hot, labels, labels.reshape(4, 1)):
        loss = softmax_cross_entropy(t(x), t(target))
        assert loss.shape == (1,)
        np.testing.assert_allclose(loss.numpy()[0], ref.item(), rtol=1e-5)


def test_cross_entropy_and_binary_cross_entropy_match_singa_formulas():
    y = rng.uniform(0.05, 0.95, (4, 3))
    y /= y.sum(1, keepdims=True)
    target = np.eye(3)[[0, 2, 1, 1]]
    np.testing.assert_allclose(
        cross_entropy(t(y), t(target)).numpy(), [-(target * np.log(y)).sum() / 4], rtol=1e-10
    )
    np.testing.assert_allclose(
        cross_entropy(t(y), t(np.array([0, 2, 1, 1]))).numpy(),
        [-(target * np.log(y)).sum() / 4],
        rtol=1e-10,
    )
    p = rng.uniform(0.05, 0.95, (4, 2))
    bits = rng.integers(0, 2, (4, 2)).astype(np.float64)
    expected = -(bits * np.log(p) + (1 - bits) * np.log(1 - p)).sum() / 4
    np.testing.assert_allclose(binary_cross_entropy(t(p), t(bits)).numpy(), [expected])
    saturated = binary_cross_entropy(t(np.array([[0.0, 1.0]])), t(np.array([[1.0, 0.0]])))
    np.testing.assert_allclose(saturated.numpy(), [200.0])


def test_mse_loss_is_singa_half_sum_over_batch():
    x, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    loss = mse_loss(t(x), t(target))
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss.numpy(), [((x - target) ** 2).sum() / (2 * 4)])


def test_singa_loss_gradients():
    logits = rng.standard_normal((3, 4))
    soft = rng.uniform(0.1, 1, (3, 4))
    soft /= soft.sum(1, keepdims=True)
    check_grad(lambda a: softmax_cross_entropy(a, t(soft)), [logits])
    check_grad(lambda a: softmax_cross_entropy(a, t(np.array([3, 0, 1]))), [logits])
    check_grad(lambda a: cross_entropy(a, t(soft)), [rng.uniform(0.2, 0.9, (3, 4))])
    check_grad(lambda a: mse_loss(a, t(soft)), [logits])
    bits = rng.uniform(0, 1, (3, 2))
    check_grad(lambda a: binary_cross_entropy(a, t(bits)), [rng.uniform(0.1, 0.9, (3, 2))])


def test_singa_loss_bad_inputs():
    x = t(rng.standard_normal((4, 3)))
    with pytest.raises(BadInputError, match="must be 2-D"):
        softmax_cross_entropy(t(rng.standard_normal((4, 3, 2))), t(np.zeros(4, np.int64)))
    with pytest.raises(BadInputError, match="one-hot/probabilities"):
        softmax_cross_entropy(x, t(np.zeros((4, 2))))
    with pytest.raises(BadInputError, match="must be integer class indices; received float64"):
        cross_entropy(x, t(np.array([0.5, 1, 2, 0])))
    with pytest.raises(BadInputError, match=r"received float32: cast them .* shape \(4, 3\)"):
        softmax_cross_entropy(x, t(np.array([0, 1, 2, 0], np.float32)))  # whole numbers too
    with pytest.raises(BadInputError, match="shape of x"):
        mse_loss(x, t(np.zeros((4, 2))))
    with pytest.raises(BadInputError, match="floating-point"):
        binary_cross_entropy(t(np.zeros((2, 2), np.int64)), t(np.zeros((2, 2))))


@pytest.mark.parametrize("opset", [9, 11, 13, 18])
@pytest.mark.parametrize(
    "op_class,x,target",
    [
        (SoftmaxCrossEntropy, rng.standard_normal((4, 3)), np.eye(3)[[0, 2, 1, 1]]),
        (SoftmaxCrossEntropy, rng.standard_normal((4, 3)), np.array([0, 2, 1, 1])),
        (CrossEntropy, rng.uniform(0.1, 1, (4, 3)), np.eye(3)[[0, 2, 1, 1]]),
        (CrossEntropy, rng.uniform(0.1, 1, (4, 3)), np.array([0, 2, 1, 1], np.int32)),
        (MeanSquareError, rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 3, 2))),
        (MeanSquareError, rng.standard_normal(5), rng.standard_normal(5)),
        (BinaryCrossEntropy, rng.uniform(0, 1, (4, 2)), rng.uniform(0, 1, (4, 2))),
    ],
)
def test_singa_loss_export_decomposition_matches(opset, op_class, x, target):
    x = x.astype(np.float32)
    target = target.astype(np.float32) if target.dtype == np.float64 else target
    op = op_class()
    loss = op(t(x), t(target))
    (got,) = run_exported(op, [x, target], opset)
    assert got.shape == (1,)
    np.testing.assert_allclose(got, loss.numpy(), rtol=1e-5, atol=1e-6)
    model = export_model(op, [x, target], opset)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (from_ort,) = session.run(None, {"in0": x, "in1": target})
    np.testing.assert_allclose(from_ort, loss.numpy(), rtol=1e-5, atol=1e-6)


def test_singa_loss_export_below_opset_9_is_refused():
    op = MeanSquareError()
    op(t(np.ones((2, 2))), t(np.zeros((2, 2))))
    with pytest.raises(ExportError, match="opset 9 or later"):
        op.export(GraphBuilder(8), ["x", "t"], ["y"])
