"""A BERT-style encoder optimized by onnxruntime's transformer optimizer and quantized by
``quantize_dynamic`` fine-tunes its float parts in sonnx.

The quantized graph holds QEmbedLayerNormalization (its tables, gamma and beta int8), two
QAttention and, around them, DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul chains;
its float parameters are the SkipLayerNormalization weights and biases, the BiasGelu biases
and the QAttention biases. Every path from those biases to the output passes a product of
dynamically quantized activations, whose integer codes carry no gradient: the fused groups of
:mod:`sonnx.runtime.quantized_fusions` pass it straight through the rounding.

The encoder's LayerNorm weights and biases are drawn at random, as a trained model's are:
torch's exporter stores equal initializers once, so a fresh model's LayerNorms (all ones and
zeros) would share the embedding LayerNorm's, which ``quantize_dynamic`` then quantizes for
QEmbedLayerNormalization, leaving no float LayerNorm weight to train.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from torch import nn

import sonnx
from sonnx import autograd, opt
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.export_check import ort_session
from tests.onnx.test_contrib_norms_models import MAX_LEN, Encoder, _encoder_feeds, _optimized


def _trained_looking_encoder() -> Encoder:
    torch.manual_seed(0)
    encoder = Encoder()
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn_like(module.weight))
                module.bias.copy_(0.2 * torch.randn_like(module.bias))
    return encoder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the optimized float encoder, the same after quantize_dynamic)."""
    directory: Path = tmp_path_factory.mktemp("quantized_encoder")
    feeds = {k: torch.tensor(v) for k, v in _encoder_feeds(2, MAX_LEN, 0).items()}
    path = directory / "encoder.onnx"
    encoder = _trained_looking_encoder()
    optimized = _optimized(encoder, tuple(feeds.values()), list(feeds), path, "bert", 1,
                           enable_attention=True)  # fmt: skip
    onnx.save(optimized, directory / "optimized.onnx")
    # reduce_range: 7-bit weights, where onnxruntime's u8s8 kernels are exact on x86 without
    # VNNI (tests/contrib_quant_helpers.py)
    quantize_dynamic(
        str(directory / "optimized.onnx"), str(directory / "quantized.onnx"),
        weight_type=QuantType.QInt8, reduce_range=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )  # fmt: skip
    return optimized, onnx.load(directory / "quantized.onnx")


def _inputs(feeds: dict[str, np.ndarray]) -> list[Tensor]:
    return [Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()]


def _loss(rep: sonnx.SingaRep, feeds: dict[str, np.ndarray]) -> Tensor:
    (out,) = rep.run(_inputs(feeds))
    return autograd.reduce_mean(autograd.mul(out, out), keepdims=0)


def _gradients(rep: sonnx.SingaRep, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    autograd.training = True
    try:
        return {p.name: to_numpy(g) for p, g in autograd.backward(_loss(rep, feeds))}
    finally:
        autograd.training = False


def _float_parameters(model: onnx.ModelProto) -> set[str]:
    """The float weights of the fused norms, BiasGelu and QAttention nodes."""
    positions = {"SkipLayerNormalization": (2, 3, 4), "BiasGelu": (1,), "QAttention": (2,)}
    floats = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    return {
        n.input[i]
        for n in model.graph.node
        for i in positions.get(n.op_type, ())
        if i < len(n.input) and n.input[i] in floats
    }


def test_the_quantized_encoder_holds_the_quantized_fused_ops(models) -> None:
    _, model = models
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["QAttention"] == 2 and ops["QEmbedLayerNormalization"] == 1
    assert ops["MatMulInteger"] == 6 and ops["DynamicQuantizeLinear"] == 8
    groups = Counter(f.name for f in sonnx.prepare(model).program.fusions.values())
    assert groups["DynamicQuantizeLinear+QAttention"] == 2
    assert groups["DynamicQuantizeLinear+MatMulInteger"] == 6


def test_a_training_run_equals_the_nodes_and_onnxruntime(models) -> None:
    """The fused groups (which run where a gradient is needed) compute the nodes' values bit
    for bit; those equal onnxruntime's."""
    _, model = models
    feeds = _encoder_feeds(2, 8, 1)
    rep = sonnx.prepare(model)
    inference = to_numpy(rep.run(_inputs(feeds))[0])
    autograd.training = True
    try:
        training = rep.run(_inputs(feeds))[0]
    finally:
        autograd.training = False
    assert training.data.requires_grad
    np.testing.assert_array_equal(to_numpy(training), inference)
    expected = ort_session(model).run(None, feeds)[0]
    np.testing.assert_allclose(inference, expected, rtol=1e-4, atol=1e-5)


def test_one_sgd_step_moves_the_float_parameters_only(models) -> None:
    """Gradients reach every float weight (the first QAttention's bias through all the
    quantized products after it); one SGD step moves them and lowers the loss; the int8
    weights are untouched; the trained rep equals onnxruntime on its exported model."""
    _, model = models
    rep = sonnx.prepare(model)
    feeds = _encoder_feeds(2, 8, 2)
    integers = {n: to_numpy(t).copy() for n, t in rep.constants.items()
                if t.data.dtype in (torch.int8, torch.uint8)}  # fmt: skip
    trained = _float_parameters(model)
    before = {n: to_numpy(rep.params[n]).copy() for n in trained}
    sgd = opt.SGD(lr=0.05)
    autograd.training = True
    try:
        loss = _loss(rep, feeds)
        reached = set()
        for param, grad in autograd.backward(loss):
            assert np.isfinite(to_numpy(grad)).all(), param.name
            reached.add(param.name)
            sgd.update(param, grad)
        sgd.step()
        after = _loss(rep, feeds)
    finally:
        autograd.training = False
    assert trained <= reached, trained - reached
    assert float(to_numpy(after)) < float(to_numpy(loss))
    for name in trained:
        assert not np.array_equal(to_numpy(rep.params[name]), before[name]), name
    assert len(integers) >= 11
    for name, values in integers.items():
        np.testing.assert_array_equal(to_numpy(rep.constants[name]), values, err_msg=name)
    exported = rep.current_model()
    feeds = _encoder_feeds(3, 5, 3)
    expected = ort_session(exported).run(None, feeds)[0]
    np.testing.assert_allclose(to_numpy(rep.run(_inputs(feeds))[0]), expected, rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def _directional_difference(rep: sonnx.SingaRep, feeds, name: str, v: np.ndarray, eps: float):
    """Central difference of the loss along ``v`` in weight ``name`` (float64 loss)."""
    weight = rep.params[name].data
    start = weight.clone()
    values = []
    with torch.no_grad():
        for sign in (1, -1):
            weight.copy_(start + sign * eps * torch.from_numpy(v))
            out = to_numpy(rep.run(_inputs(feeds))[0]).astype(np.float64)
            values.append(np.mean(out * out))
        weight.copy_(start)
    return (values[0] - values[1]) / (2 * eps)


def _dequantized_surrogate(optimized: onnx.ModelProto, quantized: onnx.ModelProto):
    """The optimized float model with every weight that ``quantize_dynamic`` quantized
    replaced by its dequantized value: the float function whose gradients the straight-
    through estimator computes, but for the rounding of the activations."""
    values = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    surrogate = onnx.ModelProto()
    surrogate.CopyFrom(optimized)
    for init in surrogate.graph.initializer:
        codes = values.get(f"{init.name}_quantized")
        if codes is not None:
            zero = values[f"{init.name}_zero_point"].astype(np.float64)
            dequantized = (codes - zero) * values[f"{init.name}_scale"]
            init.CopyFrom(numpy_helper.from_array(dequantized.astype(np.float32), init.name))
    return surrogate


def test_gradients_after_the_last_product_equal_finite_differences(models) -> None:
    """The last SkipLayerNormalization's gamma, beta and bias reach the loss through no
    rounding: its gradient equals central differences of the quantized model itself. Along a
    random direction in float32 with step 1e-2: the loss is quadratic in gamma and beta (so
    the difference is exact but for rounding), and a float32 loss near 1 rounds by about 6e-8,
    which a step of 1e-2 turns into about 1e-5."""
    _, model = models
    rep = sonnx.prepare(model)
    feeds = _encoder_feeds(2, 8, 4)
    (last,) = [n for n in model.graph.node if "output" in n.output]
    grads = _gradients(rep, feeds)
    rng = np.random.default_rng(0)
    for name in last.input[2:5]:
        v = rng.standard_normal(grads[name].shape).astype(np.float32)
        numeric = _directional_difference(rep, feeds, name, v, 1e-2)
        assert float(np.sum(grads[name] * v)) == pytest.approx(numeric, rel=1e-3, abs=1e-4)


def test_straight_through_gradients_equal_the_dequantized_surrogate(models) -> None:
    """The biases of the first QAttention and BiasGelu and the first SkipLayerNormalization's
    gamma reach the loss through every quantized product after them. Their gradient is the
    straight-through estimate: the gradient of the dequantized-float surrogate (the float
    model with the dequantized weights, activations not rounded), evaluated on the rounded
    activations. It is compared with central differences of the surrogate along the
    gradient's own direction (where a wrong or partial gradient shows most). The two differ
    where the rounding moved the activations at which the nonlinearities are differentiated:
    by about the relative rounding of the outputs (the surrogate's output differs from the
    quantized model's by that much, 0.25% here; the gradients differ by 0.07% at most), so
    the tolerance is twice that measured difference."""
    optimized, model = models
    rep, surrogate = sonnx.prepare(model), sonnx.prepare(_dequantized_surrogate(optimized, model))
    feeds = _encoder_feeds(2, 8, 5)
    quantized_out = to_numpy(rep.run(_inputs(feeds))[0])
    surrogate_out = to_numpy(surrogate.run(_inputs(feeds))[0])
    rounding = float(np.linalg.norm(quantized_out - surrogate_out) / np.linalg.norm(surrogate_out))
    assert 0 < rounding < 0.02
    grads = _gradients(rep, feeds)
    first_norm = next(n for n in model.graph.node if n.op_type == "SkipLayerNormalization")
    first_gelu = next(n for n in model.graph.node if n.op_type == "BiasGelu")
    names = ["Attention_0_qkv_bias", first_gelu.input[1], first_norm.input[2]]
    for name in names:
        length = float(np.linalg.norm(grads[name]))
        numeric = _directional_difference(surrogate, feeds, name, grads[name] / length, 1e-2)
        assert length == pytest.approx(numeric, rel=2 * rounding), name
