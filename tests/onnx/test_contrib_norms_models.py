"""Models written by onnxruntime's transformer optimizer carry its fused norms and activations.

A small BERT-style encoder (embeddings + LayerNorm + two post-norm layers with GELU) and a
Llama-style RMSNorm stack, written here in torch and exported with ``torch.onnx.export``, go
through ``onnxruntime.transformers.optimizer.optimize_model`` with attention fusion off, so the
optimized graphs hold EmbedLayerNormalization, SkipLayerNormalization, BiasGelu or FastGelu,
SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization. sonnx runs them equal to
onnxruntime, exports them back to the same operators, trains them one SGD step, and (once, for
the encoder) compiles them in graph mode. The encoder after ``quantize_dynamic`` (with and
without the attention fusion) carries QEmbedLayerNormalization and QAttention.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model
from torch import nn

import sonnx
from sonnx import autograd, opt
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.export_check import ort_session

HIDDEN, HEADS, VOCAB, MAX_LEN, FFN = 16, 2, 30, 8, 32


class EncoderLayer(nn.Module):
    """Post-norm self-attention and GELU feed-forward, shaped as the optimizer's BERT fusions
    expect (Add -> LayerNorm for the skip norms, MatMul + Add -> Gelu for BiasGelu)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-12), nn.LayerNorm(HIDDEN, eps=1e-12)
        self.up, self.down = nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, HEADS, HIDDEN // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-1, -2) / (HIDDEN // HEADS) ** 0.5 + mask_bias
        context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, n, HIDDEN)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))


class Encoder(nn.Module):
    """Word + position + segment embeddings and their LayerNorm, then two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.word, self.position = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(MAX_LEN, HIDDEN)
        self.segment = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(2))

    def forward(self, ids: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.norm(self.word(ids) + self.position(positions) + self.segment(segments))
        mask_bias = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(HIDDEN) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = 1.0 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * (x * inv_rms)


class LlamaBlock(nn.Module):
    """Pre-norm residual blocks with RMSNorm and a SiLU-gated MLP, as Llama writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList(RMSNorm() for _ in range(3))
        self.proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate, self.up = nn.Linear(HIDDEN, FFN, bias=False), nn.Linear(HIDDEN, FFN, bias=False)
        self.down = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.proj(self.norms[0](x))
        n = self.norms[1](h)
        h = h + self.down(nn.functional.silu(self.gate(n)) * self.up(n))
        return self.norms[2](h)


def _optimized(
    module: nn.Module,
    args: tuple,
    names: list[str],
    path: Path,
    model_type: str,
    opt_level: int = 1,
    **options,
) -> onnx.ModelProto:
    """``module`` exported by torch (opset 17, dynamic batch and sequence), optimized by
    onnxruntime at ``opt_level`` with attention fusion off and ``options`` set on its
    FusionOptions, saved and loaded again."""
    torch.onnx.export(
        module.eval(),
        args,
        str(path),
        input_names=names,
        output_names=["output"],
        dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names},
        opset_version=17,
        dynamo=False,
    )
    fusion = FusionOptions(model_type)
    fusion.enable_attention = False
    for key, value in options.items():
        setattr(fusion, key, value)
    optimized = optimize_model(
        str(path),
        model_type=model_type,
        num_heads=HEADS,
        hidden_size=HIDDEN,
        optimization_options=fusion,
        opt_level=opt_level,
    )
    # as users get it: the saved file (saving adds the com.microsoft opset import)
    saved = path.with_name(f"{path.stem}_optimized.onnx")
    optimized.save_model_to_file(str(saved))
    return onnx.load(saved)


def _encoder_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq - 2 :] = 0
    return {
        "input_ids": rng.integers(0, VOCAB, (batch, seq)),
        "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None].repeat(batch, 0),
        "attention_mask": mask,
    }


def _encoder(directory: Path, gelu: str, opt_level: int) -> onnx.ModelProto:
    """The optimized encoder; ``gelu="FastGelu"`` has the optimizer approximate GELU."""
    torch.manual_seed(0)
    feeds = {k: torch.tensor(v) for k, v in _encoder_feeds(2, MAX_LEN, 0).items()}
    return _optimized(
        Encoder(),
        tuple(feeds.values()),
        list(feeds),
        directory / "encoder.onnx",
        "bert",
        opt_level,
        enable_gelu_approximation=gelu == "FastGelu",
    )


#: (GELU fusion, opt_level): the optimizer's own fusions alone at level 0, onnxruntime's
#: graph optimizations before them from level 1 (which the embedding fusion needs).
ENCODERS = [("BiasGelu", 0), ("BiasGelu", 1), ("FastGelu", 2)]


@pytest.fixture(scope="module", params=ENCODERS, ids=lambda p: f"{p[0]}-level{p[1]}")
def encoder(request, tmp_path_factory) -> tuple[onnx.ModelProto, int]:
    return _encoder(tmp_path_factory.mktemp("encoder"), *request.param), request.param[1]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> onnx.ModelProto:
    torch.manual_seed(0)
    x = torch.randn(2, 5, HIDDEN)
    return _optimized(
        LlamaBlock(), (x,), ["x"], tmp_path_factory.mktemp("llama") / "llama.onnx", "gpt2"
    )


def _llama_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((batch, seq, HIDDEN), np.float32)}


def _op_types(model: onnx.ModelProto) -> Counter:
    return Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _sonnx(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **options):
    inputs = [Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()]
    return inputs, list(sonnx.prepare(model, **options).run({t.name: t for t in inputs}))


def _same_as_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    expected = ort_session(model).run(None, feeds)
    _, got = _sonnx(model, feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(to_numpy(g), e, rtol=1e-4, atol=1e-5)


def _reexports_to_the_same_ops(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    inputs, outputs = _sonnx(model, feeds)
    exported = to_onnx(inputs, outputs)
    assert _op_types(exported) == _op_types(model)
    for e, g in zip(ort_session(model).run(None, feeds), ort_session(exported).run(None, feeds),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def _one_sgd_step(model: onnx.ModelProto, feeds: dict[str, np.ndarray], trained: set[str]):
    """One SGD step on ``mean(output^2)``: finite gradients reach every weight of ``trained``
    (the fused nodes' weights) and the loss falls."""
    rep = sonnx.prepare(model)
    inputs = [Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()]
    sgd = opt.SGD(lr=0.05)

    def loss() -> Tensor:
        (out,) = rep.run(inputs)
        return autograd.reduce_mean(autograd.mul(out, out), keepdims=0)

    autograd.training = True
    try:
        before = loss()
        reached = set()
        for param, grad in autograd.backward(before):
            assert np.isfinite(to_numpy(grad)).all(), param.name
            reached.add(param.name)
            sgd.update(param, grad)
        sgd.step()
        after = loss()
    finally:
        autograd.training = False
    assert trained <= reached, trained - reached
    assert float(to_numpy(after)) < float(to_numpy(before))


def _inputs_of(model: onnx.ModelProto, op_type: str, positions: tuple[int, ...]) -> set[str]:
    return {n.input[i] for n in model.graph.node if n.op_type == op_type for i in positions}


# ---- the BERT-style encoder -------------------------------------------------------------------


def test_optimized_encoder_holds_the_fused_ops(encoder) -> None:
    model, opt_level = encoder
    ops = {op for _, op in _op_types(model)}
    assert "SkipLayerNormalization" in ops and len({"BiasGelu", "FastGelu"} & ops) == 1
    assert ("EmbedLayerNormalization" in ops) == (opt_level >= 1)
    assert "Attention" not in ops and "LayerNormalization" not in ops


@pytest.mark.parametrize(("batch", "seq", "seed"), [(2, 8, 1), (3, 5, 2)])
def test_optimized_encoder_equals_onnxruntime(encoder, batch, seq, seed) -> None:
    _same_as_onnxruntime(encoder[0], _encoder_feeds(batch, seq, seed))


def test_optimized_encoder_reexports_to_the_same_ops(encoder) -> None:
    _reexports_to_the_same_ops(encoder[0], _encoder_feeds(2, 6, 3))


def test_optimized_encoder_trains_one_step(encoder) -> None:
    model = encoder[0]
    trained = _inputs_of(model, "EmbedLayerNormalization", (2, 3, 4, 5, 6))
    trained |= _inputs_of(model, "SkipLayerNormalization", (2, 3))
    _one_sgd_step(model, _encoder_feeds(2, 8, 4), trained)


def test_optimized_encoder_in_graph_mode_equals_eager(tmp_path) -> None:
    """The file's one compile: the BiasGelu encoder."""
    encoder = _encoder(tmp_path, "BiasGelu", 1)
    feeds = _encoder_feeds(2, 8, 5)
    _, eager = _sonnx(encoder, feeds)
    rep = sonnx.prepare(encoder, use_graph=True)
    got = rep.run([Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()])
    assert rep.graph_runner.compile_count == 1 and rep.graph_runner.fallback is None
    np.testing.assert_allclose(to_numpy(got[0]), to_numpy(eager[0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attention", [False, True], ids=["matmuls", "attention"])
def test_dynamically_quantized_encoder_equals_onnxruntime(tmp_path, attention) -> None:
    """quantize_dynamic turns the optimized encoder's EmbedLayerNormalization into
    QEmbedLayerNormalization (8-bit tables), its MatMuls into MatMulInteger and, with the
    attention fusion on, its Attention into QAttention: sonnx runs it as onnxruntime does and
    exports it back to the same fused operators (without the position ids' Shape/Range chain,
    which the quantized node no longer reads), which onnxruntime runs to the same outputs."""
    path, quantized = tmp_path / "optimized.onnx", tmp_path / "quantized.onnx"
    torch.manual_seed(0)
    feeds = {k: torch.tensor(v) for k, v in _encoder_feeds(2, MAX_LEN, 0).items()}
    optimized = _optimized(Encoder(), tuple(feeds.values()), list(feeds), tmp_path / "e.onnx",
                           "bert", 1, enable_attention=attention)  # fmt: skip
    onnx.save(optimized, path)
    # reduce_range: 7-bit weights, as onnxruntime advises where its u8s8 kernels saturate
    # (AVX2 without VNNI, as on an AMD EPYC: its MatMulInteger was then off by up to 0.29).
    quantize_dynamic(
        str(path), str(quantized), weight_type=QuantType.QInt8, reduce_range=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )  # fmt: skip
    model = onnx.load(quantized)
    ops = _op_types(model)
    assert ops[("com.microsoft", "QEmbedLayerNormalization")] == 1
    assert ops[("com.microsoft", "QAttention")] == (2 if attention else 0)
    _same_as_onnxruntime(model, _encoder_feeds(2, 8, 6))
    feeds = _encoder_feeds(3, 5, 7)
    inputs, outputs = _sonnx(model, feeds)
    exported = to_onnx(inputs, outputs)

    def fused(m: onnx.ModelProto) -> Counter:
        return Counter({k: n for k, n in _op_types(m).items() if k[0] == "com.microsoft"})

    assert fused(exported) == fused(model)
    _same_as_onnxruntime(exported, feeds)


# ---- the Llama-style RMSNorm stack ----------------------------------------------------------


def test_optimized_llama_block_holds_the_simplified_norms(llama) -> None:
    ops = _op_types(llama)
    assert ops[("ai.onnx", "SimplifiedLayerNormalization")] >= 1
    assert ops[("com.microsoft", "SkipSimplifiedLayerNormalization")] >= 1


def test_optimized_llama_block_equals_onnxruntime_reexports_and_trains(llama) -> None:
    for batch, seq, seed in ((2, 5, 1), (1, 7, 2)):
        _same_as_onnxruntime(llama, _llama_feeds(batch, seq, seed))
    _reexports_to_the_same_ops(llama, _llama_feeds(2, 3, 3))
    trained = _inputs_of(llama, "SimplifiedLayerNormalization", (1,))
    trained |= _inputs_of(llama, "SkipSimplifiedLayerNormalization", (2,))
    _one_sgd_step(llama, _llama_feeds(2, 5, 4), trained)
