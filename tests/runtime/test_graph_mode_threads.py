"""One graph-mode rep run from eight threads while its plan changes under them
(:mod:`sonnx.runtime.graph_plan_state`): each run uses one snapshot of the plan, and every
change is a new plan swapped in under the runner's lock.

The rep starts without knowing that NonZero cannot be compiled (the store holds the compiled
segment but not the plan), so the threads' first runs find it while tracing and replan (a step
made eager, the segments planned anew) while other threads run; and each thread feeds lengths
no other thread feeds, so every run adds its shape's choice to the plan while the others read
it. The one segment is compiled once for the module (tens of seconds on two cores) and loaded
from the store by the test's rep: the threads compile nothing.
"""

from __future__ import annotations

import shutil
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import GraphModeWarning
from sonnx.runtime import store
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.tensor import to_numpy
from tests.runtime.graph_mode_models import chain_with_a_tanh, compile_into_store, copy_store

THREADS, RUNS = 8, 4


def _square_then_nonzero() -> onnx.ModelProto:
    """Relu -> Mul (one compiled segment) -> NonZero (eager); both the square and NonZero's
    indices are outputs. ``x`` has a dynamic first axis."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "r"], ["sq"], name="square"),
        helper.make_node("NonZero", ["sq"], ["where"], name="nonzero"),
    ]
    graph = helper.make_graph(
        nodes,
        "square_then_nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [
            helper.make_tensor_value_info("sq", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("where", TensorProto.INT64, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(length: int) -> np.ndarray:
    return np.random.default_rng(length).standard_normal((length, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A store holding the compiled Relu -> Mul segment, without the plan saying NonZero runs
    eagerly (a new rep finds that out again, at its first runs)."""
    root = tmp_path_factory.mktemp("threads_store")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphModeWarning)
        assert compile_into_store(root, _square_then_nonzero(), [_x(2)]) == 1
    shutil.rmtree(root / "plans")
    return root


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():
    """One torch thread per run, as a server's workers run: eight runs each forking a team of
    intra-op threads over two cores spend their time waiting for each other. Set before the
    module's store is compiled: a stored graph is keyed by the thread count it was compiled
    for."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_eight_threads_run_one_rep_while_new_lengths_and_a_found_eager_step_replan_it(
    stored, monkeypatch
) -> None:
    copy_store(stored)
    # A run finding another thread tracing (and finding NonZero) runs eagerly, choosing no
    # graph: such runs are counted.
    run_segment, elsewhere = GraphRunner._run_segment, []

    def counted(self, *args, **kwargs) -> str | None:
        why = run_segment(self, *args, **kwargs)
        if why == "its graph is being compiled by another thread":
            elsewhere.append(why)
        return why

    monkeypatch.setattr(GraphRunner, "_run_segment", counted)
    model = _square_then_nonzero()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    lengths = [[1 + thread + THREADS * run for run in range(RUNS)] for thread in range(THREADS)]
    expected = {n: [to_numpy(t) for t in eager.run([_x(n)])] for row in lengths for n in row}
    start = threading.Barrier(THREADS)

    def work(thread: int) -> list[tuple[int, list[np.ndarray]]]:
        start.wait()
        return [(n, [to_numpy(t) for t in rep.run([_x(n)])]) for n in lengths[thread]]

    with warnings.catch_warnings():  # the threads' runs find NonZero: warned about once
        warnings.simplefilter("ignore", GraphModeWarning)
        with ThreadPoolExecutor(THREADS) as pool:  # a thread's error is raised here
            done = [pair for pairs in pool.map(work, range(THREADS)) for pair in pairs]

    assert sorted(n for n, _ in done) == sorted(expected)
    for n, (square, where) in done:
        np.testing.assert_allclose(square, expected[n][0], rtol=1e-6, atol=0)
        np.testing.assert_array_equal(where, expected[n][1])
    runner = rep.graph_runner
    assert runner.compile_count == 0 and runner.loaded_count >= 1
    assert list(runner.eager_steps) == [2]
    plan = runner.plan
    assert [type(part).__name__ for part in plan.segments] == ["Segment", "int"]
    # Every compiled length's choice is in the plan: no thread's swap lost another's.
    assert len(plan.choices[(0, 2)]) == THREADS * RUNS - len(elsewhere)
    rep.run([_x(2)])  # the threads' last run may have found another thread tracing
    last = rep.explain().splitlines()[-1]
    assert last == (
        "  last run: compiled segments (1), with 1 step run eagerly: an output shape depends "
        "on tensor values (nonzero)"
    )


def test_a_thread_finding_its_graph_being_compiled_runs_eagerly_instead_of_compiling_it_too(
    monkeypatch, tmp_path: Path
) -> None:
    """A server's first two requests: the first compiles the graph; the second, arriving
    while it compiles, runs the steps eagerly at once and says so, and the graph is compiled
    once."""
    monkeypatch.setenv(store.ENV_VAR, str(tmp_path))
    started, finish = threading.Event(), threading.Event()
    compile_library = store.GraphStore.compile

    def held_compile(self, *args, **kwargs):
        # Inside the first thread's claim: held outside it, the second request would wait
        # here too, and whichever thread claimed first after the wait would compile.
        started.set()
        finish.wait(120)
        return compile_library(self, *args, **kwargs)

    monkeypatch.setattr(store.GraphStore, "compile", held_compile)
    model = chain_with_a_tanh()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    expected = to_numpy(eager.run([x])[0])
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(rep.run, [x])
        assert started.wait(120)
        (second,) = rep.run([x])  # while the first request's compile is under way
        last = rep.explain().splitlines()[-1]
        finish.set()
        (got,) = first.result(300)
    np.testing.assert_array_equal(to_numpy(second), expected)
    assert "its graph is being compiled by another thread" in last
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5)
    assert rep.graph_runner.compile_count == 1
    rep.run([x])
    assert rep.explain().splitlines()[-1].startswith("  last run: compiled")
