"""``prepare(model, use_graph=True)``: compiled inference equals eager, or falls back clearly.

Each compile takes seconds, so the models are small; expected values come from the same
model run eagerly by sonnx (itself checked against onnxruntime elsewhere).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx import autograd
from sonnx.errors import GraphModeWarning
from sonnx.runtime.graph_keys import RECENT_SIGNATURES
from sonnx.runtime.graph_mode import Segment
from sonnx.runtime.imported_graph import ImportedGraph
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from tests.onnx.export_check import ort_session
from tests.onnx.switch_models import switch_model, unary_branch
from tests.runtime.graph_mode_models import (
    chain_with_a_tanh,
    compute_around_a_nonzero,
    slices_of_a_nonzero_count,
)


@pytest.fixture(scope="module")
def cnn() -> onnx.ModelProto:
    torch.manual_seed(0)
    return tm.export(tm.SmallCNN(), (torch.randn(1, 3, 16, 16),), 17, ["input"])


@pytest.fixture(scope="module")
def bert() -> onnx.ModelProto:
    torch.manual_seed(0)
    module = tm.TinyBert(vocab=50, hidden=16, heads=2, layers=1, ffn=32, max_len=8)
    return tm.export(module, tm.bert_inputs(1, 8, 50), 17, ["input_ids", "attention_mask"])


def _same(graph_rep, eager_rep, feeds) -> None:
    got, expected = graph_rep.run(feeds), eager_rep.run(feeds)
    assert graph_rep.graph_runner.compile_count, "not a compiled run"
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert isinstance(g.creator, ImportedGraph)
        np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-6)


def _compile_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sonnx.graph_mode"]


def test_cnn_compiles_once_for_many_batch_sizes_and_its_runs_export_the_graph(cnn, caplog) -> None:
    """One compile serves every batch (and says so, once), the graph chosen per shape is
    remembered for a bounded number of shapes, the runs equal eager's, and a compiled run
    exports the original graph: one test, as each of these would compile the same graph."""
    rep, eager = sonnx.prepare(cnn, use_graph=True), sonnx.prepare(cnn)
    rng = np.random.default_rng(0)
    # Eager torch picks another convolution kernel for a batch of one and from 16 up (1x1
    # kernels); the compiled graph runs oneDNN's for all, so one graph serves them all.
    for batch in (1, 8, 17, 2):
        _same(rep, eager, [rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)])
    assert rep.graph_runner.fallback is None
    assert rep.graph_runner.compile_count == 1
    # The one compile says that it starts, for what, and how long it took: nothing else.
    started, done = _compile_notes(caplog)
    assert started.startswith("sonnx graph mode: compiling a new graph for float32[1, 3, 16, 16];")
    assert re.fullmatch(r"sonnx graph mode: compiled in \d+\.\d s", done)

    (segment,) = [s for s in rep.graph_runner.segments if isinstance(s, Segment)]
    for batch in range(1, RECENT_SIGNATURES + 3):
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        got, expected = rep.run([x])[0], eager.run([x])[0]
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-6)
        chosen = rep.graph_runner.plan.choices[(segment.start, segment.stop)]
        assert 0 < len(chosen) <= RECENT_SIGNATURES
    assert rep.graph_runner.compile_count == 1

    x = Tensor(data=np.zeros((2, 3, 16, 16), np.float32), requires_grad=False, name="input")
    (y,) = rep.run([x])
    assert y.name == rep.outputs[0]
    exported = sonnx.to_onnx([x], [y])
    assert [n.name for n in exported.graph.node] == [n.name for n in cnn.graph.node]


def test_shape_arithmetic_of_a_bert_encoder_is_folded_into_the_graph(bert) -> None:
    rep, eager = sonnx.prepare(bert, use_graph=True), sonnx.prepare(bert)
    assert sum(s.info.op_type == "Shape" for s in rep.steps) > 0
    for batch in (1, 3):
        ids, mask = tm.bert_inputs(batch, 8, 50, seed=batch)
        _same(rep, eager, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert rep.graph_runner.fallback is None


def test_changed_weights_are_compiled_in_and_training_runs_stay_eager(cnn) -> None:
    rep, eager = sonnx.prepare(cnn, use_graph=True), sonnx.prepare(cnn)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    before = to_numpy(rep.run([x])[0])
    for name, weight in rep.params.items():
        with torch.no_grad():
            weight.data.mul_(1.5)
            eager.params[name].data.mul_(1.5)
    _same(rep, eager, [x])
    assert not np.allclose(to_numpy(rep.run([x])[0]), before)
    autograd.training = True
    (trained,) = rep.run([x])
    assert trained.creator is not None, "a training run must be recorded for backward"


def _if_on_a_computed_condition() -> onnx.ModelProto:

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value_float=0.0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node(
            "If",
            ["positive"],
            ["y"],
            then_branch=unary_branch("a", "Relu", "x"),
            else_branch=unary_branch("b", "Neg", "x"),
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "computed_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _nonzero_then_reshape() -> onnx.ModelProto:
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"]),
        helper.make_node("Shape", ["where"], ["count"]),
        helper.make_node("Reshape", ["where", "count"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _random_normal_like() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("RandomNormalLike", ["x"], ["y"])],
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("make", "node", "reason"),
    [
        (_if_on_a_computed_condition, "If", "reads a computed tensor on the host"),
        (_nonzero_then_reshape, "NonZero", "output shape depends on tensor values"),
        (_random_normal_like, "RandomNormalLike", "draws random numbers (RandomNormalLike)"),
    ],
)
def test_value_dependent_steps_run_eagerly_and_the_rest_stays_compiled(make, node, reason) -> None:
    model = make()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    x = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], np.float32)
    if make is _random_normal_like:  # no warning: random draws are known to run eagerly
        (y,) = rep.run([x])
        assert y.shape == (2, 3) and y.creator is not None
    else:
        with pytest.warns(RuntimeWarning, match="eagerly; the rest stays compiled"):
            got = rep.run([x])
        np.testing.assert_array_equal(to_numpy(got[0]), to_numpy(eager.run([x])[0]))
        with warnings.catch_warnings():  # later runs go the same way without a second warning
            warnings.simplefilter("error", RuntimeWarning)
            got = rep.run([-x])
        np.testing.assert_array_equal(to_numpy(got[0]), to_numpy(eager.run([-x])[0]))
    assert reason in rep.graph_runner.fallback
    eager_ops = {rep.steps[i].info.op_type for i in rep.graph_runner.eager_steps}
    assert eager_ops == {node}


def test_the_steps_around_an_eager_step_are_compiled_segments(caplog) -> None:
    model = compute_around_a_nonzero()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    with pytest.warns(RuntimeWarning, match="node 'nonzero'"):
        rep.run([rng.standard_normal((2, 3)).astype(np.float32)])
    for n in (2, 4):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(to_numpy(rep.run([x])[0]), to_numpy(eager.run([x])[0]))
    runner = rep.graph_runner
    kinds = ["eager" if isinstance(p, int) else "compiled" for p in runner.segments]
    assert kinds == ["compiled", "eager", "compiled"]
    # NonZero's indices differ per input; they are traced, not baked into a graph per value.
    assert runner.compile_count == 2
    # The whole graph's trace stopped at NonZero (no "compiled" line); each segment says which
    # steps it compiles.
    notes = _compile_notes(caplog)
    segments = [n for n in notes if f" of {len(rep.steps)}); this can take minutes" in n]
    assert len(segments) == 2 and len([n for n in notes if "compiled in" in n]) == 2, notes


def test_slices_to_a_nonzero_count_compile_once_for_every_count() -> None:
    """Slice clamped its bounds with Python's ``slice.indices``, which read the NonZero's
    count as an int: the segment after the NonZero compiled a graph per count. Clamped with
    torch's symbolic min and max, one graph serves every count and length, backwards steps
    and INT64 sentinels included, equal to eager and onnxruntime."""
    model = slices_of_a_nonzero_count()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    session = ort_session(model)
    rng = np.random.default_rng(0)
    for i, (n, count) in enumerate([(10, 3), (10, 6), (12, 1), (9, 9), (12, 4)]):
        x = np.zeros(n, np.float32)
        x[rng.permutation(n)[:count]] = rng.uniform(1, 2, count)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if i == 0 else "error", RuntimeWarning)
            got = [to_numpy(y) for y in rep.run([x])]
        expected = [to_numpy(y) for y in eager.run([x])]
        for g, e, o in zip(got, expected, session.run(None, {"x": x}), strict=True):
            np.testing.assert_array_equal(g, e)
            np.testing.assert_array_equal(g, o)
        # For a count of 1 the start (-2) is before the first position, which ONNX (and
        # onnxruntime) clamp to it: Python's slice.indices would take nothing.
        assert got[0].shape == (1, max(count - 1, 1)) and got[2].shape == (count,)
    runner = rep.graph_runner
    assert [(p.nodes[0], p.compiled) for p in runner.parts()] == [
        ("nonzero", False),
        ("cast", True),
    ]
    assert runner.compile_count == 1


def _if_on_a_switch_input() -> onnx.ModelProto:
    """``If (mode == 1)`` over a scaled input, as Silero-VAD branches on its sample rate."""
    return switch_model(
        "switch_if",
        unary_branch("a", "Relu", "scaled"),
        unary_branch("b", "Neg", "scaled"),
        x_width=3,
        before=[helper.make_node("Mul", ["x", "x"], ["scaled"])],
    )


def test_an_if_on_a_one_value_input_compiles_the_branch_taken_for_each_value() -> None:
    model = _if_on_a_switch_input()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n, mode in [(2, 1), (5, 1), (3, 0), (4, 0), (6, 1)]:
            feeds = [rng.standard_normal((n, 3)).astype(np.float32), np.array(mode, np.int64)]
            got, expected = rep.run(feeds), eager.run(feeds)
            np.testing.assert_array_equal(to_numpy(got[0]), to_numpy(expected[0]))
    runner = rep.graph_runner
    assert runner.fallback is None
    assert runner.compile_count == 2  # one graph per value of the switch, for every batch size


def test_bad_input_met_while_compiling_is_reported_and_later_runs_still_compile() -> None:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], np.ones(12, np.float32))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="project")],
        "project",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "k"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model, use_graph=True)
    with pytest.raises(sonnx.errors.BadInputError, match="MatMul"):
        rep.run([np.ones((2, 5), np.float32)])  # k = 5, the weight has 3 rows
    (y,) = rep.run([np.ones((2, 3), np.float32)])
    np.testing.assert_array_equal(to_numpy(y), np.full((2, 4), 3.0, np.float32))
    assert rep.graph_runner.fallback is None
    assert rep.graph_runner.compile_count == 1


def test_a_segment_inductor_rejects_is_split_once_and_a_failing_half_runs_eagerly(
    monkeypatch,
) -> None:
    """A planted compiler failure on any graph holding a tanh: the whole graph fails, so it is
    split in halves; the half before the Tanh compiles, the half holding it fails too and runs
    eagerly, unsplit (no search down to one step: each halving costs a full compile)."""
    from sonnx.runtime import symbolic_graphs

    compile_library = symbolic_graphs.compile_library

    def no_tanh(graph: torch.fx.GraphModule, example_inputs, library, named) -> None:
        if any(n.target is torch.ops.aten.tanh.default for n in graph.graph.nodes):
            raise RuntimeError("planted: inductor cannot compile tanh")
        compile_library(graph, example_inputs, library, named)

    monkeypatch.setattr(symbolic_graphs, "compile_library", no_tanh)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    runner = rep.graph_runner
    assert [p.why_eager for p in runner.parts()] == ["not run yet"]
    rng = np.random.default_rng(0)
    with pytest.warns(GraphModeWarning, match=r"steps 3-5 \('tanh' .. 'squash'; .*planted"):
        rep.run([rng.standard_normal((2, 3)).astype(np.float32)])
    for n in (1, 4):
        _same(rep, eager, [rng.standard_normal((n, 3)).astype(np.float32)])
    parts = [(p.nodes, p.compiled) for p in runner.parts()]
    assert parts == [
        (("relu", "double", "skip"), True),
        (("tanh", "gate", "squash"), False),
    ]
    assert "inductor could not compile it: planted" in runner.fallback
    assert runner.compile_count == 1  # the half before the Tanh, for every batch
    assert rep.explain().splitlines()[1:] == [
        "  part 1 of 2, compiled: steps 0-2 (relu .. skip)",
        "  part 2 of 2, eager (inductor could not compile it: planted: inductor cannot compile"
        " tanh): steps 3-5 (tanh .. squash)",
        "  last run: compiled segments (1), with 3 steps run eagerly: inductor could not compile"
        " it: planted: inductor cannot compile tanh",
    ]
    assert rep.explain(last_layers=-2).startswith("the program: a cut")
