"""Tree ensembles of the ``ai.onnx.ml`` domain: TreeEnsembleClassifier and
TreeEnsembleRegressor (versions 1 and 3), evaluated as tensor programs.

The node attributes are checked and turned once into flat node arrays
(:class:`~sonnx.operators.ml.tree_engine.TreeNodes`), which
:mod:`~sonnx.operators.ml.tree_engine` evaluates for every (sample, tree) pair at once and
aggregates over the trees; nothing loops per sample. The classifier's scores are then finished
exactly as onnxruntime does (its binary cases included). Piecewise constant in X, so no
gradient is recorded.
"""

from __future__ import annotations

import numpy as np
import torch

from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError
from sonnx.operators.ml.common import (
    POST_TRANSFORMS,
    MLOperator,
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
from sonnx.operators.ml.tree_engine import MODES, TreeEngine, TreeNodes, compare_dtype

__all__ = ["TreeEnsembleClassifier", "TreeEnsembleRegressor"]

_LEAF = "LEAF"


def tree_nodes(op: Operator, prefix: str, outputs: int) -> TreeNodes:
    """A TreeEnsembleClassifier's (``prefix`` class) or TreeEnsembleRegressor's (``prefix``
    target) nodes, checked, in (tree, node id) order; ``outputs`` classes or targets."""
    trees = np.asarray(ints(op, "nodes_treeids", required=True))
    ids = np.asarray(ints(op, "nodes_nodeids", required=True))
    modes = [m.decode() if isinstance(m, bytes) else str(m) for m in op.attr("nodes_modes") or []]
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
    unknown = sorted(set(modes) - {*MODES, _LEAF})
    if unknown:
        raise BadInputError(
            f"{op.op_type}: nodes_modes must be among {[*MODES, _LEAF]}, received {unknown}"
        )
    tree_ids, tree = np.unique(trees, return_inverse=True)
    order = np.lexsort((ids, tree))
    stride = ids.max() + 1
    keys = (tree * stride + ids)[order]
    if np.any(np.diff(keys) == 0):
        raise BadInputError(f"{op.op_type}: a (tree, node) id pair is given twice")
    leaf = np.array([m == _LEAF for m in modes])[order]
    mode = np.array([0 if m == _LEAF else MODES.index(m) for m in modes], dtype=np.int64)
    tree = tree[order]

    def position(tree_index: np.ndarray, node: np.ndarray, what: str) -> np.ndarray:
        wanted = tree_index * stride + node
        found = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
        if np.any((keys[found] != wanted) | (node < 0) | (node >= stride)):
            raise BadInputError(f"{op.op_type}: {what} names a node that does not exist")
        return found

    true_child, false_child = np.arange(len(keys)), np.arange(len(keys))
    for child, name in ((true_child, "nodes_truenodeids"), (false_child, "nodes_falsenodeids")):
        child_id = np.asarray(columns[name])[order]
        child[~leaf] = position(tree[~leaf], child_id[~leaf], name)
    is_child = np.zeros(len(keys), dtype=bool)
    is_child[true_child[~leaf]] = is_child[false_child[~leaf]] = True
    roots = np.flatnonzero(~is_child)
    if len(roots) != len(tree_ids) or len(np.unique(tree[roots])) != len(roots):
        raise BadInputError(
            f"{op.op_type}: every tree must have exactly one root (a node no branch leads "
            f"to); {len(tree_ids)} trees have {len(roots)} roots"
        )
    values, has = _leaf_weights(op, prefix, outputs, tree_ids, position, len(leaf))
    return TreeNodes(
        roots=roots[np.argsort(tree[roots])],
        feature=np.asarray(columns["nodes_featureids"])[order],
        threshold=np.asarray(columns["nodes_values"])[order],
        mode=mode[order],
        tracks=np.asarray(tracks)[order] != 0,
        true_child=true_child,
        false_child=false_child,
        leaf=leaf,
        values=values,
        has=has,
    )


def _leaf_weights(op, prefix, outputs, tree_ids, position, nodes) -> tuple[np.ndarray, np.ndarray]:
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
    tree_index = np.searchsorted(tree_ids, wtrees)
    if len(wtrees) and np.any(tree_ids[np.clip(tree_index, 0, len(tree_ids) - 1)] != wtrees):
        raise BadInputError(f"{op.op_type}: {prefix}_treeids names a tree that has no nodes")
    where = position(tree_index, wnodes, f"{prefix}_nodeids")
    values = np.zeros((nodes, outputs))
    has = np.zeros((nodes, outputs), dtype=bool)
    np.add.at(values, (where, wids), weights)
    has[where, wids] = True
    return values, has


class _TreeEnsembleBase(MLOperator):
    """The forest's engine, built on first use per device and compare type and kept (the
    attributes do not change)."""

    prefix = ""

    def forest(self, outputs: int, x: torch.Tensor) -> TreeEngine:
        """The engine for X's device and type, after checking X's shape against it."""
        cache = self.__dict__.setdefault("_forests", {})
        key = (x.device, compare_dtype(x.dtype))
        if key not in cache:
            if "_nodes" not in self.__dict__:
                self.__dict__["_nodes"] = tree_nodes(self, self.prefix, outputs)
            cache[key] = TreeEngine(self.__dict__["_nodes"], key[1], x.device, self.op_type)
        forest = cache[key]
        if x.shape[1] < forest.width:
            raise BadInputError(
                f"{self.op_type}: the trees read feature {forest.width - 1}, so X needs at "
                f"least {forest.width} features, received shape {tuple(x.shape)}"
            )
        return forest


class TreeEnsembleRegressor(_TreeEnsembleBase):
    """ai.onnx.ml TreeEnsembleRegressor: Y (N, n_targets) float32, the leaves' target weights
    aggregated over the trees by ``aggregate_function``, plus ``base_values`` (one per
    target), then ``post_transform``. A target no leaf reached gets 0 (plus its base)."""

    op_type = "TreeEnsembleRegressor"
    since_versions = (1, 3)
    prefix = "target"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        targets = int(self.attr("n_targets") or 1)
        x = feature_matrix(self, x).detach()
        forest = self.forest(targets, x)
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
    since_versions = (1, 3)
    prefix = "class"

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = int_labels(self, "classlabels_int64s")
        if len(labels) < 2:
            raise BadInputError(
                f"TreeEnsembleClassifier: classlabels_int64s must name at least two classes, "
                f"received {labels}"
            )
        x = feature_matrix(self, x).detach()
        forest = self.forest(len(labels), x)
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
        return self._binary(scores, has, base, name, table)

    def _binary(self, scores, has, base, name, table):
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
        if self.__dict__["_nodes"].has.any(0).sum() == 1:  # onnxruntime's "binary case"
            if (floats(self, "class_weights") >= 0).all():
                positive = positive_score > 0.5
                mode = torch.where(positive, 0, 1)
            else:
                positive = positive_score > 0
                mode = torch.where(positive, 2, 3)
        else:
            positive = positive_score > 0
        label = table[positive.to(torch.int64)]
        v0, v1 = torch.where(h0, s0, 0.0), torch.where(h1, s1, 0.0)
        both = post_transform(torch.stack([v0, v1], 1), name)
        single = binary_scores(v0, name, mode)
        return label, torch.where(two_columns.unsqueeze(1), both, single).to(torch.float32)
