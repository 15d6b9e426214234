"""Classical machine-learning operators of the ``ai.onnx.ml`` domain: Binarizer,
ArrayFeatureExtractor and TreeEnsemble.

TreeEnsemble runs on the same engine as TreeEnsembleClassifier and TreeEnsembleRegressor
(:mod:`~sonnx.operators.ml.tree_engine`): every (sample, tree) pair goes down its tree at once,
never one sample at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator
from sonnx.engine.singa_functions import (
    LIKE_X,
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.ml.common import FEATURE_TYPES, MLOperator, post_transform
from sonnx.operators.ml.tree_engine import MEMBER, TreeEngine, TreeNodes, compare_dtype
from sonnx.tensor import Tensor

__all__ = [
    "ArrayFeatureExtractor",
    "Binarizer",
    "TreeEnsemble",
    "array_feature_extractor",
    "binarizer",
    "tree_ensemble",
]

_TREE_TYPES = (torch.float16, torch.float32, torch.float64)
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
POST_TRANSFORMS = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}


class Binarizer(MLOperator):
    """ai.onnx.ml Binarizer: 1 where ``x > threshold``, else 0, in x's type (a step function:
    its gradient is zero wherever it exists, so none is recorded)."""

    op_type = "Binarizer"
    since_versions = (1,)

    singa_functions = (
        SingaFunction(
            "binarizer",
            "1 where x > threshold, else 0, in x's element type (ai.onnx.ml Binarizer).",
            inputs=(Input("x", "a float32, float64, int32 or int64 tensor."),),
            returns=LIKE_X,
            keywords=(Keyword("threshold", "the value to compare with.", convert="float"),),
            raises=(("BadInputError", "``x`` has another dtype."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in FEATURE_TYPES:
            raise BadInputError(
                f"Binarizer: input X must be float32, float64, int32 or int64, received "
                f"{dtypes.dtype_name(x.dtype)}"
            )
        return (x > float(self.attr("threshold"))).to(x.dtype)


class ArrayFeatureExtractor(MLOperator):
    """ai.onnx.ml ArrayFeatureExtractor: the last-axis elements of X at the flattened indices Y.

    The result has shape ``X.shape[:-1] + (len(Y),)``; a 1-D X gives one row ``(1, len(Y))``,
    as onnxruntime does. Differentiable in X.
    """

    op_type = "ArrayFeatureExtractor"
    since_versions = (1,)
    moves_elements_only = True
    # The indices are data, as Gather's are.
    parameterising_inputs = frozenset()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0:
            raise BadInputError("ArrayFeatureExtractor: input X must have at least 1 dimension")
        if y.dtype != torch.int64:
            raise BadInputError(
                f"ArrayFeatureExtractor: input Y must be int64 indices, received "
                f"{dtypes.dtype_name(y.dtype)}"
            )
        index = y.reshape(-1)
        size = x.shape[-1]
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
            raise BadInputError(
                f"ArrayFeatureExtractor: indices Y must be in [0, {size - 1}] (X's last "
                f"dimension), received {index.tolist()}"
            )
        picked = x.index_select(-1, index)
        return picked.reshape(1, -1) if x.dim() == 1 else picked


class TreeEnsemble(MLOperator):
    """ai.onnx.ml TreeEnsemble (opset 5): X (N, F) -> (N, n_targets) in X's type.

    Interior nodes compare feature ``nodes_featureids`` with ``nodes_splits`` by
    ``nodes_modes`` (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 set membership; the sets are the
    NaN-delimited groups of ``membership_values``, in node order); a NaN feature goes to the
    true branch where ``nodes_missing_value_tracks_true`` says so. Each tree's leaf adds
    ``leaf_weights`` to target ``leaf_targetids``, aggregated by ``aggregate_function``
    (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX), then ``post_transform`` (0 NONE, 1 SOFTMAX, 2 LOGISTIC,
    3 SOFTMAX_ZERO, 4 PROBIT), the same transform as every other ai.onnx.ml operator applies
    (:func:`~sonnx.operators.ml.common.post_transform`: onnxruntime's, so a single target is changed
    only by PROBIT). Piecewise constant in X, so no gradient is recorded.
    """

    op_type = "TreeEnsemble"
    since_versions = (5,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _TREE_TYPES:
            raise BadInputError(
                f"TreeEnsemble: input X must be float16, float32 or float64, received "
                f"{dtypes.dtype_name(x.dtype)}"
            )
        if x.dim() != 2:
            raise BadInputError(
                f"TreeEnsemble: input X must be 2-D (N, features), received shape {tuple(x.shape)}"
            )
        nodes = self._nodes()
        features = nodes.feature[~nodes.leaf]
        if features.size and not 0 <= features.min() <= features.max() < x.shape[1]:
            raise BadInputError(
                f"TreeEnsemble: X has {x.shape[1]} features but nodes_featureids refers to "
                f"features {sorted(set(features.tolist()))}"
            )
        function = int(self.attr("aggregate_function"))
        if function not in AGGREGATES:
            raise BadInputError(
                f"TreeEnsemble: attribute aggregate_function must be one of {AGGREGATES}, "
                f"received {function}"
            )
        engine = self._engine(nodes, x)
        scores, given = engine.aggregate(x.detach(), AGGREGATES[function])
        if AGGREGATES[function] in ("MIN", "MAX"):
            # a target no leaf reaches keeps the type's largest (MIN) or smallest (MAX)
            # value, as onnx.reference starts from them
            info = torch.finfo(x.dtype)
            start = info.max if AGGREGATES[function] == "MIN" else info.min
            scores = torch.where(given, scores, start)
        return self._post_transform(scores).to(x.dtype)

    def _engine(self, nodes: TreeNodes, x: torch.Tensor) -> TreeEngine:
        """The engine for X's device and compare type, built on first use and kept."""
        key = (x.device, compare_dtype(x.dtype))
        engines = self.__dict__.setdefault("_engines", {})
        if key not in engines:
            engines[key] = TreeEngine(nodes, key[1], x.device, self.op_type)
        return engines[key]

    def _nodes(self) -> TreeNodes:
        """The forest's nodes, checked once: interior nodes first, then leaf j as node
        ``len(nodes_featureids) + j``."""
        if "_tree_nodes" not in self.__dict__:
            self.__dict__["_tree_nodes"] = _tree_nodes(self)
        return self.__dict__["_tree_nodes"]

    def _post_transform(self, scores: torch.Tensor) -> torch.Tensor:
        transform = int(self.attr("post_transform"))
        name = POST_TRANSFORMS.get(transform)
        if name is None:
            raise BadInputError(
                f"TreeEnsemble: attribute post_transform must be one of {POST_TRANSFORMS}, "
                f"received {transform}"
            )
        return post_transform(scores, name)


def _tree_nodes(op: TreeEnsemble) -> TreeNodes:
    """A TreeEnsemble's nodes and leaves as one checked :class:`TreeNodes`."""
    features = np.asarray(_ints(op, "nodes_featureids"), dtype=np.int64)
    count = len(features)
    columns = {
        name: np.asarray(_ints(op, name), dtype=np.int64)
        for name in (
            "nodes_truenodeids",
            "nodes_trueleafs",
            "nodes_falsenodeids",
            "nodes_falseleafs",
        )
    }
    modes = _ints(op, "nodes_modes")
    tracks = op.attr("nodes_missing_value_tracks_true")
    tracks = [0] * count if tracks is None or len(tracks) == 0 else [int(t) for t in tracks]
    splits = _floats(op, "nodes_splits")
    lengths = {name: len(v) for name, v in columns.items()}
    lengths.update(
        nodes_modes=len(modes),
        nodes_missing_value_tracks_true=len(tracks),
        nodes_splits=len(splits),
    )
    if any(n != count for n in lengths.values()):
        raise BadInputError(
            f"TreeEnsemble: every nodes_* attribute must have one value per node "
            f"({count}, as nodes_featureids), received lengths {lengths}"
        )
    if any(not 0 <= m <= MEMBER for m in modes):
        raise BadInputError(
            f"TreeEnsemble: attribute nodes_modes must hold values 0 to 6, received {modes}"
        )
    members = _member_sets(op, modes)
    targets = _ints(op, "leaf_targetids")
    weights = _floats(op, "leaf_weights")
    if len(targets) != len(weights):
        raise BadInputError(
            f"TreeEnsemble: attributes leaf_targetids and leaf_weights must have one value "
            f"per leaf, received {len(targets)} and {len(weights)}"
        )
    n_targets = op.attr("n_targets")
    n_targets = max(targets, default=-1) + 1 if n_targets is None else int(n_targets)
    if targets and not 0 <= min(targets) <= max(targets) < n_targets:
        raise BadInputError(
            f"TreeEnsemble: attribute leaf_targetids must be in [0, {n_targets - 1}] "
            f"(n_targets={n_targets}), received {targets}"
        )
    children = []
    for side in ("true", "false"):
        ids, leafs = columns[f"nodes_{side}nodeids"], columns[f"nodes_{side}leafs"] != 0
        _check_branches(ids[~leafs], count, "node")
        _check_branches(ids[leafs], len(targets), "leaf")
        children.append(np.where(leafs, count + ids, ids))
    roots = _ints(op, "tree_roots")
    if not roots or any(not 0 <= r < max(count, 1) for r in roots):
        raise BadInputError(
            f"TreeEnsemble: attribute tree_roots must name nodes in [0, {count - 1}], "
            f"received {roots}"
        )
    total = count + len(targets)
    values = np.zeros((total, n_targets))
    has = np.zeros((total, n_targets), dtype=bool)
    values[count + np.arange(len(targets)), targets] = weights
    has[count + np.arange(len(targets)), targets] = True
    itself = np.arange(count, total)
    return TreeNodes(
        roots=np.asarray(roots, dtype=np.int64),
        feature=np.concatenate([features, np.zeros(len(targets), np.int64)]),
        threshold=np.concatenate([splits, np.zeros(len(targets))]),
        mode=np.concatenate([modes, np.zeros(len(targets), np.int64)]).astype(np.int64),
        tracks=np.concatenate([np.asarray(tracks) != 0, np.zeros(len(targets), bool)]),
        true_child=np.concatenate([children[0], itself]),
        false_child=np.concatenate([children[1], itself]),
        leaf=np.arange(total) >= count,
        values=values,
        has=has,
        members=np.concatenate([members, np.full((len(targets), members.shape[1]), np.nan)]),
    )


def _check_branches(ids: np.ndarray, count: int, what: str) -> None:
    if ids.size and not 0 <= ids.min() <= ids.max() < count:
        bad = int(ids.max()) if ids.max() >= count else int(ids.min())
        if what == "node":
            raise BadInputError(
                f"TreeEnsemble: a branch leads to node {bad}, not in [0, {count - 1}]"
            )
        raise BadInputError(
            f"TreeEnsemble: a branch leads to leaf {bad}, but only {count} leaves are given"
        )


def _ints(op: Operator, name: str) -> list[int]:
    value = op.attr(name)
    if value is None:
        raise BadInputError(f"{op.op_type}: attribute {name} is required")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _floats(op: Operator, name: str) -> np.ndarray:
    value = op.attr(name)
    if value is None:
        raise BadInputError(f"{op.op_type}: attribute {name} is required")
    return np.asarray(value, dtype=np.float64).reshape(-1)


def _member_sets(op: Operator, modes: list[int]) -> np.ndarray:
    """Each node's membership set as a NaN-padded row (nodes, widest set); NaN equals nothing.

    ``membership_values`` lists the sets of the BRANCH_MEMBER nodes in node order, each ended
    by a NaN.
    """
    values = op.attr("membership_values")
    groups: list[list[float]] = [[]]
    for v in [] if values is None else np.asarray(values, dtype=np.float64).reshape(-1):
        if math.isnan(v):
            groups.append([])
        else:
            groups[-1].append(float(v))
    if not groups[-1]:
        groups.pop()
    member_nodes = [i for i, m in enumerate(modes) if m == MEMBER]
    if len(groups) != len(member_nodes):
        raise BadInputError(
            f"TreeEnsemble: membership_values must hold one NaN-terminated set per set "
            f"membership node ({len(member_nodes)}), received {len(groups)} sets"
        )
    width = max((len(g) for g in groups), default=0)
    table = np.full((len(modes), max(width, 1)), math.nan)
    for node, group in zip(member_nodes, groups, strict=True):
        table[node, : len(group)] = group
    return table


# ---- lower-case functions ---------------------------------------------------------------------


def array_feature_extractor(x: Tensor, indices: Tensor | Sequence[int]) -> Tensor:
    """The elements of x's last axis at ``indices`` (int64), as ``x.shape[:-1] + (k,)``.

    :param x: a tensor of at least 1 axis.
    :param indices: the k positions in the last axis (a tensor or a sequence of ints).
    :returns: the selected elements (ai.onnx.ml ArrayFeatureExtractor).
    :raises BadInputError: ``x`` is 0-D, ``indices`` is not int64, or an index is out of range.
    """
    if not isinstance(indices, Tensor):
        indices = Tensor(
            data=np.asarray(indices, dtype=np.int64), device=x.device, requires_grad=False
        )
    return ArrayFeatureExtractor()(x, indices)


def tree_ensemble(
    x: Tensor,
    tree_roots: Sequence[int],
    nodes_featureids: Sequence[int],
    nodes_modes: Sequence[int],
    nodes_splits: Sequence[float],
    nodes_truenodeids: Sequence[int],
    nodes_trueleafs: Sequence[int],
    nodes_falsenodeids: Sequence[int],
    nodes_falseleafs: Sequence[int],
    leaf_targetids: Sequence[int],
    leaf_weights: Sequence[float],
    n_targets: int | None = None,
    aggregate_function: int = 1,
    post_transform: int = 0,
    membership_values: Sequence[float] | None = None,
    nodes_missing_value_tracks_true: Sequence[int] | None = None,
) -> Tensor:
    """Evaluate a tree ensemble on x (N, F); see :class:`TreeEnsemble` for the encoding.

    The threshold, weight and membership tensors take x's element type, as onnxruntime wants.

    :param x: a float (N, F) tensor of features.
    :param tree_roots: the index of each tree's root node.
    :param nodes_featureids: the feature each interior node compares.
    :param nodes_modes: each node's comparison (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 set
        membership).
    :param nodes_splits: each node's threshold.
    :param nodes_truenodeids: where each node goes when the comparison holds.
    :param nodes_trueleafs: 1 where that target is a leaf, 0 a node.
    :param nodes_falsenodeids: where each node goes otherwise.
    :param nodes_falseleafs: 1 where that target is a leaf, 0 a node.
    :param leaf_targetids: the target each leaf adds to.
    :param leaf_weights: the value each leaf adds.
    :param n_targets: the number of outputs per row.
    :param aggregate_function: how leaves combine across trees (0 average, 1 sum, 2 min, 3 max).
    :param post_transform: applied to the result (0 none, 1 softmax, 2 logistic, 3 softmax
        zero, 4 probit).
    :param membership_values: the sets of membership (mode 5) nodes, NaN-separated.
    :param nodes_missing_value_tracks_true: 1 where a NaN feature takes the true branch.
    :returns: the (N, n_targets) predictions, of ``x``'s dtype.
    :raises BadInputError: ``x`` is not a 2-D float tensor, a node reads a feature ``x`` lacks,
        or ``aggregate_function`` is unknown.
    """
    kind = dtypes.torch_to_numpy(x.dtype)

    def floats(values: Sequence[float] | None) -> Any:
        return None if values is None else np.asarray(values, dtype=kind)

    return TreeEnsemble(
        tree_roots=[int(v) for v in tree_roots],
        nodes_featureids=[int(v) for v in nodes_featureids],
        nodes_modes=np.asarray(nodes_modes, dtype=np.uint8),
        nodes_splits=floats(nodes_splits),
        nodes_truenodeids=[int(v) for v in nodes_truenodeids],
        nodes_trueleafs=[int(v) for v in nodes_trueleafs],
        nodes_falsenodeids=[int(v) for v in nodes_falsenodeids],
        nodes_falseleafs=[int(v) for v in nodes_falseleafs],
        leaf_targetids=[int(v) for v in leaf_targetids],
        leaf_weights=floats(leaf_weights),
        n_targets=None if n_targets is None else int(n_targets),
        aggregate_function=int(aggregate_function),
        post_transform=int(post_transform),
        membership_values=floats(membership_values),
        nodes_missing_value_tracks_true=(
            None
            if nodes_missing_value_tracks_true is None
            else [int(v) for v in nodes_missing_value_tracks_true]
        ),
    )(x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def binarizer(x: Tensor, threshold: float = 0.0) -> Tensor:
    """1 where x > threshold, else 0, in x's element type (ai.onnx.ml Binarizer).

    :param x: a float32, float64, int32 or int64 tensor.
    :param threshold: the value to compare with.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` has another dtype.
    """
    return Binarizer(threshold=float(threshold))(x)
