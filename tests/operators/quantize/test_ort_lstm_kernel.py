"""onnxruntime's ``DynamicQuantizeLSTM`` kernel under sonnx (sonnx.operators.quantize.ort_lstm):
on LSTMs that ``quantize_dynamic`` turns into DynamicQuantizeLSTM (one direction, two, with
sequence_lens, with initial states) the bridged node equals onnxruntime bit for bit at the
bridge's thread count (torch's); graph mode records one call for every length;
``kernels="torch"``, a gradient, a weight fed at run time and a node onnxruntime refuses take
the torch path."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import quantize_dynamic

import sonnx
from sonnx import autograd
from sonnx.operators.quantize import ort_sessions
from sonnx.tensor import Tensor, to_numpy

RNG = np.random.default_rng(4545)
F32 = np.float32
WIDTH, HIDDEN, BATCH = 12, 10, 3
ORT_KERNEL = "onnxruntime's DynamicQuantizeLSTM"
# The torch path against onnxruntime on one thread (tests/operators/rnn/test_contrib_lstm.py).
TOLERANCE = {"rtol": 1e-5, "atol": 2e-6}


def lstm_model(
    folder: Path, direction: str, lengths: bool, states: bool, per_channel: bool
) -> onnx.ModelProto:
    """A float LSTM node over a sequence of any length, through quantize_dynamic."""
    d = 2 if direction == "bidirectional" else 1
    weights = {
        "W": RNG.standard_normal((d, 4 * HIDDEN, WIDTH)) * 0.3,
        "R": RNG.standard_normal((d, 4 * HIDDEN, HIDDEN)) * 0.3,
        "B": RNG.standard_normal((d, 8 * HIDDEN)) * 0.1,
    }
    state = [d, BATCH, HIDDEN]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["steps", BATCH, WIDTH])]
    if lengths:
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]))
    if states:
        for name in ("h0", "c0"):
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
    reads = ["X", "W", "R", "B", "lens" if lengths else "", *(["h0", "c0"] if states else [])]
    node = helper.make_node(
        "LSTM", reads, ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN, direction=direction
    )
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output]
    inits = [numpy_helper.from_array(v.astype(F32), k) for k, v in weights.items()]
    graph = helper.make_graph([node], "lstm", graph_inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    source, target = folder / "float.onnx", folder / "dynamic.onnx"
    onnx.save(model, source)
    # 7-bit weights: onnxruntime's u8 x s8 products saturate on x86 without VNNI
    # (tests/contrib_quant_helpers.py), which the torch path's comparisons do not model.
    quantize_dynamic(source, target, per_channel=per_channel, reduce_range=True)
    quantized = onnx.load(target)
    assert [n.op_type for n in quantized.graph.node] == ["DynamicQuantizeLSTM"]
    return quantized


def feeds_for(model: onnx.ModelProto, steps: int) -> dict[str, np.ndarray]:
    """Random feeds; entries of different lengths where the model reads sequence_lens."""
    feeds = {"X": RNG.standard_normal((steps, BATCH, WIDTH)).astype(F32)}
    declared = {i.name: i.type.tensor_type.shape.dim for i in model.graph.input}
    if "lens" in declared:
        feeds["lens"] = np.array([steps, max(steps - 2, 1), 1], np.int32)
    for name in ("h0", "c0"):
        if name in declared:
            dims = [x.dim_value for x in declared[name]]
            feeds[name] = RNG.standard_normal(dims).astype(F32)
    return feeds


def ort_outputs(model: onnx.ModelProto, feeds: dict, threads: int) -> list[np.ndarray]:
    """onnxruntime's run of the model on ``threads`` threads (its kernel quantizes each
    thread's part of the batch from its own range, so its results move with the count)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def sonnx_outputs(rep, feeds: dict) -> tuple[list[np.ndarray], str]:
    """The outputs as NumPy, and the kernel the node ran."""
    outs = rep.run({k: Tensor(data=v) for k, v in feeds.items()})
    return [to_numpy(o) for o in outs], rep.program.steps[0].op.kernel_used


CASES = {
    "forward": ("forward", False, False, False),
    "bidirectional_per_channel": ("bidirectional", False, False, True),
    "reverse_with_lengths": ("reverse", True, False, False),
    "bidirectional_with_lengths_and_states": ("bidirectional", True, True, True),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, onnx.ModelProto]:
    return {name: lstm_model(tmp_path_factory.mktemp(name), *case) for name, case in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_bridged_node_equals_onnxruntime_bit_for_bit(models, name):
    model = models[name]
    rep = sonnx.prepare(model)
    for steps in (7, 2):
        feeds = feeds_for(model, steps)
        got, kernel = sonnx_outputs(rep, feeds)
        assert kernel == ORT_KERNEL
        expected = ort_outputs(model, feeds, torch.get_num_threads())
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g, e)


def test_bridged_node_equals_onnxruntime_at_another_thread_count(models):
    """The session is made for torch's thread count at the call (and kept per count)."""
    model = models["bidirectional_with_lengths_and_states"]
    rep, feeds = sonnx.prepare(model), feeds_for(model, 6)
    previous = torch.get_num_threads()
    try:
        for threads in {1, 2, previous}:
            torch.set_num_threads(threads)
            got, _ = sonnx_outputs(rep, feeds)
            for g, e in zip(got, ort_outputs(model, feeds, threads), strict=True):
                np.testing.assert_array_equal(g, e)
    finally:
        torch.set_num_threads(previous)


def test_kernels_torch_runs_the_torch_path_within_its_tolerance(models):
    model = models["bidirectional_with_lengths_and_states"]
    feeds = feeds_for(model, 6)
    got, kernel = sonnx_outputs(sonnx.prepare(model, kernels="torch"), feeds)
    assert kernel == "torch's"
    for g, e in zip(got, ort_outputs(model, feeds, 1), strict=True):
        np.testing.assert_allclose(g, e, **TOLERANCE)


def test_a_gradient_takes_the_torch_path(models):
    model = models["forward"]
    feeds = feeds_for(model, 4)
    rep = sonnx.prepare(model)
    previous = autograd.training
    autograd.training = True
    try:
        x = Tensor(data=feeds["X"], requires_grad=True)
        y = rep.run({"X": x})[0]
    finally:
        autograd.training = previous
    assert rep.program.steps[0].op.kernel_used == "torch's"
    assert y.data.requires_grad
    np.testing.assert_allclose(to_numpy(y), ort_outputs(model, feeds, 1)[0], **TOLERANCE)


def test_a_weight_fed_at_run_time_takes_the_torch_path(models):
    """B as a graph input: a session holds its constants, so B is never bridged."""
    fed = onnx.ModelProto()
    fed.CopyFrom(models["forward"])
    node = fed.graph.node[0]
    (bias,) = [t for t in fed.graph.initializer if t.name == node.input[3]]
    fed.graph.input.append(helper.make_tensor_value_info(bias.name, TensorProto.FLOAT, bias.dims))
    fed.graph.initializer.remove(bias)
    feeds = {**feeds_for(fed, 5), bias.name: numpy_helper.to_array(bias)}
    got, kernel = sonnx_outputs(sonnx.prepare(fed), feeds)
    assert kernel == "torch's"
    np.testing.assert_allclose(got[0], ort_outputs(fed, feeds, 1)[0], **TOLERANCE)


def test_a_node_onnxruntime_refuses_warns_once_naming_it_and_runs_on_torch(models):
    """uint8 R codes beside int8 W codes: sonnx computes it, onnxruntime's schema wants one
    type for both."""
    mixed = onnx.ModelProto()
    mixed.CopyFrom(models["forward"])
    node = mixed.graph.node[0]
    node.name = "rnn/quantized_lstm"
    for k in (2, 11):  # R and its zero point, as uint8 around 128
        (found,) = [t for t in mixed.graph.initializer if t.name == node.input[k]]
        value = numpy_helper.to_array(found)
        assert value.dtype == np.int8
        found.CopyFrom(
            numpy_helper.from_array((value.astype(np.int16) + 128).astype(np.uint8), found.name)
        )
    feeds = feeds_for(mixed, 5)
    rep = sonnx.prepare(mixed)
    with pytest.warns(
        RuntimeWarning, match="DynamicQuantizeLSTM node 'rnn/quantized_lstm'.*torch path runs"
    ):
        got, kernel = sonnx_outputs(rep, feeds)
    assert kernel == "torch's"
    plain, _ = sonnx_outputs(sonnx.prepare(mixed, kernels="torch"), feeds)
    for g, e in zip(got, plain, strict=True):
        np.testing.assert_array_equal(g, e)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sonnx_outputs(rep, feeds)  # no second warning: the node stays on torch


def test_a_bridged_run_exports_the_node_back(models):
    model = models["reverse_with_lengths"]
    rep = sonnx.prepare(model)
    feeds = feeds_for(model, 5)
    xs = [Tensor(data=feeds["X"]), Tensor(data=feeds["lens"])]
    outs = rep.run(xs)
    assert rep.program.steps[0].op.kernel_used == ORT_KERNEL
    exported = sonnx.to_onnx(xs, outs)
    assert list(exported.graph.node) == list(model.graph.node)


def test_graph_mode_compiles_one_call_for_every_length(models, tmp_path, monkeypatch):
    """One compile for both lengths; one session for every run (the compiled code hands the
    call its small constants, the scales and zero points, in new buffers at each run: found
    by their addresses, each run built a session)."""
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    model = models["bidirectional_with_lengths_and_states"]
    rep = sonnx.prepare(model, use_graph=True)
    built = []

    class Counted(ort_sessions.SessionKernel):
        def __init__(self, *args) -> None:
            built.append(args[1].op_type)
            super().__init__(*args)

    monkeypatch.setattr(ort_sessions, "SessionKernel", Counted)
    per_run = []
    for steps in (6, 9, 6):
        built.clear()
        feeds = feeds_for(model, steps)
        got, _ = sonnx_outputs(rep, feeds)
        per_run.append(len(built))
        expected = ort_outputs(model, feeds, torch.get_num_threads())
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g, e)
    # The first run may build the node's session (or find the one an earlier test built for
    # equal constants); no later run builds one.
    assert per_run[0] <= 1 and per_run[1:] == [0, 0]
    assert [p.compiled for p in rep.graph_runner.parts()] == [True]
    assert len(list((tmp_path / "graphs").glob("*/*/graph.json"))) == 1
    assert f"{ORT_KERNEL} kernel: steps 0" in rep.explain(list(feeds.values()))
