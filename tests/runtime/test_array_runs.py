"""Graph-mode runs of lists of plain NumPy arrays (``sonnx.runtime.array_runs``): the remembered
graph serves repeated shapes without the general path, with the same results, weights changed
in place are seen, and anything else goes through the general path and its checks.

The graphs of both branches are compiled once for the module; each test loads them from its
copy of that store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.runtime.imported_graph import ImportedGraph
from sonnx.tensor import to_numpy
from tests.onnx.switch_models import switch_model, unary_branch
from tests.runtime.graph_mode_models import compile_into_store, copy_store


def _projected_switch() -> onnx.ModelProto:
    """``If (mode == 1)`` choosing Relu or Neg of ``x @ w``, as Silero-VAD branches on its
    sample rate; ``x`` has a dynamic batch."""

    weight = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    return switch_model(
        "projected_switch",
        unary_branch("a", "Relu", "projected"),
        unary_branch("b", "Neg", "projected"),
        x_width=3,
        before=[helper.make_node("MatMul", ["x", "w"], ["projected"], name="project")],
        initializers=[helper.make_tensor("w", TensorProto.FLOAT, [3, 4], weight.ravel())],
        y_shape=["n", 4],
    )


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _projected_switch()


@pytest.fixture(scope="module")
def stored_branches(model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the graph of each branch (mode 1 and 0)."""
    root = tmp_path_factory.mktemp("stored_branches")
    assert compile_into_store(root, model, _feeds(2, 1, 0), _feeds(2, 0, 0)) == 2
    return root


@pytest.fixture
def loaded(stored_branches) -> None:
    """This test's store starts as a copy of the module's, so the branches' graphs load."""
    copy_store(stored_branches)


@pytest.fixture
def general_runs(monkeypatch) -> list[int]:
    """How many runs went through the general path (``GraphRunner.run``), as a list of one
    count."""
    count = [0]
    general = GraphRunner.run

    def counted(self: GraphRunner, inputs):
        count[0] += 1
        return general(self, inputs)

    monkeypatch.setattr(GraphRunner, "run", counted)
    return count


def _feeds(n: int, mode: int, seed: int) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)
    return [x, np.array(mode, np.int64)]


def test_repeated_shapes_and_switch_values_take_the_remembered_graph(model, general_runs, loaded):
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    order = [(2, 1), (2, 1), (2, 0), (2, 0), (5, 1), (2, 1), (5, 0), (5, 0), (2, 0)]
    for seed, (n, mode) in enumerate(order):
        feeds = _feeds(n, mode, seed)
        if seed % 2:  # by name, in another order than the model's
            feeds = {"mode": feeds[1], "x": feeds[0]}
        (got,) = rep.run(feeds)
        (expected,) = eager.run(feeds)
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6, atol=1e-6)
        assert isinstance(got.creator, ImportedGraph)
        assert got.name == "y"
    # Each new (batch, mode) pair went through the general path once: (2,1), (2,0), (5,1),
    # (5,0); every repeat was served from the remembered choice.
    assert general_runs[0] == 4
    assert rep.graph_runner.fallback is None
    assert rep.graph_runner.compile_count + rep.graph_runner.loaded_count == 2


def test_a_weight_changed_in_place_reaches_the_next_run(model, general_runs, loaded):
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    feeds = _feeds(3, 1, seed=7)
    for _ in range(2):
        rep.run(feeds)
    before = to_numpy(rep.run(feeds)[0])
    with torch.no_grad():
        rep.params["w"].data.mul_(-2.0)
        eager.params["w"].data.mul_(-2.0)
    (got,) = rep.run(feeds)
    (expected,) = eager.run(feeds)
    np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6, atol=1e-6)
    assert not np.allclose(to_numpy(got), before)
    assert general_runs[0] == 2  # the first run, and the first after the change


def test_arrays_the_fast_path_does_not_take_are_bound_and_checked_as_before(model, loaded):
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    wide = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    strided = wide[:, ::2]  # not C-ordered
    one_value_mode = np.array([0], np.int64)  # a scalar input given as one element
    for feeds in ([strided, np.array(1, np.int64)], [strided.copy(), one_value_mode]) * 2:
        (got,) = rep.run(feeds)
        (expected,) = eager.run(feeds)
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6, atol=1e-6)
    with pytest.raises(BadInputError, match=r"'x'.*float32"):
        rep.run([wide[:, :3].astype(np.float64), np.array(1, np.int64)])
    with pytest.raises(BadInputError, match="'x'"):
        rep.run([wide[:, :4].copy(), np.array(1, np.int64)])
    with pytest.raises(BadInputError, match="takes 2 input"):
        rep.run([wide[:, :3].copy(), np.array(1, np.int64), np.array(1, np.int64)])
