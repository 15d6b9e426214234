"""prepare_qat and convert: fake quantization that trains, equals the Q/DQ nodes, and converts
to the QDQ model onnxruntime runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import sonnx
from sonnx import autograd, layer, opt, tensor
from sonnx.errors import BadInputError, BadModelError
from sonnx.quantization import convert, prepare_qat
from sonnx.quantization.qat_graph import BIASES_KEY, fold_batch_norms
from sonnx.testing import torch_models as tm
from tests.quantization.fashion import SeparableNet
from tests.quantization.models import depthwise_cnn, ort_quantized, tiny_bert


@pytest.fixture(scope="module")
def cnn() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    return depthwise_cnn()


def _unoptimized(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime running the QDQ nodes as they are (no fusion into integer kernels)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feed)[0]


def _assert_deploys(
    rep: sonnx.SingaRep, deployed: onnx.ModelProto, feed: dict[str, np.ndarray]
) -> None:
    """sonnx and onnxruntime (running the nodes as they are) agree exactly on the converted
    model, and it computes the trained graph's outputs up to its int32 biases: a bias trains
    in float and is deployed rounded to ``input_scale * weight_scale``, which may move a
    later activation by one code."""
    ours = tensor.to_numpy(sonnx.prepare(deployed).run(list(feed.values()))[0])
    np.testing.assert_array_equal(_unoptimized(deployed, feed), ours)
    trained = tensor.to_numpy(rep.run(list(feed.values()))[0])
    np.testing.assert_allclose(ours, trained, atol=5e-3)


def _step(rep: sonnx.SingaRep, feed: dict[str, np.ndarray], sgd: opt.SGD) -> float:
    autograd.training = True
    try:
        out = rep.run([tensor.from_numpy(v) for v in feed.values()])[0]
        labels = np.arange(out.shape[0], dtype=np.int32) % out.shape[-1]
        loss = autograd.softmax_cross_entropy(out, tensor.from_numpy(labels))
        sgd(loss)
        return tensor.to_numpy(loss).item()
    finally:
        autograd.training = False


@pytest.mark.parametrize("per_channel", [False, True])
def test_training_run_equals_the_qdq_nodes_and_the_converted_model(cnn, per_channel: bool):
    model, feeds = cnn
    rep = prepare_qat(model, feeds, per_channel=per_channel)
    x = feeds[0]["x"]
    inference = tensor.to_numpy(rep.run([x])[0])
    autograd.training = True
    try:
        training = rep.run([tensor.from_numpy(x)])[0]
    finally:
        autograd.training = False
    np.testing.assert_array_equal(tensor.to_numpy(training), inference)
    deployed = convert(rep)
    onnx.checker.check_model(deployed)
    _assert_deploys(rep, deployed, {"x": x})


def test_gradients_reach_every_weight_and_bias_and_training_lowers_the_loss(cnn):
    model, feeds = cnn
    rep = prepare_qat(model, feeds, per_channel=True)
    before = {k: tensor.to_numpy(t).copy() for k, t in rep.params.items()}
    assert any(k.endswith("bias") for k in before) and len(before) >= 8
    sgd = opt.SGD(lr=0.05)
    losses = [_step(rep, feeds[0], sgd) for _ in range(4)]
    assert losses[-1] < losses[0]
    assert all(not np.array_equal(before[k], tensor.to_numpy(t)) for k, t in rep.params.items())


def test_converted_model_is_onnxruntimes_qdq_format_with_the_trained_values(cnn):
    model, feeds = cnn
    rep = prepare_qat(model, feeds)
    _step(rep, feeds[0], opt.SGD(lr=0.05))
    deployed = convert(rep)
    ops = [n.op_type for n in deployed.graph.node]
    # integer weights behind DequantizeLinear: no QuantizeLinear reads an initializer
    inits = {t.name: t for t in deployed.graph.initializer}
    assert not [
        n for n in deployed.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in inits
    ]
    assert (
        "fc.weight_quantized" in inits
        and inits["fc.weight_quantized"].data_type == onnx.TensorProto.INT8
    )
    assert inits["fc.bias_quantized"].data_type == onnx.TensorProto.INT32
    assert ops.count("Conv") == 3 and "BatchNormalization" not in ops
    assert not any(p.key == BIASES_KEY for p in deployed.metadata_props)
    # the trained weight, quantized with its scale
    w = tensor.to_numpy(rep.constants["fc.weight"])
    scale = float(tensor.to_numpy(rep.constants["fc.weight_scale"]))
    expected = np.clip(np.round(w / np.float32(scale)), -128, 127)
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(inits["fc.weight_quantized"]), expected
    )


def test_learned_scales_train_and_are_written(cnn):
    model, feeds = cnn
    rep = prepare_qat(model, feeds, learn_scales=True)
    scales = [k for k in rep.params if k.endswith("_scale")]
    assert len(scales) >= 5
    before = {k: float(tensor.to_numpy(rep.params[k]).ravel()[0]) for k in scales}
    for _ in range(3):
        _step(rep, feeds[0], opt.SGD(lr=0.01))
    after = {k: float(tensor.to_numpy(rep.params[k]).ravel()[0]) for k in scales}
    assert sum(before[k] != after[k] for k in scales) >= len(scales) // 2
    deployed = convert(rep)
    written = {t.name: onnx.numpy_helper.to_array(t) for t in deployed.graph.initializer}
    for k in scales:
        np.testing.assert_array_equal(written[k], tensor.to_numpy(rep.params[k]))
    x = feeds[1]["x"]
    _assert_deploys(rep, deployed, {"x": x})


def test_a_model_quantized_by_onnxruntime_starts_from_its_scales(cnn, tmp_path: Path):
    model, feeds = cnn
    quantized = ort_quantized(model, feeds, tmp_path, per_channel=True)
    reference = sonnx.prepare(quantized).run([feeds[0]["x"]])[0]
    rep = prepare_qat(quantized, learn_scales=True)
    np.testing.assert_allclose(
        tensor.to_numpy(rep.run([feeds[0]["x"]])[0]), tensor.to_numpy(reference), atol=1e-5
    )
    scale = next(k for k in rep.params if k.endswith("_scale"))
    start = tensor.to_numpy(rep.params[scale]).copy()
    losses = [_step(rep, feeds[0], opt.SGD(lr=0.05)) for _ in range(3)]
    assert losses[-1] < losses[0]
    assert not np.array_equal(start, tensor.to_numpy(rep.params[scale]))
    deployed = convert(rep)
    x = feeds[2]["x"]
    _assert_deploys(rep, deployed, {"x": x})
    session = ort.InferenceSession(deployed.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": x})[0].shape == (2, 5)


def test_int4_weights_train_and_convert(cnn):
    model, feeds = cnn
    rep = prepare_qat(model, feeds, weight_type="int4", per_channel=True)
    assert any(n.domain == "com.microsoft" for n in rep.model.graph.node)  # opset 13: contrib Q/DQ
    losses = [_step(rep, feeds[0], opt.SGD(lr=0.05)) for _ in range(3)]
    assert losses[-1] < losses[0]
    deployed = convert(rep)
    assert any(t.data_type == onnx.TensorProto.INT4 for t in deployed.graph.initializer)
    x = feeds[1]["x"]
    _assert_deploys(rep, deployed, {"x": x})


def test_bert_style_encoder_trains_and_converts():
    model, feeds = tiny_bert()
    rep = prepare_qat(model, feeds)
    feed = feeds[0]
    autograd.training = True
    try:
        out = rep.run([tensor.from_numpy(v) for v in feed.values()])[0]
        loss = autograd.mean(autograd.mul(out, out))
        grads = dict(autograd.backward(loss))
    finally:
        autograd.training = False
    assert len(grads) == len(rep.params)
    deployed = convert(rep)
    onnx.checker.check_model(deployed)
    _assert_deploys(rep, deployed, feed)


def test_fold_batch_norms_keeps_the_outputs():
    torch.manual_seed(0)
    net = SeparableNet()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model = tm.export(net, (torch.randn(1, 1, 28, 28),), 13, ["x"], keep_batchnorm=True)
    folded = fold_batch_norms(model)
    assert "BatchNormalization" in [n.op_type for n in model.graph.node]
    assert "BatchNormalization" not in [n.op_type for n in folded.graph.node]
    x = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    np.testing.assert_allclose(
        _unoptimized(folded, {"x": x}), _unoptimized(model, {"x": x}), atol=1e-4
    )


def test_convert_of_a_model_without_fake_quantization_is_a_typed_error(cnn):
    with pytest.raises(BadInputError, match="no fake quantization"):
        convert(sonnx.prepare(cnn[0]))
    with pytest.raises(BadInputError, match="SingaRep"):
        convert(cnn[0])


def test_bad_calls_are_typed_errors(cnn, tmp_path: Path):
    model, feeds = cnn
    with pytest.raises(BadInputError, match="calibration"):
        prepare_qat(model)
    with pytest.raises(BadInputError, match="'y'"):
        prepare_qat(model, [{"y": feeds[0]["x"]}])
    with pytest.raises(BadInputError, match=r"calibration|feed"):
        prepare_qat(model, [])
    quantized = ort_quantized(model, feeds, tmp_path)
    with pytest.raises(BadInputError, match="per_channel"):
        prepare_qat(quantized, per_channel=True)
    with pytest.raises(BadModelError, match="nothing to quantize"):
        prepare_qat(model, feeds, op_types_to_quantize=["LSTM"])


def test_a_model_as_bytes_is_accepted(cnn):
    model, feeds = cnn
    rep = prepare_qat(model.SerializeToString(), feeds)
    np.testing.assert_array_equal(
        tensor.to_numpy(rep.run([feeds[0]["x"]])[0]),
        tensor.to_numpy(prepare_qat(model, feeds).run([feeds[0]["x"]])[0]),
    )
    with pytest.raises(BadModelError, match="not an ONNX model"):
        prepare_qat(b"\x08\x07\xff\xff", feeds)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_qat_model_trains_as_a_sonnx_model_with_a_layer_appended(cnn, precision: str):
    model, feeds = cnn

    class Tuned(sonnx.SONNXModel):
        def __init__(self, rep: sonnx.SingaRep) -> None:
            super().__init__(rep)
            self.head = layer.Linear(3)

        def forward(self, *x):
            return self.head(super().forward(*x)[0])

        def train_one_batch(self, x, y):
            out = self.forward(x)
            loss = autograd.softmax_cross_entropy(out, y)
            self.optimizer(loss)
            return out, loss

    rep = prepare_qat(model, feeds, learn_scales=True)
    net = Tuned(rep)
    net.set_optimizer(opt.SGD(lr=0.05))
    x = tensor.from_numpy(feeds[0]["x"])
    net.compile([x], is_train=True, precision=precision)
    y = tensor.from_numpy(np.array([0, 1], np.int32))
    scale = next(k for k in rep.params if k.endswith("_scale"))
    start = tensor.to_numpy(rep.params[scale]).copy()
    losses = [tensor.to_numpy(net(x, y)[1]).item() for _ in range(4)]
    assert losses[-1] < losses[0]
    assert scale in net.get_params() and not np.array_equal(
        start, tensor.to_numpy(rep.params[scale])
    )
    assert net.rep is rep
    deployed = convert(net.rep)
    assert sum(n.op_type == "QuantizeLinear" for n in deployed.graph.node) >= 3


def test_lora_adapters_keep_the_fake_quantization(cnn):
    """lora.add prepares the rewritten model anew: its Q/DQ pairs still fake-quantize in
    training, and convert still finds them (before, the pairs ran as plain nodes, which pass
    no gradient, and convert refused the model). A quantized product takes no adapter: its
    weight is a DequantizeLinear's output, which the error says."""
    from sonnx import lora
    from sonnx.lora.targets import LoraTargetError
    from sonnx.quantization.fake_quant import FAKE_QUANTIZE

    model, feeds = cnn
    with pytest.raises(LoraTargetError, match=r"take a computed weight \(a DequantizeLinear's"):
        lora.add(prepare_qat(model, feeds), "Gemm")
    rep = prepare_qat(model, feeds, nodes_to_exclude=["/fc/Gemm"])
    pairs = sum(f.name == FAKE_QUANTIZE for f in rep.program.fusions.values())
    assert lora.add(rep, "Gemm", rank=2) == ["fc"]
    assert sum(f.name == FAKE_QUANTIZE for f in rep.program.fusions.values()) == pairs > 0
    before = {k: tensor.to_numpy(t).copy() for k, t in rep.params.items()}
    _step(rep, feeds[0], opt.SGD(lr=0.05))
    moved = [k for k, t in rep.params.items() if not np.array_equal(before[k], tensor.to_numpy(t))]
    assert moved and all("lora" in k for k in moved)
    onnx.checker.check_model(convert(rep))
