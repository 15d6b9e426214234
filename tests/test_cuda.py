"""sonnx on a CUDA GPU: every test here is marked ``cuda`` and compares a run on the GPU with
the same run on the CPU (float32, TF32 off, within 1e-4 relative).

Where torch sees no GPU, ``tests/conftest.py`` skips them with the reason. Their logic can be
checked without one: ``SONNX_CUDA_TESTS_ON=cpu pytest -m cuda`` runs the same bodies with the
CPU standing in for the GPU (so they compare the CPU with itself, which catches broken test
code and API misuse, not device bugs). ``scripts/gpu-check.sh`` runs them on a lent GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.distributed as tdist
from onnx import TensorProto, helper

import sonnx
from sonnx import autograd, opt
from sonnx import dist as sonnx_dist
from sonnx.device import Device, get_default_device, set_default_device, set_seed
from sonnx.onnx.exporter import to_onnx
from sonnx.opt.loss_scaler import GROWTH_TRACKER, SCALE
from sonnx.runtime.cuda_graphs import capture_cuda_graph
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models
from sonnx.testing.host_reads import count_host_reads, device_values
from sonnx.walkthrough import CNN, LayerCNN
from tests.testing.test_zoo import FAMILIES, case

pytestmark = pytest.mark.cuda

#: The environment variable naming the device these tests treat as the GPU ("cuda" unless set).
DEVICE_VARIABLE = "SONNX_CUDA_TESTS_ON"
CPU = Device("cpu")
RTOL = ATOL = 1e-4
CLASSIFIERS = ["resnet50", "mobilenetv3"]


@pytest.fixture
def gpu() -> Iterator[Device]:
    """The device under test, with TF32 off (so float32 matmuls and convolutions round as on
    the CPU) and the default device restored afterwards."""
    dev = Device(os.environ.get(DEVICE_VARIABLE, "cuda"))
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    before = get_default_device()
    yield dev
    set_default_device(before)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def _close(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def _on(dev: Device, array: np.ndarray) -> Tensor:
    return Tensor(data=array, device=dev, requires_grad=False)


def _run(rep: sonnx.SingaRep, feeds: dict[str, np.ndarray], dev: Device) -> list[np.ndarray]:
    outs = rep.run(feeds)
    assert {t.device for t in outs} == {dev}
    return [to_numpy(t) for t in outs]


# ---- imported zoo stand-ins: run, graph mode, train, export ----------------------------------


@pytest.mark.parametrize("name", list(FAMILIES))
def test_zoo_stand_in_runs_on_the_gpu_as_on_the_cpu(gpu: Device, name: str) -> None:
    c = case(name)
    on_gpu, on_cpu = sonnx.prepare(c.model, device=gpu), sonnx.prepare(c.model)
    assert {t.device for t in on_gpu.tensor_map.values()} == {gpu}
    for feeds in c.feeds:
        _close(_run(on_gpu, feeds, gpu), _run(on_cpu, feeds, CPU))


def test_graph_mode_compiles_on_the_gpu_equal_to_eager_and_loads_from_its_store(
    gpu: Device,
) -> None:
    """One stand-in in graph mode (inductor: Triton kernels on a GPU): each shape's result
    equals the eager run's, and a second prepare loads the compiled graph from the store."""
    c = case("resnet50")
    eager = sonnx.prepare(c.model, device=gpu)
    first = sonnx.prepare(c.model, device=gpu, use_graph=True)
    for feeds in c.feeds:
        _close(_run(first, feeds, gpu), _run(eager, feeds, gpu))
    assert first.graph_runner.compile_count >= 1
    second = sonnx.prepare(c.model, device=gpu, use_graph=True)
    _close(_run(second, c.feeds[0], gpu), _run(eager, c.feeds[0], gpu))
    assert second.graph_runner.compile_count == 0
    assert second.graph_runner.loaded_count >= 1


def test_the_voice_activity_model_captured_as_a_cuda_graph_replays_equal_to_eager(
    gpu: Device,
) -> None:
    """The voice-activity stand-in (small ops: a few dozen kernels a chunk) compiled whole in
    graph mode and captured as a CUDA graph: streaming chunks, the state fed back, each
    replay's outputs equal the eager run's; the sample rate stays as captured."""
    if gpu.torch_device.type != "cuda":
        pytest.skip(
            "CUDA graphs need CUDA: nothing to capture on the CPU standing in for the GPU "
            f"({DEVICE_VARIABLE}=cpu)"
        )
    c = case("vad")
    eager = sonnx.prepare(c.model, device=gpu)
    rep = sonnx.prepare(c.model, device=gpu, use_graph=True)
    first = {n: _on(gpu, a) for n, a in c.feeds[2].items()}  # batch 3 at 16 kHz
    captured = capture_cuda_graph(rep, first)
    assert set(captured.inputs) == {"input", "h", "c"} and set(captured.fixed) == {"sr"}
    h, c_state = first["h"], first["c"]
    for chunk in range(3):
        x = _on(gpu, np.random.default_rng(chunk).standard_normal((3, 512)).astype(np.float32))
        expected = eager.run({"input": x, "sr": first["sr"], "h": h, "c": c_state})
        got = captured.run({"input": x, "h": h, "c": c_state})
        _close([to_numpy(t) for t in got], [to_numpy(t) for t in expected])
        h, c_state = expected[1], expected[2]
    assert captured.replays == 3


def _train_imported(
    model: onnx.ModelProto, dev: Device, inputs: list[np.ndarray], labels: np.ndarray
) -> tuple[list[float], sonnx.SONNXModel, list[Tensor]]:
    """Three SGD-momentum steps of ``model`` imported on ``dev``: the losses, the trained
    model and the inputs fed (on ``dev``)."""
    net = sonnx.SONNXModel(model, device=dev)
    net.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    xs, y = [_on(dev, a) for a in inputs], _on(dev, labels)
    net.train()
    losses = []
    for _ in range(3):
        autograd.training = True
        out = net.forward(*xs)[0]
        loss = autograd.softmax_cross_entropy(out, y)
        net.optimizer(loss)
        losses.append(float(to_numpy(loss).reshape(-1)[0]))
    autograd.training = False
    return losses, net, xs


def _check_training(model: onnx.ModelProto, gpu: Device, inputs: list[np.ndarray]) -> None:
    """Training on the GPU gives the CPU's losses and weights; the trained model exports from
    the GPU, and onnxruntime computes what sonnx computes there."""
    outputs = sonnx.prepare(model).run(inputs)[0]
    labels = np.arange(outputs.shape[0], dtype=np.int64) % outputs.shape[-1]
    gpu_losses, gpu_net, xs = _train_imported(model, gpu, inputs, labels)
    cpu_losses, cpu_net, _ = _train_imported(model, CPU, inputs, labels)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=RTOL, atol=ATOL)
    assert gpu_losses[-1] < gpu_losses[0]
    gpu_weights, cpu_weights = gpu_net.rep.params, cpu_net.rep.params
    assert {t.device for t in gpu_weights.values()} == {gpu}
    names = list(cpu_weights)
    _close([to_numpy(gpu_weights[n]) for n in names], [to_numpy(cpu_weights[n]) for n in names])

    outs = gpu_net.forward(*xs)
    exported = to_onnx(xs, outs)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in session.get_inputs()], inputs, strict=True))
    _close(session.run(None, feeds), [to_numpy(t) for t in outs])


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_zoo_classifier_trains_and_exports_on_the_gpu_as_on_the_cpu(gpu: Device, name: str) -> None:
    c = case(name)
    _check_training(c.model, gpu, [c.feeds[1]["images"]])


def test_imported_bert_style_encoder_trains_and_exports_on_the_gpu_as_on_the_cpu(
    gpu: Device,
) -> None:
    torch.manual_seed(0)
    module = torch_models.TinyBert(vocab=50, hidden=16, heads=2, layers=1, ffn=32, max_len=8)
    model = torch_models.export(
        module, torch_models.bert_inputs(1, 8, 50), 17, ["input_ids", "attention_mask"]
    )
    ids, mask = torch_models.bert_inputs(4, 8, 50)
    _check_training(model, gpu, [ids.numpy(), mask.numpy()])


def _bert_case() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    module = torch_models.TinyBert(vocab=50, hidden=16, heads=2, layers=1, ffn=32, max_len=8)
    names = ["input_ids", "attention_mask"]
    model = torch_models.export(module, torch_models.bert_inputs(1, 8, 50), 17, names)
    feeds = torch_models.bert_inputs(4, 8, 50)
    return model, {n: t.numpy() for n, t in zip(names, feeds, strict=True)}


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_an_eager_run_reads_device_values_on_the_host_at_most_once(gpu: Device, name: str) -> None:
    """An imported CNN and a BERT-style encoder, run eagerly on the GPU, read device values
    back at most once per run (the BERT encoder: its token-id check, deferred to the run's
    end); each run is counted, the first (which learns the shape values) included."""
    model, arrays = (case(name).model, case(name).feeds[1]) if name != "bert" else _bert_case()
    rep = sonnx.prepare(model, device=gpu)
    expected = sonnx.prepare(model).run(arrays)
    for _ in range(3):
        feeds = {n: _on(gpu, a) for n, a in arrays.items()}
        # On the CPU standing in for the GPU, the counter follows what would be on the GPU.
        stand_ins = device_values(rep, feeds) if gpu.torch_device.type == "cpu" else ()
        with count_host_reads(stand_ins) as reads:
            outs = rep.run(feeds)
        assert reads.count <= 1, f"host reads in one run: {reads.functions}"
        _close([to_numpy(t) for t in outs], [to_numpy(t) for t in expected])


# ---- models built with sonnx ---------------------------------------------------------------


def _walkthrough_losses(dev: Device, x: np.ndarray, y: np.ndarray) -> tuple[list[float], CNN]:
    set_seed(0)
    set_default_device(CPU)
    net = CNN()  # weights drawn on the CPU, then moved: both sides start equal
    for layer in (net.conv1, net.conv2, net.linear1, net.linear2):
        for t in layer.get_params().values():
            t.to_device(dev)
    sgd = opt.SGD(lr=0.05, momentum=0.9)
    losses = []
    for _ in range(3):
        autograd.training = True
        loss = autograd.softmax_cross_entropy(net.forward(_on(dev, x)), _on(dev, y))
        sgd(loss)
        losses.append(float(to_numpy(loss).reshape(-1)[0]))
    autograd.training = False
    return losses, net


def test_walkthrough_cnn_trains_on_the_gpu_as_on_the_cpu(gpu: Device) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    gpu_losses, gpu_net = _walkthrough_losses(gpu, x, y)
    cpu_losses, cpu_net = _walkthrough_losses(CPU, x, y)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=RTOL, atol=ATOL)
    assert gpu_net.linear2.W.device == gpu
    _close([to_numpy(gpu_net.conv1.W)], [to_numpy(cpu_net.conv1.W)])


def _layer_cnn(
    dev: Device, states: dict[str, np.ndarray] | None, optimizer, precision: str = "fp32"
) -> LayerCNN:
    """The walkthrough's ``LayerCNN`` compiled on ``dev``; ``states`` (the CPU model's) are
    copied in so both sides start equal."""
    set_default_device(dev)
    net = LayerCNN()
    net.set_optimizer(optimizer)
    feeds = [_on(dev, np.zeros((8, 1, 28, 28), np.float32))]
    net.compile(feeds, is_train=True, precision=precision)
    if states is not None:
        net.set_states(states)
    return net


def _autocast_losses(net: LayerCNN, dev: Device, x: np.ndarray, y: np.ndarray) -> list[float]:
    """Three training calls of ``net`` (``net(x, y)``: ``train_one_batch`` under the compiled
    precision's autocast)."""
    losses = []
    for _ in range(3):
        autograd.training = True
        _, loss = net(_on(dev, x), _on(dev, y))
        losses.append(float(to_numpy(loss).reshape(-1)[0]))
    autograd.training = False
    return losses


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_on_the_gpu_follows_float32(gpu: Device, precision: str) -> None:
    """``Model.compile(precision=...)`` on the GPU: autocast training of the walkthrough CNN
    follows the float32 losses within 3 % at every step (bf16 keeps 8 bits of mantissa, a
    relative error near 2**-8 per product, so a few steps stay within about 1 %; the CPU test
    of the same bound saw 0.4 %); under fp16, a step whose scaled gradients overflow (a scale
    of 2**40) is skipped, the weights untouched and the scale backed off."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    set_seed(0)
    full = _autocast_losses(_layer_cnn(gpu, None, opt.SGD(lr=0.01)), gpu, x, y)
    set_seed(0)
    net = _layer_cnn(gpu, None, opt.SGD(lr=0.01), precision)
    scaler = net.optimizer.loss_scaler
    if precision == "fp16":  # a scale whose first steps do not overflow, so no step is skipped
        scaler.set_states({SCALE: 2.0**8, GROWTH_TRACKER: 0})
    mixed = _autocast_losses(net, gpu, x, y)
    np.testing.assert_allclose(mixed, full, rtol=0.03)
    if precision == "fp16":
        assert scaler.skipped_steps == 0
        scaler.set_states({SCALE: 2.0**40, GROWTH_TRACKER: 0})
        weights = [to_numpy(t).copy() for t in net.get_params().values()]
        _autocast_losses(net, gpu, x[:, :, :, ::-1].copy(), y)
        assert scaler.skipped_steps >= 1 and scaler.scale < 2.0**40
        for before, after in zip(weights, net.get_params().values(), strict=True):
            np.testing.assert_array_equal(to_numpy(after), before)


def _train_one_batches(net: LayerCNN, dev: Device, x: np.ndarray, y: np.ndarray) -> list[float]:
    losses = []
    for _ in range(3):
        autograd.training = True
        _, loss = net.train_one_batch(_on(dev, x), _on(dev, y))
        losses.append(float(to_numpy(loss).reshape(-1)[0]))
    autograd.training = False
    return losses


@pytest.mark.parametrize("dist", [False, True], ids=["SGD", "DistOpt"])
def test_model_compile_and_train_one_batch_on_the_gpu_as_on_the_cpu(
    gpu: Device, dist: bool
) -> None:
    """``Model.compile`` places every state on the GPU; ``train_one_batch`` there follows the
    CPU's losses, with a plain SGD or with a one-process DistOpt over NCCL (gloo when the CPU
    stands in for the GPU). DistOpt exchanges nothing in a world of one, so the group's
    all-reduce is checked directly, through sonnx's collective wrapper, on a GPU tensor."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    set_seed(0)
    reference = _layer_cnn(CPU, None, opt.SGD(lr=0.05, momentum=0.9))
    states = {k: to_numpy(t).copy() for k, t in reference.get_states().items()}
    cpu_losses = _train_one_batches(reference, CPU, x, y)
    backend = "nccl" if gpu.is_cuda() else "gloo"
    with _one_process_group(backend) if dist else contextlib.nullcontext():
        sgd = opt.SGD(lr=0.05, momentum=0.9)
        net = _layer_cnn(gpu, states, opt.DistOpt(sgd) if dist else sgd)
        assert {t.device for t in net.get_states().values()} == {gpu}
        gpu_losses = _train_one_batches(net, gpu, x, y)
        if dist:
            assert sonnx_dist.device() == gpu  # NCCL's process trains on its own GPU
            probe = torch.arange(3.0, device=gpu.torch_device)
            sonnx_dist.run_collective("all-reduce", tdist.all_reduce, probe)
            assert probe.tolist() == [0.0, 1.0, 2.0]
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=RTOL, atol=ATOL)
    _close(
        [to_numpy(t) for t in net.get_states().values()],
        [to_numpy(t) for t in reference.get_states().values()],
    )


@contextlib.contextmanager
def _one_process_group(backend: str) -> Iterator[None]:
    """A torch.distributed group of this process alone (world size 1, tcp rendezvous on a
    free local port), so DistOpt really runs its collectives through ``backend``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0)
    try:
        yield
    finally:
        tdist.destroy_process_group()


# ---- the tree engine ------------------------------------------------------------------------


def _tree_regressor() -> onnx.ModelProto:
    """Two depth-2 regression trees over 3 features (ai.onnx.ml TreeEnsembleRegressor)."""
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
        nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0],
        nodes_values=[0.5, -0.2, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF",
                     "BRANCH_LT", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0],
        nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0],
        target_treeids=[0, 0, 0, 1, 1],
        target_nodeids=[2, 3, 4, 1, 2],
        target_ids=[0, 0, 0, 0, 0],
        target_weights=[1.5, -0.5, 0.25, 2.0, -1.0],
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "trees",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    # IR 10: the lent machines' onnxruntime (1.30) reads up to IR 13, older than their onnx
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_tree_engine_on_the_gpu_matches_the_cpu_and_onnxruntime(gpu: Device) -> None:
    model = _tree_regressor()
    x = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    feeds = {"X": x}
    expected = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    got = _run(sonnx.prepare(model, device=gpu), feeds, gpu)
    _close(got, expected)
    _close(got, _run(sonnx.prepare(model), feeds, CPU))


# ---- serving --------------------------------------------------------------------------------


def test_a_model_served_with_device_cuda_answers_as_on_the_cpu(gpu: Device, tmp_path) -> None:
    """The serving repository (what ``sonnx serve`` runs behind HTTP and gRPC) loads a model
    whose config says ``"device": "cuda"``, batches two requests on the GPU and answers what
    the CPU computes."""
    pytest.importorskip("starlette", reason="sonnx.serve needs starlette (the serve extra)")
    from sonnx.serve.metrics import ServeMetrics
    from sonnx.serve.repository import ModelRepository

    c = case("resnet50")
    folder = tmp_path / "resnet" / "1"
    folder.mkdir(parents=True)
    onnx.save(c.model, folder / "model.onnx")
    config = {"device": gpu.torch_device.type, "max_batch_size": 4, "max_queue_delay_ms": 50}
    (tmp_path / "resnet" / "config.json").write_text(json.dumps(config))
    images = c.feeds[1]["images"]

    async def two_requests() -> list[dict[str, np.ndarray]]:
        repository = ModelRepository(tmp_path, ServeMetrics())
        await repository.load_all()
        try:
            served = repository.get("resnet")
            assert Device(served.config.device) == gpu
            requests = [
                served.infer({"images": images[i : i + 1]}, None, time.perf_counter())
                for i in range(len(images))
            ]
            return await asyncio.gather(*requests)
        finally:
            await repository.close()

    answers = asyncio.run(two_requests())
    expected = _run(sonnx.prepare(c.model), {"images": images}, CPU)
    _close([np.concatenate([a["output"] for a in answers])], expected)
