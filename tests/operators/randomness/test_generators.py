"""Random generators: seeded draws equal ONNX's reference, unseeded ones have the right shape,
type and distribution; errors; import and export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx.errors import BadInputError
from sonnx.operators.randomness.generators import (
    bernoulli,
    multinomial,
    random_normal,
    random_normal_like,
    random_uniform,
    random_uniform_like,
)
from sonnx.tensor import Tensor
from tests.onnx.export_check import ort_session


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def one_node(op: str, inputs: dict[str, np.ndarray], opset: int = 22, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference(op: str, inputs: dict[str, np.ndarray], **attrs) -> np.ndarray:
    return ReferenceEvaluator(one_node(op, inputs, **attrs)).run(None, inputs)[0]


def imported(op: str, inputs: dict[str, np.ndarray], **attrs) -> np.ndarray:
    return sonnx.prepare(one_node(op, inputs, **attrs)).run(inputs)[0].numpy()


X = np.random.default_rng(0).uniform(0, 1, (3, 4)).astype(np.float32)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("RandomUniform", {}, {"shape": [3, 4], "low": -2.0, "high": 3.0, "seed": 5.0}),
        ("RandomNormal", {}, {"shape": [2, 5], "mean": 1.0, "scale": 2.0, "seed": 1.0}),
        ("RandomNormal", {}, {"shape": [6], "dtype": TensorProto.DOUBLE, "seed": 2.0}),
        ("RandomUniformLike", {"x": X}, {"low": 1.0, "high": 2.0, "seed": 3.0}),
        ("RandomNormalLike", {"x": X}, {"dtype": TensorProto.DOUBLE, "seed": 4.0}),
        ("Bernoulli", {"x": X}, {"seed": 0.0}),
        ("Bernoulli", {"x": X}, {"seed": 7.0, "dtype": TensorProto.INT32}),
    ],
)
def test_seeded_draws_equal_the_reference(op, inputs, attrs):
    expected = reference(op, inputs, **attrs)
    got = imported(op, inputs, **attrs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_unseeded_uniform_and_normal_statistics():
    torch.manual_seed(0)
    u = random_uniform([20000], low=-1.0, high=3.0)
    assert u.dtype == torch.float32 and u.shape == (20000,)
    assert u.numpy().min() >= -1.0 and u.numpy().max() < 3.0
    assert abs(u.numpy().mean() - 1.0) < 0.05
    n = random_normal([20000], mean=2.0, scale=0.5, dtype=torch.float64)
    assert n.dtype == torch.float64
    assert abs(n.numpy().mean() - 2.0) < 0.02 and abs(n.numpy().std() - 0.5) < 0.02


def test_unseeded_draws_follow_torch_seed():
    torch.manual_seed(3)
    first = random_normal_like(t(X)).numpy()
    torch.manual_seed(3)
    again = random_normal_like(t(X)).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, random_normal_like(t(X)).numpy())


def test_like_ops_keep_the_input_type_unless_told():
    half = t(X.astype(np.float16))
    assert random_uniform_like(half).dtype == torch.float16
    assert random_uniform_like(half, dtype=torch.float64).dtype == torch.float64
    assert random_normal([2], dtype=torch.bfloat16).dtype == torch.bfloat16


def test_bernoulli_frequencies_and_types():
    torch.manual_seed(0)
    p = np.full(20000, 0.3, np.float32)
    draws = bernoulli(t(p)).numpy()
    assert draws.dtype == np.float32 and set(np.unique(draws)) <= {0.0, 1.0}
    assert abs(draws.mean() - 0.3) < 0.02
    assert bernoulli(t(p[:4]), dtype=torch.bool).dtype == torch.bool
    np.testing.assert_array_equal(bernoulli(t(np.array([0.0, 1.0]))).numpy(), [0.0, 1.0])


def test_multinomial_shapes_types_and_frequencies():
    logits = np.log(np.array([[0.2, 0.8, 0.0], [1.0, 0.0, 0.0]], np.float32) + 1e-30)
    draws = multinomial(t(logits), sample_size=5000)
    assert draws.dtype == torch.int32 and draws.shape == (2, 5000)
    values = draws.numpy()
    assert set(np.unique(values[1])) == {0}
    assert abs((values[0] == 1).mean() - 0.8) < 0.03 and not (values[0] == 2).any()
    assert multinomial(t(logits), dtype=torch.int64).dtype == torch.int64
    seeded = [multinomial(t(logits), 10, seed=4).numpy() for _ in range(2)]
    np.testing.assert_array_equal(*seeded)
    got = imported("Multinomial", {"x": logits}, sample_size=3, seed=1.0)
    assert got.shape == (2, 3) and got.dtype == np.int32


def test_bad_inputs():
    with pytest.raises(BadInputError, match="RandomUniform: attribute dtype must name a floating"):
        random_uniform([2], dtype=torch.int32)
    with pytest.raises(BadInputError, match="non-negative dims"):
        random_normal([-1, 2])
    with pytest.raises(BadInputError, match="probabilities must lie in"):
        bernoulli(t(np.array([0.5, 1.5], np.float32)))
    with pytest.raises(BadInputError, match="float probabilities"):
        bernoulli(t(np.array([0, 1])))
    with pytest.raises(BadInputError, match="2-D float tensor"):
        multinomial(t(np.zeros(3, np.float32)))
    with pytest.raises(BadInputError, match="int32 or int64"):
        multinomial(t(np.zeros((1, 3), np.float32)), dtype=torch.float32)
    with pytest.raises(BadInputError, match="sample_size must be positive"):
        multinomial(t(np.zeros((1, 3), np.float32)), sample_size=0)


def test_export_runs_in_onnxruntime():
    x = Tensor(data=X, requires_grad=False, name="x")
    y = random_uniform_like(x, low=2.0, high=4.0, dtype=torch.float64)
    model = sonnx.to_onnx([x], [y], opset=21)  # onnxruntime has no version-22 kernel
    onnx.checker.check_model(model, full_check=True)
    (out,) = ort_session(model).run(None, {"x": X})
    assert out.dtype == np.float64 and out.shape == X.shape
    assert out.min() >= 2.0 and out.max() < 4.0
