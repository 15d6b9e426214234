"""Graph mode is never silently wrong and never ends a run in the compiler's own error: a
miscompiled graph is caught at its first run, a graph raising while it runs falls back, and a
spent compile budget leaves the rest eager; each says so in one GraphModeWarning, and
``explain()`` names the path the last run took (eager, and why), not "compiled".

The faults are planted in test doubles of the compiler and of the compiled library; expected
values come from the same model run eagerly by sonnx."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError, GraphModeWarning
from sonnx.runtime import store, symbolic_graphs
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.tensor import to_numpy
from tests.runtime.graph_mode_models import chain_with_a_tanh, compute_around_a_nonzero


@pytest.fixture
def miscompiling(monkeypatch) -> None:
    """A compiler that gets Tanh wrong: every tanh it compiles computes a sigmoid."""
    compile_library = symbolic_graphs.compile_library

    def wrong_tanh(graph: torch.fx.GraphModule, example_inputs, library, named) -> None:
        for node in graph.graph.nodes:
            if node.target is torch.ops.aten.tanh.default:
                node.target = torch.ops.aten.sigmoid.default
        graph.recompile()
        compile_library(graph, example_inputs, library, named)

    monkeypatch.setattr(symbolic_graphs, "compile_library", wrong_tanh)


def _x(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3)).astype(np.float32)


def test_a_miscompiled_graph_is_caught_at_its_first_run_and_leaves_the_store(
    miscompiling, tmp_path: Path, monkeypatch
) -> None:
    """Caught, its steps run eagerly from then on, and quietly; the store keeps no library
    of it, and a new process's ``prepare`` reads from the stored plan that they run eagerly
    (one compile in all: checking the store here spares a second test its own)."""
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    with pytest.warns(
        GraphModeWarning,
        match=r"steps 0-5 \('relu' .. 'squash'; its compiled graph's first run differed from "
        r"the eager steps: output 'y': max difference .* at \[",
    ):
        (got,) = rep.run([_x(4)])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([_x(4)])[0]))
    runner = rep.graph_runner
    assert [(p.nodes[0], p.nodes[-1], p.compiled) for p in runner.parts()] == [
        ("relu", "squash", False)
    ]
    assert "differed from the eager steps" in rep.explain().splitlines()[1]
    last = rep.explain().splitlines()[-1]
    assert last.startswith(
        "  last run: eager, all 6 steps ran eagerly in graph mode: its compiled graph's first "
        "run differed from the eager steps: output 'y'"
    )
    with warnings.catch_warnings():  # later runs are eager, and quiet
        warnings.simplefilter("error", GraphModeWarning)
        for batch in (1, 4, 7):
            (got,) = rep.run([_x(batch, batch)])
            expected = eager.run([_x(batch, batch)])[0]
            np.testing.assert_array_equal(to_numpy(got), to_numpy(expected))
    assert runner.compile_count == 0  # the wrong graph is gone

    assert not list((tmp_path / "graphs").glob("*/*/graph.so"))
    with pytest.warns(GraphModeWarning, match="differed from the eager steps"):
        again = sonnx.prepare(model, use_graph=True)  # the stored plan says so up front
    again.run([_x(2)])
    assert again.graph_runner.compile_count == 0
    assert set(again.graph_runner.eager_steps) == set(range(6))


def test_without_verify_the_first_run_is_not_checked(miscompiling) -> None:
    """``verify=False`` is for those who measured: a wrong graph then goes unnoticed."""
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True, verify=False), sonnx.prepare(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphModeWarning)
        (got,) = rep.run([_x(4)])
    assert not np.allclose(to_numpy(got), to_numpy(eager.run([_x(4)])[0]), atol=1e-3)
    assert rep.graph_runner.compile_count == 1


def test_a_graph_raising_while_it_runs_falls_back_to_the_eager_steps(monkeypatch) -> None:
    """A compiled library that raises (inductor's generated bounds check) for a batch of 5:
    that run computes eagerly, the graph goes, and a warning says why."""
    load_library = store.load_library

    def raising_for_five(*args, **kwargs):
        run = load_library(*args, **kwargs)

        def checked(*inputs: torch.Tensor) -> list[torch.Tensor]:
            if inputs[0].shape[0] == 5:
                raise RuntimeError("index out of bounds: 0 <= tmp39 < ks0 (planted)")
            return run(*inputs)

        return checked

    monkeypatch.setattr(store, "load_library", raising_for_five)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    for batch in (2, 3):  # one symbolic graph serves both
        np.testing.assert_allclose(
            to_numpy(rep.run([_x(batch)])[0]), to_numpy(eager.run([_x(batch)])[0]), rtol=1e-5
        )
    assert rep.graph_runner.compile_count == 1
    with pytest.warns(GraphModeWarning, match=r"its compiled graph raised: index out of bounds"):
        (got,) = rep.run([_x(5)])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([_x(5)])[0]))
    assert not any(p.compiled for p in rep.graph_runner.parts())
    # Plain arrays (the fast path of a server) take the same way.
    (got,) = rep.run([_x(2)])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([_x(2)])[0]))


def _wrong_at_batch(monkeypatch, batch: int) -> None:
    """Compiled libraries that add 0.5 to their outputs at a batch of ``batch`` only (a loop
    tail inductor got wrong, say)."""
    load_library = store.load_library

    def wrong_at_batch(*args, **kwargs):
        run = load_library(*args, **kwargs)

        def shifted(*inputs: torch.Tensor) -> list[torch.Tensor]:
            outs = run(*inputs)
            return [o + 0.5 for o in outs] if inputs[0].shape[0] == batch else outs

        return shifted

    monkeypatch.setattr(store, "load_library", wrong_at_batch)


def test_a_graph_wrong_at_other_sizes_is_caught_at_its_first_run_there(monkeypatch) -> None:
    """One symbolic graph serves every batch; right at its first run's batch, wrong at a
    batch of 5: the first run at another batch is checked too, and catches it."""
    _wrong_at_batch(monkeypatch, 5)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphModeWarning)
        (got,) = rep.run([_x(2)])
    np.testing.assert_allclose(to_numpy(got), to_numpy(eager.run([_x(2)])[0]), rtol=1e-5)
    with pytest.warns(
        GraphModeWarning,
        match=r"its compiled graph's first run at other input sizes differed from the eager "
        r"steps: output 'y': max difference 0.5",
    ) as caught:
        (got,) = rep.run([_x(5)])
    # The warning names the line that ran the model, not one inside sonnx.
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, sys._getframe().f_lineno - 2)}
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([_x(5)])[0]))
    assert not any(p.compiled for p in rep.graph_runner.parts())
    assert rep.graph_runner.compile_count == 0


def test_a_graph_is_checked_at_two_sizes_once_and_the_store_remembers(
    monkeypatch, tmp_path: Path
) -> None:
    """Checked at its first run and at its first at another batch, then never again; a new
    process loading the stored graph reads that from the store and checks nothing."""
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    eager_runs: list[tuple[int, int]] = []
    execute = GraphRunner._execute

    def counted(self, values, start, stop, keep=None) -> None:
        eager_runs.append((start, stop))
        execute(self, values, start, stop, keep)

    monkeypatch.setattr(GraphRunner, "_execute", counted)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    for batch, checks in ((2, 1), (2, 1), (3, 2), (4, 2), (2, 2)):
        (got,) = rep.run([_x(batch, batch)])
        expected = eager.run([_x(batch, batch)])[0]
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5)
        assert len(eager_runs) == checks, batch
    (recorded,) = tmp_path.glob("graphs/*/*/checks.json")
    assert json.loads(recorded.read_text()) == {"first": [[2, 3]], "again": True}

    eager_runs.clear()
    again = sonnx.prepare(model, use_graph=True)
    (got,) = again.run([_x(6)])
    np.testing.assert_allclose(to_numpy(got), to_numpy(eager.run([_x(6)])[0]), rtol=1e-5)
    assert again.graph_runner.loaded_count == 1 and eager_runs == []


def test_a_spent_compile_budget_leaves_the_parts_not_compiled_yet_eager(caplog) -> None:
    model = compute_around_a_nonzero()
    rep, eager = sonnx.prepare(model, use_graph=True, compile_budget=2), sonnx.prepare(model)
    x = _x(3)
    with pytest.warns(
        GraphModeWarning,
        match=r"steps 3-5 and every other part not compiled yet "
        r"\(the compile budget of 2 s is spent \(\d+ s compiling\)",
    ):
        (got,) = rep.run([x])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([x])[0]))
    parts = rep.graph_runner.parts()
    assert [(p.nodes[0], p.compiled) for p in parts] == [
        ("relu", True),
        ("nonzero", False),
        ("cast", False),
    ]
    assert parts[2].why_eager.startswith("the compile budget of 2 s is spent")
    last = rep.explain().splitlines()[-1]
    assert last.startswith("  last run: compiled segments (1), with 4 steps run eagerly: 1 step: ")
    assert "; 3 steps: the compile budget of 2 s is spent" in last
    assert rep.graph_runner.compile_count == 1  # one compile (of ~10 s) spent the 2 s
    (again,) = rep.run([_x(6, 1)])
    np.testing.assert_array_equal(to_numpy(again), to_numpy(eager.run([_x(6, 1)])[0]))


@pytest.mark.parametrize("budget", [0, -1, "60", True])
def test_a_compile_budget_must_be_positive_seconds(budget) -> None:
    with pytest.raises(BadInputError, match="compile_budget must be a number of seconds"):
        sonnx.prepare(chain_with_a_tanh(), use_graph=True, compile_budget=budget)


def test_explain_names_the_eager_path_a_run_took_when_the_compiler_fails(monkeypatch) -> None:
    """Every compile raises: the run computes eagerly, and ``explain()`` says so and why,
    while the choice made before a run is still graph mode."""

    def failing(graph: torch.fx.GraphModule, example_inputs, library, named) -> None:
        raise RuntimeError("planted: inductor fails on everything")

    monkeypatch.setattr(symbolic_graphs, "compile_library", failing)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    assert "last run" not in rep.explain()  # no run yet
    with pytest.warns(GraphModeWarning, match="planted"):
        (got,) = rep.run([_x(4)])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([_x(4)])[0]))
    lines = rep.explain().splitlines()
    assert lines[0].startswith("compiled graph mode: prepared with use_graph=True")
    assert lines[-1] == (
        "  last run: eager, all 6 steps ran eagerly in graph mode: inductor could not compile "
        "it: planted: inductor fails on everything"
    )
    assert rep.graph_runner.compile_count == 0


def test_sonnx_debug_prints_the_path_a_run_took_after_the_one_chosen(monkeypatch, capsys) -> None:
    def failing(graph: torch.fx.GraphModule, example_inputs, library, named) -> None:
        raise RuntimeError("planted: inductor fails on everything")

    monkeypatch.setattr(symbolic_graphs, "compile_library", failing)
    rep = sonnx.prepare(chain_with_a_tanh(), use_graph=True)
    monkeypatch.setenv("SONNX_DEBUG", "1")
    with pytest.warns(GraphModeWarning, match="planted"):
        rep.run([_x(4)])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[sonnx] run: compiled graph mode (prepared with use_graph=True")
    assert "[sonnx] took: eager, all 6 steps ran eagerly in graph mode: inductor could not " in (
        "\n".join(lines)
    )


def _first_of_a_sequence() -> onnx.ModelProto:
    """SequenceAt(seq, 0) -> Relu: the input is a sequence of tensors."""
    nodes = [
        helper.make_node("SequenceAt", ["seq", "zero"], ["first"], name="first"),
        helper.make_node("Relu", ["first"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "first_of_a_sequence",
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_explain_names_the_program_path_a_run_took_when_the_runner_gives_no_outputs() -> None:
    """A sequence input is no tensor: the runner returns None and the program's steps run;
    ``explain()`` says so, not "compiled" (before, that run was silently eager)."""
    model = _first_of_a_sequence()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    seq = [_x(2), _x(3, 1)]
    (got,) = rep.run([seq])
    np.testing.assert_array_equal(to_numpy(got), to_numpy(eager.run([seq])[0]))
    assert rep.explain().splitlines()[-1] == (
        "  last run: eager, the program's steps ran: graph mode runs tensors only, and an "
        "input is not one (a sequence, map or None)"
    )
    assert rep.graph_runner.compile_count == 0
