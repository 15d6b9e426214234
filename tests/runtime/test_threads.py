"""One ``SingaRep`` run from several threads at once, eagerly and in graph mode.

Each thread's results equal, bit for bit, what a run of the same input alone gives; a bad
input is reported as such while another thread compiles; and each thread's training flag is
its own (see :mod:`sonnx.run_state`). Compiles take tens of seconds on two cores, so the graph
mode reps are shared by the module's tests: the CNN is compiled while the bad-input test runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError
from sonnx.runtime.rep import SingaRep
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm

THREADS, RUNS = 4, 25
VOCAB = 50
Feeds = Callable[[int], list[np.ndarray]]


def _cnn_feeds(index: int) -> list[np.ndarray]:
    """Input ``index``: one of three batch sizes, its own values."""
    batch = (1, 2, 5)[index % 3]
    rng = np.random.default_rng(index)
    return [rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)]


def _bert_feeds(index: int) -> list[np.ndarray]:
    """Input ``index``: one of three (batch, sequence) shapes, its own tokens and mask."""
    batch, seq = ((1, 8), (2, 5), (3, 12))[index % 3]
    ids, mask = tm.bert_inputs(batch, seq, VOCAB, seed=index)
    return [ids.numpy(), mask.numpy()]


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():
    """One torch thread per run, as a server's workers run: four runs each forking a team of
    intra-op threads over two cores spend their time waiting for each other."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[onnx.ModelProto, Feeds]]:
    torch.manual_seed(0)
    cnn = tm.export(tm.SmallCNN(), (torch.randn(1, 3, 16, 16),), 17, ["input"])
    bert = tm.TinyBert(vocab=VOCAB, hidden=16, heads=2, layers=1, ffn=32, max_len=16)
    axes = {n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask")}
    axes["output"] = {0: "batch"}
    names = ["input_ids", "attention_mask"]
    bert_model = tm.export(bert, tm.bert_inputs(1, 8, VOCAB), 17, names, dynamic_axes=axes)
    return {"cnn": (cnn, _cnn_feeds), "bert": (bert_model, _bert_feeds)}


@pytest.fixture(scope="module")
def graph_reps(models, tmp_path_factory) -> dict[str, SingaRep]:
    """Graph mode reps, compiled at their first run, into a store of the module's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SONNX_CACHE_DIR", str(tmp_path_factory.mktemp("threads_store")))
        return {name: sonnx.prepare(model, use_graph=True) for name, (model, _) in models.items()}


def _outputs(rep: SingaRep, feeds: list[np.ndarray]) -> list[np.ndarray]:
    return [to_numpy(t) for t in rep.run(feeds)]


def _assert_bit_equal(got: list[np.ndarray], expected: list[np.ndarray], index: int) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g.dtype, g.shape) == (e.dtype, e.shape), f"input {index}"
        assert g.tobytes() == e.tobytes(), f"input {index}: differs from the run alone"


def _runs_in_threads(rep: SingaRep, feeds: Feeds) -> None:
    """Every input run alone, then the same inputs from THREADS threads at once (each thread
    taking the three shapes in turn, so that threads run different shapes side by side)."""
    inputs = [feeds(i) for i in range(THREADS * RUNS)]
    expected = [_outputs(rep, x) for x in inputs]
    start = threading.Barrier(THREADS)

    def work(thread: int) -> list[tuple[int, list[np.ndarray]]]:
        start.wait()
        return [(i, _outputs(rep, inputs[i])) for i in range(thread, THREADS * RUNS, THREADS)]

    with ThreadPoolExecutor(THREADS) as pool:
        done = [result for results in pool.map(work, range(THREADS)) for result in results]
    assert len(done) == THREADS * RUNS
    for index, got in done:
        _assert_bit_equal(got, expected[index], index)


def test_a_bad_input_raises_the_typed_error_while_another_thread_compiles(
    models, graph_reps
) -> None:
    """While a graph is traced in one thread, value checks stay on in the others: an index
    out of range is a BadInputError naming the node every time, not torch's IndexError."""
    bert = sonnx.prepare(models["bert"][0])
    ids, mask = tm.bert_inputs(2, 8, VOCAB)
    ids[1, 3] = VOCAB + 27
    bad = [ids.numpy(), mask.numpy()]
    compiling = graph_reps["cnn"]
    if compiling.graph_runner.compile_count:  # compiled by an earlier test: a fresh one
        compiling = sonnx.prepare(models["cnn"][0], use_graph=True)
    done = threading.Event()
    errors: list[BaseException] = []

    def compile_cnn() -> None:
        try:
            compiling.run(_cnn_feeds(0))
        finally:
            done.set()

    thread = threading.Thread(target=compile_cnn)
    thread.start()
    runs = 0
    while not done.is_set() or runs == 0:
        try:
            bert.run(bad)
        except Exception as e:  # every one must be the typed error
            errors.append(e)
        runs += 1
        time.sleep(0.01)  # leaves the compiling thread most of the interpreter
    thread.join()
    assert compiling.graph_runner.compile_count == 1
    assert len(errors) == runs
    for e in errors:
        assert isinstance(e, BadInputError), f"{type(e).__name__}: {e}"
        assert "/tokens/Gather" in str(e) and str(VOCAB + 27) in str(e)


@pytest.mark.parametrize("name", ["cnn", "bert"])
def test_one_rep_runs_in_four_threads_as_alone_eagerly(models, name) -> None:
    model, feeds = models[name]
    _runs_in_threads(sonnx.prepare(model), feeds)


@pytest.mark.parametrize("name", ["cnn", "bert"])
def test_one_rep_runs_in_four_threads_as_alone_in_graph_mode(models, graph_reps, name) -> None:
    rep = graph_reps[name]
    rep.run(models[name][1](0))  # compiled once first (if an earlier test did not)
    compiled = rep.graph_runner.compile_count
    assert compiled >= 1 and rep.graph_runner.fallback is None
    _runs_in_threads(rep, models[name][1])
    assert rep.graph_runner.compile_count == compiled


def _dropout_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x", "ratio"], ["y"], name="drop")],
        "dropout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
        [helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_training_flag_set_in_one_thread_leaves_another_threads_dropout_alone() -> None:
    rep = sonnx.prepare(_dropout_model())
    x = np.arange(1, 65, dtype=np.float32)
    step = threading.Barrier(2)
    dropped: list[bool] = []
    kept: list[bool] = []

    def training() -> None:
        autograd.training = True
        for _ in range(RUNS):
            step.wait()
            dropped.append(bool((to_numpy(rep.run([x])[0]) == 0).any()))

    def inference() -> None:
        for _ in range(RUNS):
            step.wait()
            kept.append(np.array_equal(to_numpy(rep.run([x])[0]), x))

    threads = [threading.Thread(target=training), threading.Thread(target=inference)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert kept == [True] * RUNS
    assert dropped == [True] * RUNS  # the training thread's runs did drop values
    assert autograd.training is False  # nor did it change this thread's flag
