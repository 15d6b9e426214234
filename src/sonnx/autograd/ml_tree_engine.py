"""The one engine behind the ``ai.onnx.ml`` tree operators (TreeEnsembleClassifier,
TreeEnsembleRegressor and TreeEnsemble): a forest given as flat node arrays
(:class:`TreeNodes`) becomes tensors once per device and compare type (:class:`TreeEngine`),
then every (row, tree) pair finds its leaf at once, rows going in chunks that stay in cache.

Hummingbird's "perfect tree traversal", in stages:

* the top levels of every tree (up to ``PADDED_LEVELS``) are padded into a complete binary
  tree (a leaf above the last level is repeated below itself). Level ``d`` lays the trees side
  by side, tree ``t`` owning positions ``t * 2**d`` to ``(t + 1) * 2**d - 1``, so the pair at
  position ``g`` moves to ``2 * g + went_true``: per level one look-up of the feature and the
  threshold in small tables, one gather from X and one compare, and no child pointers;
* deeper trees (boosted trees grow unevenly: 18 levels for 31 leaves) would make every pair
  walk the deepest branch, and padding them whole would take ``2**depth`` positions per tree.
  The pairs still at an interior node after the first stage go on, by themselves, through
  later stages of ``STAGE_LEVELS`` levels padded below the nodes where the stage before ended.

Chunks of rows run in torch's intra-op number of threads, each chunk's ops small enough to
stay in the thread that runs them (see :func:`_in_parallel`).

NaNs: when every interior node compares by one of LEQ, LT, GTE or GT, NaN already goes to the
false branch; a node that sends it to the true branch instead reads a copy of its feature in
which NaN is -inf (LEQ, LT) or +inf (GTE, GT), which every threshold lets through (checked).
Other forests look up each node's mode, missing-value flag and membership set.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from sonnx.errors import BadInputError

__all__ = ["MEMBER", "MODES", "TreeEngine", "TreeNodes"]

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
MEMBER = 6  # set membership, the code after MODES' (TreeEnsemble's numbering)
_COMPARE = (torch.le, torch.lt, torch.ge, torch.gt, torch.eq, torch.ne)
PADDED_LEVELS = 10  # the first stage's levels (at most)...
STAGE_LEVELS = 4  # ...the later stages'...
PADDED_POSITIONS = 1 << 22  # ...and no stage has more positions than this
# (row, tree) pairs per chunk: a few hundred kB per intermediate, and below torch's
# parallel grain size (32768), so that each op runs in the thread that calls it
CHUNK_ELEMENTS = 1 << 15
_REDUCE = {
    "SUM": lambda v: v.sum(1),
    "AVERAGE": lambda v: v.sum(1),
    "MIN": lambda v: v.amin(1),
    "MAX": lambda v: v.amax(1),
}


@dataclass
class TreeNodes:
    """A forest as flat node arrays (index = node). A leaf's two children are itself."""

    roots: np.ndarray  # (trees,) each tree's root node
    feature: np.ndarray  # (nodes,) int
    threshold: np.ndarray  # (nodes,) float64
    mode: np.ndarray  # (nodes,) a MODES index or MEMBER (leaves: any)
    tracks: np.ndarray  # (nodes,) bool: a NaN feature goes to the true branch
    true_child: np.ndarray  # (nodes,) int
    false_child: np.ndarray  # (nodes,) int
    leaf: np.ndarray  # (nodes,) bool
    values: np.ndarray  # (nodes, outputs) float64: each leaf's weight per output
    has: np.ndarray  # (nodes, outputs) bool: whether the leaf gives that output a weight
    members: np.ndarray | None = None  # (nodes, widest set) float64, NaN-padded


def compare_dtype(x_dtype: torch.dtype) -> torch.dtype:
    """The type X and the thresholds are compared in: float32 for float32 (and float16) X, as
    onnxruntime compares (it rounds double thresholds to X's type), float64 otherwise."""
    return torch.float32 if x_dtype in (torch.float16, torch.float32) else torch.float64


def forest_depth(nodes: TreeNodes, what: str) -> int:
    """The number of interior nodes on the longest root-to-leaf path; a cycle is refused."""
    frontier, depth = nodes.roots, 0
    while True:
        frontier = frontier[~nodes.leaf[frontier]]
        if not len(frontier):
            return depth
        depth += 1
        if depth > len(nodes.leaf):
            raise BadInputError(f"{what}: the nodes_*nodeids attributes form a cycle")
        frontier = np.unique(
            np.concatenate([nodes.true_child[frontier], nodes.false_child[frontier]])
        )


@dataclass
class _Tests:
    """What the nodes of one padded level test, as flat tensors by position; ``mode``,
    ``tracks`` and ``members`` only where the forest needs them looked up. ``packed`` holds
    feature and float32 threshold in one int64 (``feature << 32 | threshold bits``): one
    look-up instead of two, in the hot loop of float32 forests with one compare."""

    feature: torch.Tensor
    threshold: torch.Tensor
    mode: torch.Tensor | None
    tracks: torch.Tensor | None
    members: torch.Tensor | None
    packed: torch.Tensor | None


@dataclass
class _Stage:
    """Levels padded below a set of subtree roots (the first stage's: the trees' roots):
    root ``slot[node]`` owns positions ``slot * 2**d`` to ``(slot + 1) * 2**d - 1`` of level
    ``d``, and ``node_at`` names the node at each position below the last level."""

    levels: list[_Tests]
    node_at: torch.Tensor
    slot: torch.Tensor


class _Chunk(NamedTuple):
    """A chunk of rows after the padded levels: its rows' aggregated weights (rows, outputs),
    whether given (or None: always), and the (row * trees + tree) pairs still at an interior
    node with that node (or None: a single stage)."""

    total: torch.Tensor
    given: torch.Tensor | None
    pair: torch.Tensor | None
    node: torch.Tensor | None


def _cat(parts: list, empty: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts) if parts else empty


def _look_up(tests: _Tests, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The features (int64) of the nodes at ``position``, and their thresholds when the
    same look-up gives them."""
    if tests.packed is None:
        return tests.feature.index_select(0, position), None
    key = tests.packed.index_select(0, position)
    return key >> 32, key.to(torch.int32).view(torch.float32)


def _in_parallel(work, items, device: torch.device) -> list:
    """``[work(item) for item in items]``, the items shared among torch's intra-op thread
    count of threads on the CPU.

    Each chunk's ops are too small for torch to spread over its threads, which is the point:
    thousands of small ops each forked and joined over the cores would make each one wait
    for the slowest core (and for any other process using it); independent chunks in
    threads of their own (torch ops release the GIL) do not wait for each other."""
    items = list(items)
    workers = min(len(items), torch.get_num_threads() if device.type == "cpu" else 1)
    if workers <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(work, items))


class TreeEngine:
    """A forest's tensors on one device for one compare type, and its evaluation."""

    def __init__(self, nodes: TreeNodes, dtype: torch.dtype, device: torch.device, what: str):
        self.depth = forest_depth(nodes, what)
        self.trees = len(nodes.roots)
        self.dtype = dtype
        interior = ~nodes.leaf
        self.width = int(nodes.feature[interior].max()) + 1 if interior.any() else 0
        self.modes = sorted(set(nodes.mode[interior].tolist()))
        feature = np.where(nodes.leaf, 0, nodes.feature)
        tracked = interior & nodes.tracks
        self.mode, self.fill = self._one_compare(nodes, tracked)
        if self.fill is not None:
            feature = np.where(tracked, feature + self.width, feature)

        def put(a: np.ndarray, kind: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.as_tensor(np.ascontiguousarray(a), dtype=kind, device=device)

        def tests(at: np.ndarray) -> _Tests:
            general = self.mode is None
            packed = None
            if not general and dtype == torch.float32:
                bits = nodes.threshold[at].astype(np.float32).view(np.uint32)
                packed = put((feature[at] << 32) | bits.astype(np.int64))
            return _Tests(
                put(feature[at]),
                put(nodes.threshold[at], dtype),
                put(nodes.mode[at]) if general else None,
                put(tracked[at], torch.bool) if general and tracked.any() else None,
                put(nodes.members[at], dtype) if MEMBER in self.modes else None,
                packed,
            )

        # positions and nodes are int32 (half the traffic of int64); feature tables stay
        # int64, which gather wants before torch 2.8
        self.first = put(np.arange(self.trees), torch.int32)  # each tree's position at level 0
        self.stages = []
        roots, left = nodes.roots, self.depth
        while not self.stages or len(roots):  # the first stage may have no level (stumps)
            room = max(1, int(math.log2(max(1, PADDED_POSITIONS // len(roots)))))
            at, levels = roots, []
            for _ in range(min(left, STAGE_LEVELS if self.stages else PADDED_LEVELS, room)):
                levels.append(tests(at))
                at = np.stack([nodes.false_child[at], nodes.true_child[at]], 1).reshape(-1)
            slot = np.zeros(len(feature), dtype=np.int64)
            slot[roots] = np.arange(len(roots))
            self.stages.append(_Stage(levels, put(at, torch.int32), put(slot, torch.int32)))
            left -= len(levels)
            roots = np.unique(at[~nodes.leaf[at]])
        self.leaf = put(nodes.leaf, torch.bool)
        self.outputs = nodes.values.shape[1]
        used = nodes.has[nodes.leaf].any(0)
        self.used = put(np.flatnonzero(used))
        self.values = put(nodes.values[:, used], torch.float64)
        self.has = put(nodes.has[:, used], torch.bool)
        self.always_given = bool(nodes.has[nodes.leaf][:, used].all())

    def _one_compare(
        self, nodes: TreeNodes, tracked: np.ndarray
    ) -> tuple[int | None, float | None]:
        """The one mode every interior node compares by, if it is LEQ, LT, GTE or GT and the
        NaN stand-in takes every tracking node's true branch; and that stand-in (None: no node
        tracks NaN). (None, None) when nodes must look their tests up."""
        if not self.modes:
            return 0, None
        if len(self.modes) != 1 or self.modes[0] > 3:
            return None, None
        mode = self.modes[0]
        if not tracked.any():
            return mode, None
        fill = -math.inf if mode in (0, 1) else math.inf
        split = torch.as_tensor(nodes.threshold[tracked], dtype=self.dtype)  # host: a build check
        stand_in = torch.tensor(fill, dtype=self.dtype)  # host: compared with split only
        if not bool(_COMPARE[mode](stand_in, split).all()):
            return None, None
        return mode, fill

    def aggregate(self, x: torch.Tensor, function: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row of x (N, >= width features) and output: the leaf weights over every tree
        aggregated by ``function`` (SUM, AVERAGE, MIN or MAX; float64, 0 where no leaf gave
        that output a weight), and whether any leaf did.

        Interior nodes weigh 0 (SUM) or nothing (MIN, MAX), so the pairs the first stage
        leaves at an interior node add their leaf's weight after the later stages."""
        x = x[:, : self.width].to(self.dtype)
        if self.fill is not None:
            x = torch.cat([x, torch.where(x.isnan(), self.fill, x)], 1)
        x = x.contiguous()
        table = self.values
        if function in ("MIN", "MAX"):
            table = torch.where(self.has, table, math.inf if function == "MIN" else -math.inf)
        rows = max(1, CHUNK_ELEMENTS // max(1, self.trees))
        starts = range(0, x.shape[0], rows)
        parts = _in_parallel(
            lambda start: self._chunk(x, start, rows, table, function), starts, x.device
        )
        total = _cat([p.total for p in parts], table.new_zeros(0, table.shape[1]))
        given = torch.ones_like(total, dtype=torch.bool)
        if not self.always_given:
            given = _cat([p.given for p in parts], given)
        if len(self.stages) > 1:
            pair = _cat([p.pair for p in parts], self.first.new_zeros(0, dtype=torch.int64))
            node = _cat([p.node for p in parts], self.first.new_zeros(0))
            pair, leaf = self._stages_on(x, pair, node)
            self._add_leaves(total, given, pair // self.trees, leaf, table, function)
        total = torch.where(given, total, 0.0)
        if function == "AVERAGE":
            total = total / self.trees
        scores = total.new_zeros(x.shape[0], self.outputs)
        scores[:, self.used] = total
        has = torch.zeros_like(scores, dtype=torch.bool)
        has[:, self.used] = given & (self.trees > 0)
        return scores, has

    def _chunk(self, x: torch.Tensor, start: int, rows: int, table, function: str) -> _Chunk:
        """Rows ``start`` to ``start + rows`` of x through the padded levels."""
        node = self._first_stage(x[start : start + rows])
        flat = table.view(-1) if table.shape[1] == 1 else table  # 1-D: a faster index_select
        values = flat.index_select(0, node).view(-1, self.trees, table.shape[1])
        given = (
            None if self.always_given else self.has.index_select(0, node).view(values.shape).any(1)
        )
        pair = still = None
        if len(self.stages) > 1:
            pair = (~self.leaf.index_select(0, node)).nonzero().squeeze(1)
            still = node.index_select(0, pair)
            pair += start * self.trees
        return _Chunk(_REDUCE[function](values), given, pair, still)

    def _first_stage(self, x: torch.Tensor) -> torch.Tensor:
        """The node each row of x reaches in each tree after the first stage's levels, flat
        (rows * trees,) int32."""
        rows = x.shape[0]
        stage = self.stages[0]
        position = self.first.repeat(rows)
        for level in stage.levels:
            feature, split = _look_up(level, position)
            value = x.gather(1, feature.view(rows, self.trees)).view(-1)
            went_true = self._went_true(level, position, value, split)
            position = torch.add(went_true, position, alpha=2)
        return stage.node_at.index_select(0, position)

    def _stages_on(self, x: torch.Tensor, pair: torch.Tensor, node: torch.Tensor):
        """The (row * trees + tree) pairs the first stage left at an interior node, and the
        leaf each reaches through the later stages (in another order)."""
        flat = x.reshape(-1)
        done_pairs, done_nodes = [], []
        for stage in self.stages[1:]:
            pieces = zip(pair.split(CHUNK_ELEMENTS), node.split(CHUNK_ELEMENTS), strict=True)
            work = partial(self._stage, stage, flat, x.shape[1])
            node = _cat(_in_parallel(work, pieces, x.device), node)
            at_leaf = self.leaf.index_select(0, node)
            done_pairs.append(pair[at_leaf])
            done_nodes.append(node[at_leaf])
            pair, node = pair[~at_leaf], node[~at_leaf]
        return torch.cat(done_pairs), torch.cat(done_nodes)

    def _stage(self, stage: _Stage, flat: torch.Tensor, width: int, piece) -> torch.Tensor:
        """The node each of the (pair, node) ``piece``'s pairs reaches after ``stage``'s levels
        below its node."""
        pair, node = piece
        offset = pair // self.trees * width
        position = stage.slot.index_select(0, node)
        for level in stage.levels:
            feature, split = _look_up(level, position)
            value = flat.index_select(0, offset + feature)
            went_true = self._went_true(level, position, value, split)
            position = torch.add(went_true, position, alpha=2)
        return stage.node_at.index_select(0, position)

    def _add_leaves(self, total, any_given, row, leaf, table, function) -> None:
        """Aggregate the weights of the leaves the later stages' pairs reached into their
        rows."""
        values = table.index_select(0, leaf)
        if function in ("SUM", "AVERAGE"):
            total.index_add_(0, row, values)
        else:
            index = row.unsqueeze(1).expand_as(values)
            total.scatter_reduce_(0, index, values, "amin" if function == "MIN" else "amax")
        if not self.always_given:
            count = torch.zeros_like(total).index_add_(
                0, row, self.has.index_select(0, leaf).double()
            )
            any_given |= count > 0

    def _went_true(self, tests: _Tests, index, value, split=None) -> torch.Tensor:
        """Whether each node at ``index`` sends its ``value`` down the true branch, as 1 or 0
        in index's type (an add of a bool would convert it first); ``split``: the nodes'
        thresholds if already looked up."""
        if split is None:
            split = tests.threshold.index_select(0, index)
        if self.mode is not None:
            return _COMPARE[self.mode](value, split, out=torch.empty_like(index))
        mode = tests.mode.index_select(0, index)
        chosen = torch.zeros_like(value, dtype=torch.bool)
        for code in self.modes:
            if code == MEMBER:
                sets = tests.members.index_select(0, index)  # (pairs, widest set)
                test = (value.unsqueeze(-1) == sets).any(-1)
            else:
                test = _COMPARE[code](value, split)
            chosen = torch.where(mode == code, test, chosen)
        if tests.tracks is not None:
            chosen = chosen | (tests.tracks.index_select(0, index) & value.isnan())
        return chosen.to(index.dtype)
