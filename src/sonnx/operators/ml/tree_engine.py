"""The one engine behind the ``ai.onnx.ml`` tree operators (TreeEnsembleClassifier,
TreeEnsembleRegressor and TreeEnsemble): a forest given as flat node arrays
(:class:`TreeNodes`) becomes tensors once per device and compare type (:class:`TreeEngine`),
then every (row, tree) pair finds its leaf at once, rows going in chunks that stay in cache.

Hummingbird's "perfect tree traversal", in stages:

* the top levels of every tree (up to ``PADDED_LEVELS``, fewer if few pairs would reach the
  deeper ones: :func:`_first_levels`) are padded into a complete binary tree (a leaf above the
  last level is repeated below itself, its copies always taking the true branch so that the
  pairs at a leaf keep reading one table entry). Level ``d`` lays the trees side by side, tree
  ``t`` owning positions ``t * 2**d`` to ``(t + 1) * 2**d - 1``, so the pair at position
  ``g`` moves to ``2 * g + went_true``: per level one look-up of the feature and the threshold
  in small tables (none at level 0: one root per tree), one gather from X and one compare,
  and no child pointers;
* deeper trees (boosted trees grow unevenly: 18 levels for 31 leaves) would make every pair
  walk the deepest branch, and padding them whole would take ``2**depth`` positions per tree.
  The pairs still at an interior node after the first stage go on, by themselves, through
  later stages of ``STAGE_LEVELS`` levels padded below the nodes where the stage before ended.
  Each stage adds the weights of the nodes its pairs reached; only leaves weigh (as in
  onnxruntime, which ignores weights given to an interior node).

Chunks of rows run in torch's intra-op number of threads, each chunk's ops small enough to
stay in the thread that runs them (see :func:`_in_parallel`). A chunk's ops are then so small
that the cost of each torch call (argument parsing, dispatch, the GIL the threads share)
weighs as much as its work, so the levels write into buffers each thread reuses from chunk to
chunk (:class:`_Buffers`): five or six calls per level, none of them an allocation.

NaNs: when every interior node compares by one of LEQ, LT, GTE or GT, NaN already goes to the
false branch; a node that sends it to the true branch instead reads a copy of its feature in
which NaN is -inf (LEQ, LT) or +inf (GTE, GT), which every threshold lets through (checked).
Other forests look up each node's mode, missing-value flag and membership set.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from sonnx.engine.tracing import NotTraceableError, value_checks
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


def interior_levels(nodes: TreeNodes, what: str) -> list[np.ndarray]:
    """The distinct interior nodes at each depth, the roots' first: as many levels as the
    longest root-to-leaf path has interior nodes. A cycle is refused."""
    levels, frontier = [], nodes.roots
    last = np.zeros(len(nodes.leaf), dtype=np.int64)  # where each child was last met
    while True:
        frontier = frontier[~nodes.leaf[frontier]]
        if not len(frontier):
            return levels
        levels.append(frontier)
        if len(levels) > len(nodes.leaf):
            raise BadInputError(f"{what}: the nodes_*nodeids attributes form a cycle")
        children = np.concatenate([nodes.true_child[frontier], nodes.false_child[frontier]])
        met = np.arange(len(children))
        last[children] = met
        frontier = children[last[children] == met]  # each once (trees may share subtrees)


def _first_levels(nodes: TreeNodes, levels: list[np.ndarray]) -> int:
    """The first stage's levels: down to ``PADDED_LEVELS``, but not below the level where
    fewer than a third of the (row, tree) pairs are likely still at an interior node. Every
    pair goes through every level of the first stage, so its deep levels, with their large
    tables, would be paid for by all pairs for the sake of a few; the later stages take
    those on by themselves.

    Which branches the rows take is not known; a tree grows its leaves where its training
    rows are, so each leaf is taken to receive an equal share of its tree's rows."""
    below = nodes.leaf.astype(np.float64)  # leaves below each node
    for inner in reversed(levels):
        below[inner] = below[nodes.true_child[inner]] + below[nodes.false_child[inner]]
    # every path from a root, each node weighing its share of its tree's pairs
    frontier, scale = nodes.roots, 1 / (below[nodes.roots] * len(nodes.roots))
    for level in range(min(len(levels), PADDED_LEVELS)):
        inner = ~nodes.leaf[frontier]
        if (below[frontier[inner]] * scale[inner]).sum() < 1 / 3:
            return level
        frontier, scale = frontier[inner], scale[inner]
        frontier = np.concatenate([nodes.true_child[frontier], nodes.false_child[frontier]])
        scale = np.concatenate([scale, scale])
    return min(len(levels), PADDED_LEVELS)


@dataclass
class _Tests:
    """What the nodes of one padded level test, as flat tensors by position; ``mode``,
    ``tracks`` and ``members`` only where the forest needs them looked up. ``packed`` holds
    feature and float32 threshold in one int64 (``feature << 32 | threshold bits``): one
    random look-up and two cheap streaming ops instead of two look-ups, in the hot loop of
    float32 forests with one compare."""

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
    """A chunk of rows after the first stage: its rows' aggregated weights (rows, outputs),
    whether given (or None: always), and the row (int64) and node of every (row, tree) pair
    still at an interior node (or None: a single stage)."""

    total: torch.Tensor
    given: torch.Tensor | None
    row: torch.Tensor | None
    node: torch.Tensor | None


class _Buffers:
    """One thread's work space for ``rows`` x ``cols`` (row, tree) pairs, reused by every
    level and every chunk of that size the thread runs in one :meth:`TreeEngine.aggregate`.

    2-D for the gather from X (a chunk's rows by trees), flat views of the same memory for the
    look-ups by position; ``split_bits`` (float32 compares only) is ``split`` as int32, for
    the thresholds' bits."""

    def __init__(self, rows: int, cols: int, dtype: torch.dtype, device: torch.device):
        self.shape = (rows, cols)

        def new(kind: torch.dtype) -> torch.Tensor:
            return torch.empty(rows, cols, dtype=kind, device=device)

        self.feature, self.value, self.position = new(torch.int64), new(dtype), new(torch.int32)
        # a compare writes each went_true over the value it read: one buffer less in cache
        self.went = self.value.view(torch.int32) if dtype == torch.float32 else new(torch.int32)
        self.split = new(dtype).view(-1)
        self.split_bits = self.split.view(torch.int32) if dtype == torch.float32 else None
        self.flat_feature, self.flat_value = self.feature.view(-1), self.value.view(-1)
        self.flat_went, self.flat_position = self.went.view(-1), self.position.view(-1)


def _cat(parts: list, empty: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts) if parts else empty


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
        by_depth = interior_levels(nodes, what)
        self.depth = len(by_depth)
        self.trees = len(nodes.roots)
        self.dtype = dtype
        self.device = device
        interior = ~nodes.leaf
        self.width = int(nodes.feature[interior].max()) + 1 if interior.any() else 0
        self.modes = sorted(set(nodes.mode[interior].tolist()))
        feature = np.where(nodes.leaf, 0, nodes.feature)
        # a leaf's copies send X (but NaN) down the true branch: its pairs keep to one entry
        threshold = np.where(
            nodes.leaf & (nodes.mode <= 3),
            np.where(nodes.mode <= 1, math.inf, -math.inf),
            nodes.threshold,
        )
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
                bits = threshold[at].astype(np.float32).view(np.uint32)
                packed = put((feature[at] << 32) | bits.astype(np.int64))
            return _Tests(
                put(feature[at]),
                put(threshold[at], dtype),
                put(nodes.mode[at]) if general else None,
                put(tracked[at], torch.bool) if general and tracked.any() else None,
                put(nodes.members[at], dtype) if MEMBER in self.modes else None,
                packed,
            )

        # positions and nodes are int32 (half the traffic of int64); feature tables stay
        # int64, which gather wants before torch 2.8
        self.first = put(np.arange(self.trees), torch.int32)  # each tree's position at level 0
        self.stages = []
        roots, left, stage_levels = nodes.roots, self.depth, _first_levels(nodes, by_depth)
        while not self.stages or len(roots):  # the first stage may have no level (stumps)
            room = max(1, int(math.log2(max(1, PADDED_POSITIONS // len(roots)))))
            at, levels = roots, []
            for _ in range(min(left, stage_levels, room)):
                levels.append(tests(at))
                at = np.stack([nodes.false_child[at], nodes.true_child[at]], 1).reshape(-1)
            slot = np.zeros(len(feature), dtype=np.int64)
            slot[roots] = np.arange(len(roots))
            self.stages.append(_Stage(levels, put(at, torch.int32), put(slot, torch.int32)))
            left, stage_levels = left - len(levels), STAGE_LEVELS
            roots = np.unique(at[interior[at]])
        self.interior = put(interior, torch.bool)
        self.outputs = nodes.values.shape[1]
        used = nodes.has[nodes.leaf].any(0)
        self.used = put(np.flatnonzero(used))
        # only leaves weigh: every stage adds the weights of the nodes its pairs reached,
        # interior ones included, which must change nothing
        has = nodes.has[:, used] & nodes.leaf[:, None]
        self.values = put(np.where(has, nodes.values[:, used], 0.0), torch.float64)
        self.has = put(has, torch.bool)
        self.always_given = bool(has[nodes.leaf].all())

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
        leaves at an interior node add their leaf's weight after the later stages.

        Under graph mode's tracer it raises :class:`NotTraceableError`, and the node runs
        eagerly: the engine is eager code (chunks of rows in threads, whose ops a tracer in
        the calling thread does not see; ``out=`` writes into reused buffers and their views,
        which inductor compiled into wrong leaves for an official one-tree case)."""
        if not value_checks():
            raise NotTraceableError("a tree ensemble: its rows go in threads, into reused buffers")
        x = x[:, : self.width].to(self.dtype)
        if self.fill is not None:
            x = torch.cat([x, torch.where(x.isnan(), self.fill, x)], 1)
        x = x.contiguous()
        table = self.values
        if function in ("MIN", "MAX"):
            table = torch.where(self.has, table, math.inf if function == "MIN" else -math.inf)
        scratch = threading.local()  # each thread's _Buffers, for this call only
        rows = max(1, CHUNK_ELEMENTS // max(1, self.trees))
        starts = range(0, x.shape[0], rows)
        parts = _in_parallel(
            lambda start: self._chunk(x, start, rows, table, function, scratch), starts, x.device
        )
        total = _cat([p.total for p in parts], table.new_zeros(0, table.shape[1]))
        given = torch.ones_like(total, dtype=torch.bool)
        if not self.always_given:
            given = _cat([p.given for p in parts], given)
        if len(self.stages) > 1:
            row = _cat([p.row for p in parts], self.used.new_zeros(0))
            node = _cat([p.node for p in parts], self.first.new_zeros(0))
            self._later_stages(x, row, node, (total, given, table, function), scratch)
        total = torch.where(given, total, 0.0)
        if function == "AVERAGE":
            total = total / self.trees
        scores = total.new_zeros(x.shape[0], self.outputs)
        scores[:, self.used] = total
        has = torch.zeros_like(scores, dtype=torch.bool)
        has[:, self.used] = given & (self.trees > 0)
        return scores, has

    def _buffers(self, scratch: threading.local, rows: int, cols: int) -> _Buffers:
        """This thread's buffers for ``rows`` x ``cols`` pairs (made when the size changes:
        the last, shorter chunk and the later stages)."""
        buffers = getattr(scratch, "buffers", None)
        if buffers is None or buffers.shape != (rows, cols):
            buffers = scratch.buffers = _Buffers(rows, cols, self.dtype, self.device)
        return buffers

    def _chunk(self, x, start: int, rows: int, table, function: str, scratch) -> _Chunk:
        """Rows ``start`` to ``start + rows`` of x through the first stage."""
        node = self._first_stage(x[start : start + rows], scratch)
        flat = table.view(-1) if table.shape[1] == 1 else table  # 1-D: a faster index_select
        values = flat.index_select(0, node).view(-1, self.trees, table.shape[1])
        given = (
            None if self.always_given else self.has.index_select(0, node).view(values.shape).any(1)
        )
        row = still = None
        if len(self.stages) > 1:
            pair = self.interior.index_select(0, node).nonzero().view(-1)
            still = node.index_select(0, pair)
            row = pair.div_(self.trees, rounding_mode="floor").add_(start)
        return _Chunk(_REDUCE[function](values), given, row, still)

    def _first_stage(self, x: torch.Tensor, scratch: threading.local) -> torch.Tensor:
        """The node each row of x reaches in each tree after the first stage's levels, flat
        (rows * trees,) int32.

        Level 0 needs no look-up: its tables hold one root per tree, which broadcast over the
        rows (the gather reads an expanded index, the compare and the step broadcast)."""
        rows = x.shape[0]
        stage = self.stages[0]
        if not stage.levels:
            return stage.node_at.index_select(0, self.first.repeat(rows))
        b = self._buffers(scratch, rows, self.trees)
        root, *deeper = stage.levels
        torch.gather(x, 1, root.feature.expand(rows, self.trees), out=b.value)
        self._went_true(root, self.first, b.value, root.threshold, b.went)
        torch.add(b.went, self.first, alpha=2, out=b.position)
        position = b.flat_position
        for level in deeper:
            split = self._look_up(level, position, b)
            torch.gather(x, 1, b.feature, out=b.value)
            self._went_true(level, position, b.flat_value, split, b.flat_went)
            torch.add(b.flat_went, position, alpha=2, out=position)
        return stage.node_at.index_select(0, position)

    def _later_stages(self, x: torch.Tensor, row, node, into: tuple, scratch) -> None:
        """Take the (row, node) pairs the first stage left at an interior node through the
        later stages, adding into ``into`` = (total, given, table, function) the weight of
        the node every pair reaches at the end of each stage (an interior node's changes
        nothing) and going on with the pairs still at an interior node."""
        flat = x.view(-1)
        for stage in self.stages[1:]:
            if not len(row):
                return
            pieces = zip(row.split(CHUNK_ELEMENTS), node.split(CHUNK_ELEMENTS), strict=True)
            work = partial(self._stage, stage, flat, x.shape[1], scratch)
            node = torch.cat(_in_parallel(work, pieces, x.device))
            self._add_leaves(*into, row, node)
            still = self.interior.index_select(0, node).nonzero().view(-1)
            row, node = row.index_select(0, still), node.index_select(0, still)

    def _stage(self, stage: _Stage, flat: torch.Tensor, width: int, scratch, piece):
        """The node each of the (row, node) ``piece``'s pairs reaches after ``stage``'s levels
        below its node: X read flat, at ``row * width + feature``."""
        row, node = piece
        b = self._buffers(scratch, len(row), 1)
        offset = row * width
        position = stage.slot.index_select(0, node)
        for level in stage.levels:
            split = self._look_up(level, position, b)
            torch.add(b.flat_feature, offset, out=b.flat_feature)
            torch.index_select(flat, 0, b.flat_feature, out=b.flat_value)
            self._went_true(level, position, b.flat_value, split, b.flat_went)
            torch.add(b.flat_went, position, alpha=2, out=position)
        return stage.node_at.index_select(0, position)

    @staticmethod
    def _look_up(tests: _Tests, position: torch.Tensor, b: _Buffers) -> torch.Tensor:
        """Write the features of the nodes at ``position`` into ``b.flat_feature``; their
        thresholds, in ``b.split``."""
        if tests.packed is None:
            torch.index_select(tests.feature, 0, position, out=b.flat_feature)
            torch.index_select(tests.threshold, 0, position, out=b.split)
        else:
            torch.index_select(tests.packed, 0, position, out=b.flat_feature)
            b.split_bits.copy_(b.flat_feature)  # the low 32 bits
            b.flat_feature.bitwise_right_shift_(32)
        return b.split

    def _add_leaves(self, total, any_given, table, function, row, node) -> None:
        """Aggregate the weights of the nodes the later stages' pairs reached into their
        rows."""
        values = table.index_select(0, node)
        if function in ("SUM", "AVERAGE"):
            total.index_add_(0, row, values)
        else:
            index = row.unsqueeze(1).expand_as(values)
            total.scatter_reduce_(0, index, values, "amin" if function == "MIN" else "amax")
        if not self.always_given:
            count = torch.zeros_like(total).index_add_(
                0, row, self.has.index_select(0, node).double()
            )
            any_given |= count > 0

    def _went_true(self, tests: _Tests, index, value, split, out: torch.Tensor) -> None:
        """Write into ``out`` (int32: added to positions as it is) whether each node at
        ``index`` sends its ``value`` down the true branch; ``split``: the nodes'
        thresholds."""
        if self.mode is not None:
            _COMPARE[self.mode](value, split, out=out)
            return
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
        out.copy_(chosen)
