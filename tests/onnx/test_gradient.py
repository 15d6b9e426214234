"""The Gradient operator (ai.onnx.preview.training): dY/dX of hand-built graphs.

Expected values come from the derivative written out in NumPy or from torch autograd on the
same formula. onnx's ReferenceEvaluator has no Gradient implementation to compare with.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
import sonnx.autograd as autograd
from sonnx.errors import BadInputError, BadModelError, UnsupportedOperatorError
from sonnx.tensor import to_numpy

TRAINING = "ai.onnx.preview.training"
RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3)).astype(np.float32)
B = RNG.standard_normal((2, 3)).astype(np.float32)


def _gradient(inputs: list[str], outputs: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node("Gradient", inputs, outputs, name="grad", domain=TRAINING, **attrs)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, int],
    outputs: list[str],
    initializers: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "gradient_test",
        [helper.make_tensor_value_info(n, t, None) for n, t in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [to_numpy(t) for t in sonnx.prepare(model).run(feeds)]


FLOATS = {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT}


def test_gradient_of_add_is_one_for_each_element() -> None:
    model = _model(
        [
            helper.make_node("Add", ["a", "b"], ["c"]),
            _gradient(["a", "b"], ["dc_da", "dc_db"], xs=["a", "b"], y="c"),
        ],
        FLOATS,
        ["c", "dc_da", "dc_db"],
    )
    c, dc_da, dc_db = _run(model, {"a": A, "b": B})
    np.testing.assert_allclose(c, A + B)
    np.testing.assert_array_equal(dc_da, np.ones_like(A))
    np.testing.assert_array_equal(dc_db, np.ones_like(B))
    assert autograd.training is False  # the recomputation restored the flag


def test_gradient_of_mul_and_add_matches_the_derivative() -> None:
    # d = (a + b) * a: dd/da = 2a + b, dd/db = a
    model = _model(
        [
            helper.make_node("Add", ["a", "b"], ["c"]),
            helper.make_node("Mul", ["c", "a"], ["d"]),
            _gradient(["a", "b"], ["dd_da", "dd_db"], xs=["a", "b"], y="d"),
        ],
        FLOATS,
        ["d", "dd_da", "dd_db"],
    )
    d, dd_da, dd_db = _run(model, {"a": A, "b": B})
    np.testing.assert_allclose(d, (A + B) * A, rtol=1e-6)
    np.testing.assert_allclose(dd_da, 2 * A + B, rtol=1e-6)
    np.testing.assert_allclose(dd_db, A, rtol=1e-6)


def _tanh_chain(xs: list[str], zs: list[str], grads: list[str]) -> onnx.ModelProto:
    """y = Tanh(MatMul(Tanh(MatMul(x, w1)), w2)) with both weights as initializers."""
    return _model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Tanh", ["h"], ["t"]),
            helper.make_node("MatMul", ["t", "w2"], ["u"]),
            helper.make_node("Tanh", ["u"], ["y"]),
            _gradient(xs + zs, grads, xs=xs, y="y", **({"zs": zs} if zs else {})),
        ],
        {"x": TensorProto.FLOAT},
        ["y", *grads],
        {"w1": W1, "w2": W2},
    )


X = RNG.standard_normal((4, 3)).astype(np.float32)
W1 = RNG.standard_normal((3, 5)).astype(np.float32)
W2 = RNG.standard_normal((5, 2)).astype(np.float32)


def test_gradient_of_a_matmul_tanh_chain_matches_torch() -> None:
    model = _tanh_chain(["x", "w1", "w2"], [], ["dx", "dw1", "dw2"])
    rep = sonnx.prepare(model)
    y, dx, dw1, dw2 = (to_numpy(t) for t in rep.run({"x": X}))
    leaves = [torch.tensor(v, requires_grad=True) for v in (X, W1, W2)]
    expected_y = torch.tanh(torch.tanh(leaves[0] @ leaves[1]) @ leaves[2])
    expected = torch.autograd.grad(expected_y.sum(), leaves)
    np.testing.assert_allclose(y, expected_y.detach().numpy(), rtol=1e-5, atol=1e-6)
    for got, want in zip((dx, dw1, dw2), expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    # The weights are read, never written, and carry no accumulated gradient.
    np.testing.assert_array_equal(to_numpy(rep.params["w1"]), W1)
    assert rep.params["w1"].data.grad is None


def test_zs_are_inputs_that_are_not_differentiated() -> None:
    model = _tanh_chain(["w2"], ["x"], ["dw2"])
    _, dw2 = _run(model, {"x": X})
    t = np.tanh(X @ W1)
    expected = t.T @ (1 - np.tanh(t @ W2) ** 2)  # d sum(tanh(t @ w2)) / d w2
    np.testing.assert_allclose(dw2, expected, rtol=1e-5, atol=1e-6)


def test_gradient_at_the_values_given_to_the_node() -> None:
    # xs names the intermediate h = 2a, but the node is given h1: dY/dH at H = h1.
    model = _model(
        [
            helper.make_node("Add", ["a", "a"], ["h"]),
            helper.make_node("Tanh", ["h"], ["y"]),
            _gradient(["h1"], ["dy_dh"], xs=["h"], y="y"),
        ],
        {"a": TensorProto.FLOAT, "h1": TensorProto.FLOAT},
        ["y", "dy_dh"],
    )
    y, dy_dh = _run(model, {"a": A, "h1": B})
    np.testing.assert_allclose(y, np.tanh(2 * A), rtol=1e-6)
    np.testing.assert_allclose(dy_dh, 1 - np.tanh(B) ** 2, rtol=1e-5, atol=1e-6)


def test_an_x_that_y_does_not_use_gets_a_zero_gradient() -> None:
    model = _model(
        [
            helper.make_node("Mul", ["a", "a"], ["y"]),
            _gradient(["a", "b"], ["dy_da", "dy_db"], xs=["a", "b"], y="y"),
        ],
        {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT},
        ["dy_da", "dy_db"],
    )
    b = np.ones((5,), np.float32)
    dy_da, dy_db = _run(model, {"a": A, "b": b})
    np.testing.assert_allclose(dy_da, 2 * A, rtol=1e-6)
    np.testing.assert_array_equal(dy_db, np.zeros_like(b))


def test_gradient_in_training_mode_and_inside_an_if_branch() -> None:
    # The branch reads the outer a: Gradient's forward graph is found inside the subgraph.
    then_branch = helper.make_graph(
        [
            helper.make_node("Mul", ["a", "a"], ["sq"]),
            _gradient(["a"], ["dsq"], xs=["a"], y="sq"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("dsq", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["neg"])],
        "else",
        [],
        [helper.make_tensor_value_info("neg", TensorProto.FLOAT, None)],
    )
    model = _model(
        [
            helper.make_node(
                "If", ["cond"], ["out"], then_branch=then_branch, else_branch=else_branch
            )
        ],
        {"a": TensorProto.FLOAT, "cond": TensorProto.BOOL},
        ["out"],
    )
    rep = sonnx.prepare(model)
    autograd.training = True
    try:
        (out,) = rep.run({"a": A, "cond": np.array(True)})
    finally:
        autograd.training = False
    np.testing.assert_allclose(to_numpy(out), 2 * A, rtol=1e-6)


def test_y_that_no_node_computes_is_a_clear_error() -> None:
    model = _model(
        [
            helper.make_node("Add", ["a", "b"], ["c"]),
            _gradient(["a"], ["g"], xs=["a"], y="nope"),
        ],
        FLOATS,
        ["g"],
    )
    with pytest.raises(BadModelError, match=r"Gradient node 'grad': y names tensor 'nope'"):
        sonnx.prepare(model)


def test_xs_name_that_nothing_defines_is_a_clear_error() -> None:
    model = _model(
        [
            helper.make_node("Add", ["a", "b"], ["c"]),
            _gradient(["a", "b"], ["g", "h"], xs=["a", "ghost"], y="c"),
        ],
        FLOATS,
        ["g"],
    )
    with pytest.raises(BadModelError, match=r"'grad': xs names tensor 'ghost'"):
        sonnx.prepare(model)


def test_inputs_must_match_xs_and_zs() -> None:
    model = _model(
        [helper.make_node("Add", ["a", "b"], ["c"]), _gradient(["a"], ["g"], xs=["a", "b"], y="c")],
        FLOATS,
        ["g"],
    )
    with pytest.raises(BadModelError, match=r"one input per name in xs and zs \(2 \+ 0\)"):
        sonnx.prepare(model)


def test_integer_x_is_a_clear_error() -> None:
    model = _model(
        [
            helper.make_node("Add", ["k", "k"], ["c"]),
            _gradient(["k"], ["g"], xs=["k"], y="c"),
        ],
        {"k": TensorProto.INT64},
        ["g"],
    )
    rep = sonnx.prepare(model)
    with pytest.raises(BadInputError, match=r"'grad': x 'k' must be a float tensor.*int64"):
        rep.run({"k": np.arange(3)})


def test_gradient_of_a_gradient_is_refused() -> None:
    model = _model(
        [
            helper.make_node("Mul", ["a", "a"], ["y"]),
            _gradient(["a"], ["dy"], xs=["a"], y="y"),
            helper.make_node(
                "Gradient", ["a"], ["d2y"], name="grad2", domain=TRAINING, xs=["a"], y="dy"
            ),
        ],
        {"a": TensorProto.FLOAT},
        ["d2y"],
    )
    with pytest.raises(UnsupportedOperatorError, match=r"'grad2'.*gradients of gradients"):
        sonnx.prepare(model)


def test_dropout_that_follows_the_training_flag_is_refused() -> None:
    model = _model(
        [
            helper.make_node("Dropout", ["a"], ["y"], name="drop"),
            _gradient(["a"], ["g"], xs=["a"], y="y"),
        ],
        {"a": TensorProto.FLOAT},
        ["g"],
    )
    with pytest.raises(UnsupportedOperatorError, match=r"Dropout node 'drop'.*training"):
        sonnx.prepare(model)
