"""Classical machine-learning operators of the ``ai.onnx.ml`` domain: Binarizer,
ArrayFeatureExtractor and TreeEnsemble.

TreeEnsemble walks every (sample, tree) pair down its tree at once: one step per tree level
gathers each pair's current node and picks its true or false child, so the loop runs as many
times as the deepest tree is deep, never once per sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.autograd.operator import Operator
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

__all__ = [
    "ArrayFeatureExtractor",
    "Binarizer",
    "TreeEnsemble",
    "array_feature_extractor",
    "binarizer",
    "tree_ensemble",
]

ML_DOMAIN = "ai.onnx.ml"
_NUMBERS = (torch.float32, torch.float64, torch.int32, torch.int64)
_TREE_TYPES = (torch.float16, torch.float32, torch.float64)
# nodes_modes values: LEQ, LT, GTE, GT, EQ, NEQ, MEMBER (index = mode).
_MEMBER = 6
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
POST_TRANSFORMS = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}


class Binarizer(Operator):
    """ai.onnx.ml Binarizer: 1 where ``x > threshold``, else 0, in x's type (a step function:
    its gradient is zero wherever it exists, so none is recorded)."""

    op_type = "Binarizer"
    domain = ML_DOMAIN

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _NUMBERS:
            raise BadInputError(
                f"Binarizer: input X must be float32, float64, int32 or int64, received {x.dtype}"
            )
        return (x > float(self.attr("threshold"))).to(x.dtype)


class ArrayFeatureExtractor(Operator):
    """ai.onnx.ml ArrayFeatureExtractor: the last-axis elements of X at the flattened indices Y.

    The result has shape ``X.shape[:-1] + (len(Y),)``; a 1-D X gives one row ``(1, len(Y))``,
    as onnxruntime does. Differentiable in X.
    """

    op_type = "ArrayFeatureExtractor"
    domain = ML_DOMAIN

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0:
            raise BadInputError("ArrayFeatureExtractor: input X must have at least 1 dimension")
        if y.dtype != torch.int64:
            raise BadInputError(
                f"ArrayFeatureExtractor: input Y must be int64 indices, received {y.dtype}"
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


class TreeEnsemble(Operator):
    """ai.onnx.ml TreeEnsemble (opset 5): X (N, F) -> (N, n_targets) in X's type.

    Interior nodes compare feature ``nodes_featureids`` with ``nodes_splits`` by
    ``nodes_modes`` (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 set membership; the sets are the
    NaN-delimited groups of ``membership_values``, in node order); a NaN feature goes to the
    true branch where ``nodes_missing_value_tracks_true`` says so. Each tree's leaf adds
    ``leaf_weights`` to target ``leaf_targetids``, aggregated by ``aggregate_function``
    (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX), then ``post_transform`` (0 NONE, 1 SOFTMAX, 2 LOGISTIC,
    3 SOFTMAX_ZERO, 4 PROBIT). Piecewise constant in X, so no gradient is recorded.
    """

    op_type = "TreeEnsemble"
    domain = ML_DOMAIN

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _TREE_TYPES:
            raise BadInputError(
                f"TreeEnsemble: input X must be float16, float32 or float64, received {x.dtype}"
            )
        if x.dim() != 2:
            raise BadInputError(
                f"TreeEnsemble: input X must be 2-D (N, features), received shape {tuple(x.shape)}"
            )
        nodes = _Nodes(self, x.device)
        leaf_targets = _ints(self, "leaf_targetids")
        leaf_weights = _floats(self, "leaf_weights", x.device)
        if len(leaf_targets) != leaf_weights.numel():
            raise BadInputError(
                f"TreeEnsemble: attributes leaf_targetids and leaf_weights must have one value "
                f"per leaf, received {len(leaf_targets)} and {leaf_weights.numel()}"
            )
        n_targets = self.attr("n_targets")
        n_targets = max(leaf_targets, default=-1) + 1 if n_targets is None else int(n_targets)
        if leaf_targets and not 0 <= min(leaf_targets) <= max(leaf_targets) < n_targets:
            raise BadInputError(
                f"TreeEnsemble: attribute leaf_targetids must be in [0, {n_targets - 1}] "
                f"(n_targets={n_targets}), received {leaf_targets}"
            )
        features = nodes.features.tolist()
        if features and not 0 <= min(features) <= max(features) < x.shape[1]:
            raise BadInputError(
                f"TreeEnsemble: X has {x.shape[1]} features but nodes_featureids refers to "
                f"features {sorted(set(features))}"
            )
        leaves = nodes.leaves(x.detach().to(torch.float64), len(leaf_targets))
        weights = leaf_weights[leaves]
        targets = torch.tensor(leaf_targets, dtype=torch.int64, device=x.device)[leaves]
        scores = self._aggregate(weights, targets, n_targets, x.dtype)
        return self._post_transform(scores).to(x.dtype)

    def _aggregate(
        self, weights: torch.Tensor, targets: torch.Tensor, n_targets: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """Combine each sample's tree outputs (N, trees) into (N, n_targets).

        MIN and MAX start from the type's largest and smallest values (a target no leaf
        reaches keeps them), as ``onnx.reference`` does.
        """
        function = int(self.attr("aggregate_function"))
        if function not in AGGREGATES:
            raise BadInputError(
                f"TreeEnsemble: attribute aggregate_function must be one of {AGGREGATES}, "
                f"received {function}"
            )
        shape = (weights.shape[0], n_targets)
        if AGGREGATES[function] in ("SUM", "AVERAGE"):
            total = weights.new_zeros(shape).scatter_add(1, targets, weights)
            return total / weights.shape[1] if AGGREGATES[function] == "AVERAGE" else total
        info = torch.finfo(dtype)
        start = info.max if AGGREGATES[function] == "MIN" else info.min
        reduce = "amin" if AGGREGATES[function] == "MIN" else "amax"
        return weights.new_full(shape, start).scatter_reduce(1, targets, weights, reduce)

    def _post_transform(self, scores: torch.Tensor) -> torch.Tensor:
        transform = int(self.attr("post_transform"))
        name = POST_TRANSFORMS.get(transform)
        if name is None:
            raise BadInputError(
                f"TreeEnsemble: attribute post_transform must be one of {POST_TRANSFORMS}, "
                f"received {transform}"
            )
        if name == "SOFTMAX":
            return torch.softmax(scores, dim=1)
        if name == "LOGISTIC":
            return torch.sigmoid(scores)
        if name == "SOFTMAX_ZERO":  # a softmax over the non-zero scores; zeros stay zero
            nonzero = scores != 0
            peak = scores.masked_fill(~nonzero, -math.inf).amax(dim=1, keepdim=True)
            exp = torch.where(nonzero, torch.exp(scores - peak.nan_to_num(neginf=0.0)), 0.0)
            return exp / exp.sum(dim=1, keepdim=True).clamp(min=torch.finfo(exp.dtype).tiny)
        if name == "PROBIT":
            return math.sqrt(2.0) * torch.special.erfinv(2.0 * scores - 1.0)
        return scores


class _Nodes:
    """A TreeEnsemble's interior nodes as tensors, checked against each other."""

    def __init__(self, op: TreeEnsemble, device: torch.device) -> None:
        self.features = torch.tensor(
            _ints(op, "nodes_featureids"), dtype=torch.int64, device=device
        )
        count = self.features.numel()
        columns = {
            name: _ints(op, name)
            for name in (
                "nodes_truenodeids",
                "nodes_falsenodeids",
                "nodes_trueleafs",
                "nodes_falseleafs",
            )
        }
        modes = _ints(op, "nodes_modes")
        tracks = op.attr("nodes_missing_value_tracks_true")
        tracks = [0] * count if tracks is None or len(tracks) == 0 else [int(t) for t in tracks]
        splits = _floats(op, "nodes_splits", device)
        lengths = {name: len(v) for name, v in columns.items()}
        lengths.update(
            nodes_modes=len(modes),
            nodes_missing_value_tracks_true=len(tracks),
            nodes_splits=splits.numel(),
        )
        if any(n != count for n in lengths.values()):
            raise BadInputError(
                f"TreeEnsemble: every nodes_* attribute must have one value per node "
                f"({count}, as nodes_featureids), received lengths {lengths}"
            )
        if any(not 0 <= m <= _MEMBER for m in modes):
            raise BadInputError(
                f"TreeEnsemble: attribute nodes_modes must hold values 0 to 6, received {modes}"
            )
        self.true_ids, self.false_ids, true_leafs, false_leafs = (
            torch.tensor(columns[name], dtype=torch.int64, device=device) for name in columns
        )
        self.true_leafs, self.false_leafs = true_leafs != 0, false_leafs != 0
        for ids, leafs in ((self.true_ids, self.true_leafs), (self.false_ids, self.false_leafs)):
            inner = ids[~leafs]
            if inner.numel() and not 0 <= int(inner.min()) <= int(inner.max()) < count:
                bad = int(inner.max()) if int(inner.max()) >= count else int(inner.min())
                raise BadInputError(
                    f"TreeEnsemble: a branch leads to node {bad}, not in [0, {count - 1}]"
                )
        self.modes = torch.tensor(modes, dtype=torch.int64, device=device)
        self.tracks = torch.tensor(tracks, device=device) != 0
        self.splits = splits.to(torch.float64)
        self.members = _member_sets(op, modes, device)
        self.roots = _ints(op, "tree_roots")
        if not self.roots or any(not 0 <= r < max(count, 1) for r in self.roots):
            raise BadInputError(
                f"TreeEnsemble: attribute tree_roots must name nodes in [0, {count - 1}], "
                f"received {self.roots}"
            )

    def leaves(self, x: torch.Tensor, n_leaves: int) -> torch.Tensor:
        """The leaf index each sample of x (N, F) reaches in each tree: (N, trees)."""
        roots = torch.tensor(self.roots, dtype=torch.int64, device=x.device)
        # A root whose two branches are the same leaf is a tree made of that one leaf.
        is_leaf = (
            self.true_leafs[roots]
            & self.false_leafs[roots]
            & (self.true_ids[roots] == self.false_ids[roots])
        )
        index = torch.where(is_leaf, self.true_ids[roots], roots).expand(x.shape[0], -1)
        is_leaf = is_leaf.expand(x.shape[0], -1)
        for _ in range(self.features.numel() + 1):
            if bool(is_leaf.all()):
                break
            node = torch.where(is_leaf, 0, index)
            value = x.gather(1, self.features[node])
            branch = self._compare(node, value)
            index = torch.where(
                is_leaf, index, torch.where(branch, self.true_ids[node], self.false_ids[node])
            )
            is_leaf = is_leaf | torch.where(branch, self.true_leafs[node], self.false_leafs[node])
        else:
            raise BadInputError("TreeEnsemble: the nodes_*nodeids attributes form a cycle")
        if index.numel() and not 0 <= int(index.min()) <= int(index.max()) < n_leaves:
            raise BadInputError(
                f"TreeEnsemble: a branch leads to leaf {int(index.max())}, but only "
                f"{n_leaves} leaves are given"
            )
        return index

    def _compare(self, node: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        split = self.splits[node]
        tests = [
            value <= split,
            value < split,
            value >= split,
            value > split,
            value == split,
            value != split,
            (value.unsqueeze(-1) == self.members[node]).any(-1),
        ]
        chosen = torch.stack(tests, -1).gather(-1, self.modes[node].unsqueeze(-1)).squeeze(-1)
        return chosen | (self.tracks[node] & value.isnan())


def _ints(op: Operator, name: str) -> list[int]:
    value = op.attr(name)
    if value is None:
        raise BadInputError(f"{op.op_type}: attribute {name} is required")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _floats(op: Operator, name: str, device: torch.device) -> torch.Tensor:
    value = op.attr(name)
    if value is None:
        raise BadInputError(f"{op.op_type}: attribute {name} is required")
    return torch.as_tensor(np.asarray(value, dtype=np.float64).reshape(-1), device=device)


def _member_sets(op: Operator, modes: list[int], device: torch.device) -> torch.Tensor:
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
    member_nodes = [i for i, m in enumerate(modes) if m == _MEMBER]
    if len(groups) != len(member_nodes):
        raise BadInputError(
            f"TreeEnsemble: membership_values must hold one NaN-terminated set per set "
            f"membership node ({len(member_nodes)}), received {len(groups)} sets"
        )
    width = max((len(g) for g in groups), default=0)
    # host: filled row by row on the host, then moved to ``device`` in one copy
    table = torch.full((len(modes), max(width, 1)), math.nan, dtype=torch.float64)
    for node, group in zip(member_nodes, groups, strict=True):
        table[node, : len(group)] = torch.tensor(group, dtype=torch.float64)  # host: as above
    return table.to(device)


# ---- lower-case functions ---------------------------------------------------------------------


def binarizer(x: Tensor, threshold: float = 0.0) -> Tensor:
    """1 where x > threshold, else 0, in x's element type."""
    return Binarizer(threshold=float(threshold))(x)


def array_feature_extractor(x: Tensor, indices: Tensor | Sequence[int]) -> Tensor:
    """The elements of x's last axis at ``indices`` (int64), as ``x.shape[:-1] + (k,)``."""
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
