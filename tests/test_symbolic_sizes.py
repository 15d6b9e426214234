"""Symbolic shape values (``sonnx.symbolic_sizes``): shape arithmetic that stays symbolic in
graph mode, so one compiled graph serves every batch size, sequence length and image size.

The graph-mode cases compile (seconds each), so the models are small; expected values come
from the same model run eagerly (itself checked against onnxruntime elsewhere).
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from torch import nn

import sonnx
from sonnx.operators.elementwise.binary import Div, Mul
from sonnx.operators.elementwise.cast import Cast
from sonnx.operators.elementwise.logic import Equal
from sonnx.operators.indexing.gather_scatter import Gather
from sonnx.operators.shape.slicing import Concat
from sonnx.symbolic_sizes import SymbolicInts, materialize, run_on_symbols, symbolic
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm


# ---- the arithmetic, on plain numbers (what it does to symbols is the same Python) ---------
def test_elementwise_arithmetic_broadcasts_and_keeps_the_element_type() -> None:
    sizes = symbolic([4, 16, 8])
    total = run_on_symbols(Mul(), [sizes, torch.tensor(2)])
    assert isinstance(total, SymbolicInts) and total.dtype == torch.int64
    assert total.tolist() == [8, 32, 16]
    same = run_on_symbols(Equal(), [sizes, torch.tensor([4, 0, 8])])
    assert same.dtype == torch.bool and same.tolist() == [True, False, True]


def test_layout_operators_move_symbols_and_constants_together() -> None:
    sizes = symbolic([4, 16, 8])
    picked = run_on_symbols(Gather(axis=0), [sizes, torch.tensor([2, 0])])
    assert picked.tolist() == [8, 4]
    joined = run_on_symbols(Concat(axis=0), [picked, torch.tensor([-1])])
    assert joined.tolist() == [8, 4, -1] and joined.dtype == torch.int64


def test_integer_division_truncates_and_a_cast_to_float_keeps_whole_numbers() -> None:
    halved = run_on_symbols(Div(), [symbolic([7, -7]), torch.tensor(2)])
    assert halved.tolist() == [3, -3]  # toward zero, as ONNX's integer Div
    as_float = run_on_symbols(Cast(to=TensorProto.FLOAT), [symbolic([3, 5])])
    assert as_float.dtype == torch.float32 and as_float.tolist() == [3.0, 5.0]
    tensor = materialize(as_float)
    assert tensor.dtype == torch.float32 and tensor.tolist() == [3.0, 5.0]


# ---- graph mode: one compile for many shapes ----------------------------------------------
class _Heads(nn.Module):
    """Attention-style head split and merge: reshapes computed from the input's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.proj(x).view(b, s, 2, 8).transpose(1, 2)
        return (y * 2).transpose(1, 2).reshape(b, s, 16)


class _Grid(nn.Module):
    """A detection head's anchor grid (float Range over the map's sides, Expand) and a
    nearest upsample to the input's size."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = torch.relu(self.conv(x))
        h, w = f.shape[2], f.shape[3]
        sx = torch.arange(end=w, dtype=f.dtype) + 0.5
        sy = torch.arange(end=h, dtype=f.dtype) + 0.5
        gy, gx = torch.meshgrid(sy, sx, indexing="ij")
        grid = torch.stack((gx, gy), -1).view(-1, 2)
        up = nn.functional.interpolate(f, scale_factor=2.0, mode="nearest")
        return grid, up + x.mean(1, keepdim=True)


def _compiled_once(model: onnx.ModelProto, feeds: list[list[np.ndarray]]) -> None:
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    for arrays in feeds:
        got, expected = graph.run(arrays), eager.run(arrays)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-5)
    assert graph.graph_runner.fallback is None
    assert graph.graph_runner.compile_count == 1


def test_a_reshape_computed_from_the_shape_serves_every_batch_and_length() -> None:
    torch.manual_seed(0)
    axes = {"x": {0: "b", 1: "s"}}
    model = tm.export(_Heads(), (torch.randn(2, 5, 16),), 17, ["x"], dynamic_axes=axes)
    rng = np.random.default_rng(0)
    shapes = [(2, 5), (3, 7), (1, 4)]
    _compiled_once(model, [[rng.standard_normal((*s, 16)).astype(np.float32)] for s in shapes])


def test_a_grid_from_shape_and_range_and_an_upsample_serve_every_image_size() -> None:
    torch.manual_seed(0)
    axes = {"x": {2: "h", 3: "w"}}
    model = tm.export(_Grid(), (torch.randn(1, 3, 16, 16),), 17, ["x"], dynamic_axes=axes)
    rng = np.random.default_rng(1)
    sizes = [(16, 16), (24, 32), (8, 40)]
    _compiled_once(model, [[rng.standard_normal((1, 3, *s)).astype(np.float32)] for s in sizes])


class _SizedFromTheLength(nn.Module):
    """VITS's relative attention: a learned table padded by the length minus its window, so
    that it has 2 * length - 1 rows; then the top K = length // 2 scores."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 9, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pad = x.shape[1] - 5
        rows = nn.functional.pad(self.table, (0, 0, pad, pad))
        scores = torch.tanh(x @ rows.transpose(1, 2))
        return scores, torch.topk(scores.sum(-1), x.shape[1] // 2, dim=1).values


def _split_in_halves() -> onnx.ModelProto:
    """``x`` [1, t, 4] split along t into sizes (t // 2, t - t // 2) computed from its shape
    (torch's exporter writes Slices; tf2onnx writes such a Split), then tanh of each."""
    ints = {n: helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in
            (("one", 1), ("two", 2))}  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["t"]),
        helper.make_node("Div", ["t", "two"], ["half"]),
        helper.make_node("Sub", ["t", "half"], ["rest"]),
        helper.make_node("Concat", ["half", "rest"], ["sizes"], axis=0),
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
        helper.make_node("Tanh", ["a"], ["ya"]),
        helper.make_node("Tanh", ["b"], ["yb"]),
    ]
    graph = helper.make_graph(
        nodes,
        "halves",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "t", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("ya", "yb")],
        list(ints.values()),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_pads_a_k_and_splits_computed_from_the_length_serve_every_length() -> None:
    torch.manual_seed(0)
    axes = {"x": {1: "t"}}
    model = tm.export(_SizedFromTheLength(), (torch.randn(1, 7, 4),), 17, ["x"], dynamic_axes=axes)
    assert {"Pad", "TopK"} <= {n.op_type for n in model.graph.node}
    rng = np.random.default_rng(2)
    lengths = (7, 10, 6)
    _compiled_once(model, [[rng.standard_normal((1, t, 4)).astype(np.float32)] for t in lengths])
    feeds = [[rng.standard_normal((1, t, 4)).astype(np.float32)] for t in lengths]
    _compiled_once(_split_in_halves(), feeds)


class _Recogniser(nn.Module):
    """A CRNN-style sequence model: an LSTM over a sequence of any length, then a projection."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 5, bidirectional=True)
        self.out = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(x)[0]).softmax(-1)


def test_an_lstm_serves_every_sequence_length_in_one_graph() -> None:
    """torch's LSTM is one operation over the whole sequence, so its length stays a symbol
    (a loop over time steps would have to run eagerly)."""
    torch.manual_seed(0)
    axes = {"x": {0: "t", 1: "n"}}
    model = tm.export(_Recogniser(), (torch.randn(7, 2, 6),), 17, ["x"], dynamic_axes=axes)
    rng = np.random.default_rng(3)
    shapes = [(7, 2), (12, 3), (4, 2)]
    _compiled_once(model, [[rng.standard_normal((*s, 6)).astype(np.float32)] for s in shapes])


class _Head(nn.Module):
    """A detection head's flattening of two maps (``view(n, c, -1)``, concatenated, split,
    permuted): inductor lowers those views differently for a batch of one."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        y = torch.cat([self.a(x).view(n, 8, -1), self.b(x).view(n, 8, -1)], 2)
        box, cls = y.split((4, 4), 1)
        return torch.cat((box * 2, cls.sigmoid()), 1).permute(0, 2, 1)


def test_a_graph_loaded_from_the_disk_cache_serves_only_the_shapes_it_was_compiled_for() -> None:
    """inductor's disk cache checks no guards for a trace of tensors: keyed on the symbolic
    graph alone, the graph compiled for a batch of one came back for a batch of eight (and
    failed on its size check). Batches 1, 8, 2 in one runner, then in new runners that load
    what the first compiled: every answer is eager's."""
    axes = {"x": {0: "n", 2: "h", 3: "w"}}
    model = tm.export(_Head(), (torch.randn(1, 3, 16, 16),), 17, ["x"], dynamic_axes=axes)
    eager = sonnx.prepare(model)
    x = np.random.default_rng(2).standard_normal((8, 3, 16, 16)).astype(np.float32)
    for batches in ([1, 8, 2], [8, 1, 2], [2, 4, 1]):
        graph = sonnx.prepare(model, use_graph=True)
        for n in batches:
            got, expected = graph.run([x[:n]])[0], eager.run([x[:n]])[0]
            np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-5)
        assert graph.graph_runner.fallback is None


def test_small_integer_inputs_are_traced_not_baked_into_the_graph() -> None:
    """Token ids are small host integers like a shape value; a graph that baked them in would
    return the first call's answer for every other input."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("Relu", ["rows"], ["y"]),
    ]
    table = helper.make_tensor("table", TensorProto.FLOAT, [5, 2], np.arange(10.0).tolist())
    graph = helper.make_graph(
        nodes,
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model, use_graph=True)
    first = to_numpy(rep.run([np.array([0, 1], np.int64)])[0])
    second = to_numpy(rep.run([np.array([4, 2], np.int64)])[0])
    np.testing.assert_array_equal(first, [[0, 1], [2, 3]])
    np.testing.assert_array_equal(second, [[8, 9], [4, 5]])
    assert rep.graph_runner.compile_count == 1
