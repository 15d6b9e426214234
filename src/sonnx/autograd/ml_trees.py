"""Tree ensembles of the ``ai.onnx.ml`` domain: TreeEnsembleClassifier and
TreeEnsembleRegressor (versions 1 and 3), evaluated as tensor programs.

The node attributes are turned once (per device) into a :class:`Forest` of flat tensors. Each
sample then finds its leaf in every tree at once, by one of Hummingbird's two strategies:

* GEMM, for shallow forests (depth <= 3): every interior node's condition for every sample,
  then one batched product with each tree's (interior nodes, leaves) path matrix (+1 where the
  leaf is under the node's true branch, -1 under its false branch) picks the leaf whose count
  of satisfied true-branch ancestors equals its number of them;
* tree traversal, deeper: an index per (sample, tree) moves one level down per step; leaves
  point to themselves, so ``depth`` steps bring every pair to its leaf.

Rows go in chunks so that no intermediate exceeds a few million elements; nothing loops per
sample. The leaves' weights are then gathered and aggregated, and the classifier's scores
finished exactly as onnxruntime does (its binary cases included). Piecewise constant in X, so
no gradient is recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sonnx.autograd.ml_common import (
    ML_DOMAIN,
    POST_TRANSFORMS,
    binary_scores,
    choice,
    feature_matrix,
    first_argmax,
    floats,
    int_labels,
    ints,
    labels_tensor,
    post_transform,
)
from sonnx.autograd.operator import Operator
from sonnx.errors import BadInputError

__all__ = ["Forest", "TreeEnsembleClassifier", "TreeEnsembleRegressor"]

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
_LEAF = 6
GEMM_MAX_DEPTH = 3  # Hummingbird's default switch from GEMM to tree traversal
CHUNK_ELEMENTS = 1 << 22


@dataclass
class _Gemm:
    """The GEMM strategy's tensors: per tree (padded), its interior nodes and leaves."""

    interior: torch.Tensor  # (T, I) global node index of each interior node (padding: 0)
    paths: torch.Tensor  # (T, I, L) +1 / -1 / 0
    counts: torch.Tensor  # (T, L) true-branch ancestors per leaf (padding: -1)
    leaves: torch.Tensor  # (T, L) global node index of each leaf


class Forest:
    """A tree ensemble's nodes as flat tensors (index = node position), checked once.

    ``values`` (nodes, outputs) and ``has`` hold each leaf's weight per output (a class or a
    target) and whether it gives one.
    """

    def __init__(self, op: Operator, prefix: str, outputs: int, device: torch.device) -> None:
        trees = np.asarray(ints(op, "nodes_treeids", required=True))
        ids = np.asarray(ints(op, "nodes_nodeids", required=True))
        modes = op.attr("nodes_modes") or []
        columns = {
            "nodes_featureids": ints(op, "nodes_featureids"),
            "nodes_values": floats(op, "nodes_values"),
            "nodes_truenodeids": ints(op, "nodes_truenodeids"),
            "nodes_falsenodeids": ints(op, "nodes_falsenodeids"),
            "nodes_modes": modes,
        }
        tracks = ints(op, "nodes_missing_value_tracks_true") or [0] * len(ids)
        columns["nodes_missing_value_tracks_true"] = tracks
        bad = {k: len(v) for k, v in columns.items() if len(v) != len(ids)}
        if bad or len(trees) != len(ids) or not len(ids):
            raise BadInputError(
                f"{op.op_type}: every nodes_* attribute must hold one value per node "
                f"({len(ids)} in nodes_nodeids), received lengths {bad or {'nodes': len(ids)}}"
            )
        unknown = sorted({str(m) for m in modes} - set(MODES))
        if unknown:
            raise BadInputError(
                f"{op.op_type}: nodes_modes must be among {list(MODES)}, received {unknown}"
            )
        self.tree_ids, tree = np.unique(trees, return_inverse=True)
        order = np.lexsort((ids, tree))
        keys = (tree * (ids.max() + 1) + ids)[order]
        if np.any(np.diff(keys) == 0):
            raise BadInputError(f"{op.op_type}: a (tree, node) id pair is given twice")
        mode = np.array([MODES.index(str(m)) for m in modes], dtype=np.int64)[order]
        tree = tree[order]
        leaf = mode == _LEAF
        stride = ids.max() + 1

        def position(tree_index: np.ndarray, node: np.ndarray, what: str) -> np.ndarray:
            wanted = tree_index * stride + node
            found = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
            if np.any((keys[found] != wanted) | (node < 0) | (node >= stride)):
                raise BadInputError(f"{op.op_type}: {what} names a node that does not exist")
            return found

        here = np.arange(len(keys))
        true_id = np.asarray(columns["nodes_truenodeids"])[order]
        false_id = np.asarray(columns["nodes_falsenodeids"])[order]
        true_child = here.copy()
        false_child = here.copy()
        true_child[~leaf] = position(tree[~leaf], true_id[~leaf], "nodes_truenodeids")
        false_child[~leaf] = position(tree[~leaf], false_id[~leaf], "nodes_falsenodeids")
        is_child = np.zeros(len(keys), dtype=bool)
        is_child[true_child[~leaf]] = is_child[false_child[~leaf]] = True
        roots = np.flatnonzero(~is_child)
        if len(roots) != len(self.tree_ids) or len(np.unique(tree[roots])) != len(roots):
            raise BadInputError(
                f"{op.op_type}: every tree must have exactly one root (a node no branch leads "
                f"to); {len(self.tree_ids)} trees have {len(roots)} roots"
            )
        roots = roots[np.argsort(tree[roots])]
        self.depth = _depth(op, roots, leaf, true_child, false_child)
        features = np.asarray(columns["nodes_featureids"])[order]
        self.width = int(features[~leaf].max()) + 1 if (~leaf).any() else 0
        values, has = _leaf_weights(op, prefix, outputs, tree, position, leaf)
        self.weights_all_positive = bool((floats(op, f"{prefix}_weights") >= 0).all())
        self.weight_ids = set(ints(op, f"{prefix}_ids"))

        def put(a: np.ndarray, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.as_tensor(a, dtype=dtype, device=device)

        self.roots = put(roots)
        self.features = put(np.where(leaf, 0, features))
        self.thresholds = put(np.asarray(columns["nodes_values"])[order], torch.float64)
        self.modes = put(mode)
        self.branch_modes = set(mode[~leaf].tolist())
        self.tracks = put(np.asarray(tracks)[order] != 0, torch.bool)
        self.any_tracks = bool(np.any(np.asarray(tracks)[order][~leaf]))
        self.true_child, self.false_child = put(true_child), put(false_child)
        self.values, self.has = put(values, torch.float64), put(has, torch.bool)
        self.gemm = (
            _gemm_tables(roots, leaf, true_child, false_child, device)
            if self.depth <= GEMM_MAX_DEPTH
            else None
        )

    @property
    def trees(self) -> int:
        return int(self.roots.numel())

    def leaves(self, x: torch.Tensor) -> torch.Tensor:
        """The node index of the leaf each row of x (n, F) float64 reaches per tree: (n, T)."""
        if self.gemm is not None:
            g = self.gemm
            node = g.interior.reshape(-1)
            value = x.index_select(1, self.features[node]).reshape(x.shape[0], *g.interior.shape)
            went_true = self._condition(node.reshape(g.interior.shape), value).to(x.dtype)
            reached = torch.einsum("nti,til->ntl", went_true, g.paths) == g.counts
            return g.leaves.gather(1, reached.to(torch.int64).argmax(-1).T).T
        index = self.roots.expand(x.shape[0], -1)
        for _ in range(self.depth):
            went_true = self._condition(index, x.gather(1, self.features[index]))
            index = torch.where(went_true, self.true_child[index], self.false_child[index])
        return index

    def _condition(self, node: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Whether each node sends its value down the true branch (NaN: where it tracks)."""
        split = self.thresholds[node]
        if self.branch_modes <= {0}:
            chosen = value <= split
        else:
            tests = (
                value <= split,
                value < split,
                value >= split,
                value > split,
                value == split,
                value != split,
            )
            mode = self.modes[node]
            chosen = torch.zeros_like(tests[0])
            for code in self.branch_modes:
                chosen = torch.where(mode == code, tests[code], chosen)
        if self.any_tracks:
            chosen = chosen | (self.tracks[node] & value.isnan())
        return chosen

    def aggregate(self, x: torch.Tensor, function: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row and output: the aggregated leaf weights (float64) and whether any leaf
        gave that output a weight, over every tree; rows go in bounded chunks."""
        outputs = self.values.shape[1]
        rows = max(1, CHUNK_ELEMENTS // max(1, self.trees * outputs))
        totals, given = [], []
        for chunk in torch.split(x, rows):
            index = self.leaves(chunk)
            values, has = self.values[index], self.has[index]
            if function in ("SUM", "AVERAGE"):
                total = values.sum(1)
            else:
                blank = math.inf if function == "MIN" else -math.inf
                masked = torch.where(has, values, blank)
                total = masked.amin(1) if function == "MIN" else masked.amax(1)
            any_has = has.any(1)
            totals.append(torch.where(any_has, total, 0.0))
            given.append(any_has)
        total = torch.cat(totals) if totals else x.new_zeros(0, outputs)
        any_given = torch.cat(given) if given else x.new_zeros(0, outputs, dtype=torch.bool)
        if function == "AVERAGE":
            total = total / self.trees
        return total, any_given


def _depth(
    op: Operator, roots: np.ndarray, leaf: np.ndarray, true_child: np.ndarray, false_child
) -> int:
    frontier, depth = roots, 0
    while True:
        frontier = frontier[~leaf[frontier]]
        if not len(frontier):
            return depth
        depth += 1
        if depth > len(leaf):
            raise BadInputError(f"{op.op_type}: the nodes_*nodeids attributes form a cycle")
        frontier = np.concatenate([true_child[frontier], false_child[frontier]])


def _leaf_weights(op, prefix, outputs, tree, position, leaf) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, outputs) weights summed per leaf and output, and which are given."""
    wtrees = np.asarray(ints(op, f"{prefix}_treeids"))
    wnodes = np.asarray(ints(op, f"{prefix}_nodeids"))
    wids = np.asarray(ints(op, f"{prefix}_ids"))
    weights = floats(op, f"{prefix}_weights")
    lengths = {len(wtrees), len(wnodes), len(wids), len(weights)}
    if len(lengths) != 1:
        raise BadInputError(
            f"{op.op_type}: {prefix}_treeids, {prefix}_nodeids, {prefix}_ids and "
            f"{prefix}_weights must have one value per weight, received lengths "
            f"{[len(wtrees), len(wnodes), len(wids), len(weights)]}"
        )
    if len(wids) and not 0 <= wids.min() <= wids.max() < outputs:
        raise BadInputError(
            f"{op.op_type}: {prefix}_ids must be in [0, {outputs - 1}], received "
            f"{sorted(set(wids.tolist()))}"
        )
    tree_ids = np.unique(np.asarray(ints(op, "nodes_treeids")))
    tree_index = np.searchsorted(tree_ids, wtrees)
    if len(wtrees) and np.any(tree_ids[np.clip(tree_index, 0, len(tree_ids) - 1)] != wtrees):
        raise BadInputError(f"{op.op_type}: {prefix}_treeids names a tree that has no nodes")
    where = position(tree_index, wnodes, f"{prefix}_nodeids")
    values = np.zeros((len(leaf), outputs))
    has = np.zeros((len(leaf), outputs), dtype=bool)
    np.add.at(values, (where, wids), weights)
    has[where, wids] = True
    return values, has


def _gemm_tables(roots, leaf, true_child, false_child, device) -> _Gemm:
    """Each tree's interior nodes, leaves and path matrix (trees of depth <= 3: small)."""
    per_tree = []
    for root in roots.tolist():
        interior, leaves, signs = [], [], []
        stack = [(root, [])]
        while stack:
            node, path = stack.pop()
            if leaf[node]:
                leaves.append(node)
                signs.append(path)
                continue
            k = len(interior)
            interior.append(node)
            stack.append((false_child[node], [*path, (k, -1)]))
            stack.append((true_child[node], [*path, (k, 1)]))
        per_tree.append((interior, leaves, signs))
    width = max(1, max(len(t[0]) for t in per_tree))
    count = max(len(t[1]) for t in per_tree)
    trees = len(per_tree)
    interior = np.zeros((trees, width), dtype=np.int64)
    paths = np.zeros((trees, width, count))
    counts = np.full((trees, count), -1.0)
    leaves = np.zeros((trees, count), dtype=np.int64)
    for t, (inner, outer, signs) in enumerate(per_tree):
        interior[t, : len(inner)] = inner
        leaves[t, : len(outer)] = outer
        for j, path in enumerate(signs):
            for k, sign in path:
                paths[t, k, j] = sign
            counts[t, j] = sum(1 for _, sign in path if sign > 0)
    return _Gemm(
        torch.as_tensor(interior, device=device),
        torch.as_tensor(paths, dtype=torch.float64, device=device),
        torch.as_tensor(counts, dtype=torch.float64, device=device).unsqueeze(0),
        torch.as_tensor(leaves, device=device),
    )


class _TreeEnsembleBase(Operator):
    """The forest, built on first use per device and kept (attributes do not change)."""

    domain = ML_DOMAIN
    prefix = ""

    def forest(self, outputs: int, device: torch.device) -> Forest:
        cache = self.__dict__.setdefault("_forests", {})
        if device not in cache:
            cache[device] = Forest(self, self.prefix, outputs, device)
        return cache[device]

    def features(self, x: torch.Tensor, forest: Forest) -> torch.Tensor:
        x = feature_matrix(self, x)
        if x.shape[1] < forest.width:
            raise BadInputError(
                f"{self.op_type}: the trees read feature {forest.width - 1}, so X needs at "
                f"least {forest.width} features, received shape {tuple(x.shape)}"
            )
        return x.detach().to(torch.float64)


class TreeEnsembleRegressor(_TreeEnsembleBase):
    """ai.onnx.ml TreeEnsembleRegressor: Y (N, n_targets) float32, the leaves' target weights
    aggregated over the trees by ``aggregate_function``, plus ``base_values`` (one per
    target), then ``post_transform``. A target no leaf reached gets 0 (plus its base)."""

    op_type = "TreeEnsembleRegressor"
    prefix = "target"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        targets = int(self.attr("n_targets") or 1)
        forest = self.forest(targets, x.device)
        x = self.features(x, forest)
        function = choice(self, "aggregate_function", ("AVERAGE", "SUM", "MIN", "MAX"))
        scores, _ = forest.aggregate(x, function)
        base = floats(self, "base_values")
        if base.size == targets:
            scores = scores + torch.as_tensor(base, device=x.device)
        name = choice(self, "post_transform", POST_TRANSFORMS)
        return post_transform(scores, name).to(torch.float32)


class TreeEnsembleClassifier(_TreeEnsembleBase):
    """ai.onnx.ml TreeEnsembleClassifier: labels Y (N,) int64 and scores Z (N, classes)
    float32: the leaves' class weights summed over the trees, plus ``base_values``, then
    ``post_transform``.

    With more than two classes the label is the first class with the largest score among
    those some leaf (or a base value) scored. Two classes follow onnxruntime's binary rules:
    when every weight is for one class the score is the positive class's, the label is
    positive above 0.5 (all weights >= 0) or above 0 (mixed weights), and the two columns are
    ``(1 - s, s)``, or ``(-s, s)`` (``(sigmoid(-s), sigmoid(s))`` under LOGISTIC).
    """

    op_type = "TreeEnsembleClassifier"
    prefix = "class"

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = int_labels(self, "classlabels_int64s")
        if len(labels) < 2:
            raise BadInputError(
                f"TreeEnsembleClassifier: classlabels_int64s must name at least two classes, "
                f"received {labels}"
            )
        forest = self.forest(len(labels), x.device)
        x = self.features(x, forest)
        scores, has = forest.aggregate(x, "SUM")
        base = floats(self, "base_values")
        name = choice(self, "post_transform", POST_TRANSFORMS)
        table = labels_tensor(labels, x.device)
        if len(labels) > 2:
            if base.size:
                k = min(base.size, len(labels))
                scores[:, :k] += torch.as_tensor(base[:k], device=x.device)
                has[:, :k] = True
            label = table[first_argmax(scores, has)]
            return label, post_transform(torch.where(has, scores, 0.0), name).to(torch.float32)
        return self._binary(forest, scores, has, base, name, table)

    def _binary(self, forest, scores, has, base, name, table):
        s0, s1, h0, h1 = scores[:, 0], scores[:, 1], has[:, 0], has[:, 1]
        mode = torch.full_like(s0, -1, dtype=torch.int64)
        if base.size == 2:
            # onnxruntime: once class 1 has a score, it becomes base[1] + score 0 and
            # class 0 its negation; otherwise each class adds its own base value.
            s0, s1 = (
                torch.where(h1, -(base[1] + s0), s0 + base[0]),
                torch.where(h1, base[1] + s0, s1 + base[1]),
            )
            two_columns = torch.ones_like(h1)
        else:
            if base.size == 1:
                s0 = s0 + base[0]
            else:
                mode = mode.fill_(3)
            two_columns = h1
        positive_score = torch.where(h1, s1, torch.where(h0, s0, 0.0))
        if len(forest.weight_ids) == 1:  # onnxruntime's "binary case"
            if forest.weights_all_positive:
                positive = positive_score > 0.5
                mode = torch.where(positive, 0, 1)
            else:
                positive = positive_score > 0
                mode = torch.where(positive, 2, 3)
        else:
            positive = positive_score > 0
        label = torch.where(positive, table[1], table[0])
        v0, v1 = torch.where(h0, s0, 0.0), torch.where(h1, s1, 0.0)
        both = post_transform(torch.stack([v0, v1], 1), name)
        single = binary_scores(v0, name, mode)
        return label, torch.where(two_columns.unsqueeze(1), both, single).to(torch.float32)
