"""The tree engine itself (sonnx.operators.ml.tree_engine) against a plain walk down each tree:
every compare path (one packed float32 compare, float64, looked-up modes with membership sets),
NaNs, aggregates, and the ways the work is cut up (chunks shared among threads, each thread's
reused buffers, later stages) must all give the walk's results exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sonnx.errors import BadInputError
from sonnx.operators.ml import tree_engine as ml_tree_engine
from sonnx.operators.ml.tree_engine import MEMBER, TreeEngine, TreeNodes

VALUES = np.array([-2.0, -0.5, 0.0, 0.25, 1.0, 3.0])


def random_forest(
    rng, trees: int, width: int, outputs: int, modes, tracks: bool, leafy: float = 0.3
) -> TreeNodes:
    """Random trees of depth up to 9 (each node below the root a leaf with chance ``leafy``)
    testing values that X takes too (ties)."""
    columns: dict[str, list] = {k: [] for k in ("feature", "threshold", "mode", "tracks")}
    true_child: list[int] = []
    false_child: list[int] = []
    members: list[list[float]] = []

    def node(depth: int) -> int:
        i = len(true_child)
        true_child.append(i)
        false_child.append(i)
        leaf = depth == 9 or (depth > 0 and rng.random() < leafy)
        mode = int(rng.choice(modes))
        columns["feature"].append(int(rng.integers(width)))
        columns["threshold"].append(math.nan if mode == MEMBER else float(rng.choice(VALUES)))
        columns["mode"].append(0 if leaf else mode)
        columns["tracks"].append(bool(tracks and rng.random() < 0.5))
        members.append(list(rng.choice(VALUES, 2, replace=False)) if mode == MEMBER else [])
        if not leaf:
            true_child[i] = node(depth + 1)
            false_child[i] = node(depth + 1)
        return i

    roots = [node(0) for _ in range(trees)]
    count = len(true_child)
    leaf = np.asarray(true_child) == np.arange(count)
    has = leaf[:, None] & (rng.random((count, outputs)) < 0.8)
    widest = max(len(m) for m in members)
    return TreeNodes(
        roots=np.asarray(roots),
        feature=np.asarray(columns["feature"]),
        threshold=np.asarray(columns["threshold"]),
        mode=np.asarray(columns["mode"]),
        tracks=np.asarray(columns["tracks"]) & ~leaf,
        true_child=np.asarray(true_child),
        false_child=np.asarray(false_child),
        leaf=leaf,
        values=np.where(has, rng.uniform(-5, 5, (count, outputs)), 0.0),
        has=has,
        members=np.asarray([m + [math.nan] * (widest - len(m)) for m in members]),
    )


def walk(nodes: TreeNodes, x: np.ndarray, function: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Each row down each tree one node at a time, compared in ``dtype``."""
    compare = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)
    outputs = nodes.values.shape[1]
    start = {"MIN": math.inf, "MAX": -math.inf}.get(function, 0.0)
    combine = {"MIN": np.minimum, "MAX": np.maximum}.get(function, np.add)
    scores = np.full((len(x), outputs), start)
    given = np.zeros((len(x), outputs), dtype=bool)
    for r, row in enumerate(x.astype(dtype)):
        for n in nodes.roots:
            while not nodes.leaf[n]:
                value = row[nodes.feature[n]]
                if nodes.mode[n] == MEMBER:
                    went = value in nodes.members[n].astype(dtype)
                else:  # NaN compares false, but for BRANCH_NEQ
                    went = compare[nodes.mode[n]](value, dtype(nodes.threshold[n]))
                went |= nodes.tracks[n] and np.isnan(value)
                n = nodes.true_child[n] if went else nodes.false_child[n]
            at = nodes.has[n]
            scores[r, at] = combine(scores[r, at], nodes.values[n][at])
            given[r] |= at
    if function == "AVERAGE":
        scores /= len(nodes.roots)
    return np.where(given, scores, 0.0), given


def features(rng, rows: int, width: int, nans: bool) -> np.ndarray:
    x = rng.choice(VALUES, (rows, width)) + rng.choice([0.0, 0.1], (rows, width))
    if nans:
        x[rng.random(x.shape) < 0.2] = math.nan
    return x


@pytest.mark.parametrize(
    ("modes", "tracks", "dtype"),
    [
        ([0], False, np.float32),  # one compare, packed look-ups
        ([0], True, np.float32),  # NaN through the -inf stand-in
        ([3], True, np.float32),  # ... and through +inf
        ([1], True, np.float64),  # float64: separate feature and threshold look-ups
        ([0, 2, 4, 5], True, np.float32),  # modes looked up per node
        ([1, 3, MEMBER], True, np.float64),  # membership sets
    ],
)
@pytest.mark.parametrize("function", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_engine_matches_a_walk_down_each_tree(monkeypatch, modes, tracks, dtype, function):
    """Small chunks over two threads (each reusing its buffers, the last chunk shorter) and
    stages of two levels give the walk's results."""
    monkeypatch.setattr(ml_tree_engine, "CHUNK_ELEMENTS", 40)
    monkeypatch.setattr(ml_tree_engine, "PADDED_LEVELS", 3)
    monkeypatch.setattr(ml_tree_engine, "STAGE_LEVELS", 2)
    rng = np.random.default_rng(len(modes) * 10 + tracks)
    nodes = random_forest(rng, trees=6, width=4, outputs=3, modes=modes, tracks=tracks)
    x = features(rng, 53, 4, nans=True)
    torch_dtype = torch.float32 if dtype == np.float32 else torch.float64
    engine = TreeEngine(nodes, torch_dtype, torch.device("cpu"), "test")
    assert len(engine.stages) > 2
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        scores, given = engine.aggregate(torch.as_tensor(x), function)
    finally:
        torch.set_num_threads(previous)
    expected, expected_given = walk(nodes, x, function, dtype)
    np.testing.assert_array_equal(given.numpy(), expected_given)
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_chunks_threads_and_stages_change_nothing(monkeypatch):
    """The same forest cut up in every way gives the same results: bit-identical over chunks
    and threads; over stages, which add the weights in another order, to rounding."""
    rng = np.random.default_rng(3)
    nodes = random_forest(rng, trees=9, width=5, outputs=2, modes=[0], tracks=True)
    x = torch.as_tensor(features(rng, 301, 5, nans=True), dtype=torch.float32)
    results = []
    previous = torch.get_num_threads()
    for chunk, padded, threads in [(1 << 15, 10, 1), (50, 10, 2), (64, 2, 2), (7, 1, 1)]:
        monkeypatch.setattr(ml_tree_engine, "CHUNK_ELEMENTS", chunk)
        monkeypatch.setattr(ml_tree_engine, "PADDED_LEVELS", padded)
        monkeypatch.setattr(ml_tree_engine, "STAGE_LEVELS", padded)
        torch.set_num_threads(threads)
        try:
            engine = TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")
            results.append(engine.aggregate(x, "SUM"))
        finally:
            torch.set_num_threads(previous)
    assert torch.equal(results[1][0], results[0][0])
    for scores, given in results[1:]:
        torch.testing.assert_close(scores, results[0][0], rtol=1e-12, atol=1e-12)
        assert torch.equal(given, results[0][1])


def test_only_leaves_weigh(monkeypatch):
    """A weight the node arrays give an interior node is never added, not even where a stage
    ends (every stage adds the weights of the nodes its pairs reached)."""
    monkeypatch.setattr(ml_tree_engine, "PADDED_LEVELS", 2)
    rng = np.random.default_rng(5)
    nodes = random_forest(rng, trees=4, width=3, outputs=1, modes=[0], tracks=False)
    x = features(rng, 20, 3, nans=False)
    expected, _ = walk(nodes, x, "SUM", np.float32)
    nodes.values[~nodes.leaf] = 1000.0
    nodes.has[~nodes.leaf] = True
    engine = TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")
    scores, _ = engine.aggregate(torch.as_tensor(x, dtype=torch.float32), "SUM")
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_stumps_and_an_empty_batch():
    """Trees that are a single leaf, and a batch of no rows."""
    nodes = TreeNodes(
        roots=np.array([0, 1]),
        feature=np.zeros(2, dtype=np.int64),
        threshold=np.zeros(2),
        mode=np.zeros(2, dtype=np.int64),
        tracks=np.zeros(2, dtype=bool),
        true_child=np.array([0, 1]),
        false_child=np.array([0, 1]),
        leaf=np.ones(2, dtype=bool),
        values=np.array([[1.5], [2.0]]),
        has=np.ones((2, 1), dtype=bool),
    )
    engine = TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")
    scores, given = engine.aggregate(torch.zeros(3, 1), "SUM")
    assert scores.tolist() == [[3.5]] * 3 and given.all()
    scores, given = engine.aggregate(torch.zeros(0, 1), "SUM")
    assert scores.shape == (0, 1) and given.shape == (0, 1)


def chains(length: int, trees: int) -> TreeNodes:
    """Trees each a chain of ``length`` interior nodes ``x <= i`` with a leaf off every one
    (and two at the bottom): most rows leave early."""
    count = 2 * length + 1
    true_child, false_child = np.arange(count), np.arange(count)
    true_child[:length] = np.arange(length, 2 * length)  # a leaf
    false_child[:length] = np.arange(1, length + 1)  # the next node (the last: a leaf)
    false_child[length - 1] = 2 * length
    shift = np.repeat(np.arange(trees) * count, count)
    return TreeNodes(
        roots=np.arange(trees) * count,
        feature=np.zeros(trees * count, dtype=np.int64),
        threshold=np.tile(np.arange(count, dtype=np.float64), trees),
        mode=np.zeros(trees * count, dtype=np.int64),
        tracks=np.zeros(trees * count, dtype=bool),
        true_child=np.tile(true_child, trees) + shift,
        false_child=np.tile(false_child, trees) + shift,
        leaf=np.tile(np.arange(count) >= length, trees),
        values=np.arange(trees * count, dtype=np.float64)[:, None],
        has=np.ones((trees * count, 1), dtype=bool),
    )


def test_the_first_stage_stops_where_few_pairs_go_deeper():
    """A chain of 12 (13 leaves, one more per level) pads 9 levels before a third of its
    leaves are left below; complete trees are padded whole."""
    nodes = chains(12, trees=3)
    engine = TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")
    assert engine.depth == 12 and len(engine.stages[0].levels) == 9
    x = np.arange(-1, 14, 0.5, dtype=np.float32)[:, None]
    scores, _ = engine.aggregate(torch.as_tensor(x), "SUM")
    np.testing.assert_array_equal(scores.numpy(), walk(nodes, x, "SUM", np.float32)[0])
    rng = np.random.default_rng(0)
    complete = random_forest(rng, 3, width=2, outputs=1, modes=[0], tracks=False, leafy=0.0)
    complete_engine = TreeEngine(complete, torch.float32, torch.device("cpu"), "test")
    assert [len(s.levels) for s in complete_engine.stages] == [9]


def test_shared_subtrees_are_walked_and_cycles_refused():
    """Two trees may share nodes (TreeEnsemble's arrays allow it); a branch back up is a
    cycle."""
    nodes = chains(4, trees=1)
    nodes.roots = np.array([0, 1])  # the second tree is the first one's second node down
    engine = TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")
    x = np.arange(-1, 6, 0.5, dtype=np.float32)[:, None]
    scores, _ = engine.aggregate(torch.as_tensor(x), "SUM")
    np.testing.assert_array_equal(scores.numpy(), walk(nodes, x, "SUM", np.float32)[0])
    nodes.false_child[2] = 1
    with pytest.raises(BadInputError, match="test: the nodes_\\*nodeids attributes form a cycle"):
        TreeEngine(nodes, torch.float32, torch.device("cpu"), "test")


def test_graph_mode_runs_a_tree_ensemble_eagerly() -> None:
    """The official one-tree TreeEnsemble case (a fixed [3, 2] input) in graph mode without
    the first-run check: the node runs eagerly, with a warning naming it, and the results are
    the official ones. Traced, the engine either failed to compile or, in a longer process
    (a probe over every official case), compiled into wrong leaves: every row the last
    leaf's."""
    import warnings

    import onnx
    from onnx import TensorProto, helper

    import sonnx
    from sonnx.errors import GraphModeWarning
    from sonnx.tensor import to_numpy

    tree = helper.make_node(
        "TreeEnsemble",
        ["x"],
        ["y"],
        name="forest",
        domain="ai.onnx.ml",
        n_targets=2,
        aggregate_function=1,
        post_transform=0,
        tree_roots=[0],
        nodes_featureids=[0, 0, 0],
        nodes_splits=helper.make_tensor("splits", TensorProto.DOUBLE, [3], [3.14, 1.2, 4.2]),
        nodes_modes=helper.make_tensor("modes", TensorProto.UINT8, [3], [0, 0, 0]),
        nodes_truenodeids=[1, 0, 1],
        nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[2, 2, 3],
        nodes_falseleafs=[0, 1, 1],
        leaf_targetids=[0, 1, 0, 1],
        leaf_weights=helper.make_tensor(
            "weights", TensorProto.DOUBLE, [4], [5.23, 12.12, -12.23, 7.21]
        ),
    )
    graph = helper.make_graph(
        [tree],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3, 2])],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model)
    x = np.array([[1.2, 3.4], [-0.12, 1.66], [4.14, 1.77]])
    official = [[5.23, 0.0], [5.23, 0.0], [0.0, 12.12]]
    # Eagerly first: the forest's tables are then built, and the trace reads them.
    np.testing.assert_array_equal(to_numpy(sonnx.prepare(model).run([x])[0]), official)
    rep = sonnx.prepare(model, use_graph=True, verify=False, compile_budget=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = to_numpy(rep.run([x])[0])
    np.testing.assert_array_equal(got, official)
    (warned,) = [w for w in caught if issubclass(w.category, GraphModeWarning)]
    assert "'forest'" in str(warned.message) and "tree ensemble" in str(warned.message)
