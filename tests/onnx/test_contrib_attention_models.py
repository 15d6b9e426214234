"""A BERT-style encoder fused by onnxruntime's transformer optimizer into com.microsoft
Attention or MultiHeadAttention: sonnx runs it as onnxruntime does, in eager and graph mode,
and exports it back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model
from torch import nn

import sonnx
import sonnx.autograd as autograd
from sonnx import opt
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor, to_numpy

HIDDEN, HEADS, VOCAB = 32, 4, 50


class EncoderLayer(nn.Module):
    """Self-attention written as the optimizer's attention fusion expects it (separate Q, K, V
    projections, heads split by view + permute, additive mask), then a feed-forward block."""

    def __init__(self) -> None:
        super().__init__()
        self.size = HIDDEN // HEADS
        self.q, self.k = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN)
        self.v = nn.Linear(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.ff1, self.ff2 = nn.Linear(HIDDEN, 2 * HIDDEN), nn.Linear(2 * HIDDEN, HIDDEN)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, HEADS, self.size).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, v = self.heads(self.q(x)), self.heads(self.v(x))
        k = self.heads(self.k(x)).permute(0, 1, 3, 2)
        probs = torch.softmax(torch.matmul(q, k) / self.size**0.5 + mask, -1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        x = self.norm1(x + self.out(context.view(x.shape)))
        return self.norm2(x + self.ff2(torch.relu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.norm = nn.Embedding(VOCAB, HIDDEN), nn.LayerNorm(HIDDEN)
        self.layers = nn.ModuleList([EncoderLayer(), EncoderLayer()])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embed(input_ids))
        mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _attention_only(op_type: str) -> FusionOptions:
    """The optimizer's BERT options with every fusion but attention switched off, fusing into
    ``op_type`` (Attention, or MultiHeadAttention after separate Q, K, V MatMuls)."""
    options = FusionOptions("bert")
    for name, value in vars(options).items():
        if name.startswith("enable_") and isinstance(value, bool):
            setattr(options, name, name == "enable_attention")
    options.use_multi_head_attention = op_type == "MultiHeadAttention"
    return options


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = Path(tmp_path_factory.mktemp("bert")) / "encoder.onnx"
    ids, mask = torch.zeros(2, 5, dtype=torch.int64), torch.ones(2, 5, dtype=torch.int64)
    dims = {0: "batch", 1: "seq"}
    torch.onnx.export(
        Encoder().eval(), (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
        output_names=["hidden"], dynamic_axes={"input_ids": dims, "attention_mask": dims},
        opset_version=17, dynamo=False,
    )  # fmt: skip
    return path


def _optimize(path: Path, op_type: str) -> onnx.ModelProto:
    model = optimize_model(
        str(path), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN,
        optimization_options=_attention_only(op_type), opt_level=0,
    )  # fmt: skip
    # As a user would: saving adds the com.microsoft opset import the in-memory model lacks.
    saved = path.with_name(f"{op_type}.onnx")
    model.save_model_to_file(str(saved))
    return onnx.load(str(saved))


@pytest.fixture(scope="module", params=["Attention", "MultiHeadAttention"])
def optimized(request: pytest.FixtureRequest, exported: Path) -> tuple[str, onnx.ModelProto]:
    """(the op type the optimizer was asked to fuse into, the optimized model)."""
    return request.param, _optimize(exported, request.param)


def _inputs() -> list[np.ndarray]:
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, 5)).astype(np.int64)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)
    return [ids, mask]


def _onnxruntime(model: onnx.ModelProto, inputs: list[np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input]
    return session.run(None, dict(zip(names, inputs, strict=True)))[0]


def test_optimizer_fuses_attention(optimized: tuple[str, onnx.ModelProto]) -> None:
    op_type, model = optimized
    fused = [n.op_type for n in model.graph.node if n.domain == "com.microsoft"]
    assert fused == [op_type, op_type]


def test_optimized_encoder_matches_onnxruntime(optimized: tuple[str, onnx.ModelProto]) -> None:
    _, optimized = optimized
    inputs = _inputs()
    (got,) = sonnx.prepare(optimized).run(inputs)
    np.testing.assert_allclose(to_numpy(got), _onnxruntime(optimized, inputs), rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_graph_mode_equals_eager(exported: Path) -> None:
    """The file's one graph-mode compile: the Attention variant."""
    model, inputs = _optimize(exported, "Attention"), _inputs()
    (compiled,) = sonnx.prepare(model, use_graph=True).run(inputs)
    (eager,) = sonnx.prepare(model).run(inputs)
    np.testing.assert_allclose(to_numpy(compiled), to_numpy(eager), rtol=1e-5, atol=1e-6)


def test_optimized_encoder_exports_as_it_came(optimized: tuple[str, onnx.ModelProto]) -> None:
    _, optimized = optimized
    arrays = _inputs()
    inputs = [Tensor(data=a, requires_grad=False, name=i.name)
              for a, i in zip(arrays, optimized.graph.input, strict=True)]  # fmt: skip
    (out,) = sonnx.prepare(optimized).run({t.name: t for t in inputs})
    exported = to_onnx(inputs, [out])
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in optimized.graph.node]
    np.testing.assert_allclose(_onnxruntime(exported, arrays), to_numpy(out), rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_optimized_encoder_trains_through_attention(
    optimized: tuple[str, onnx.ModelProto],
) -> None:
    """One SGD step on the imported model: the fused projection's weights get finite, nonzero
    gradients and the loss falls."""
    _, optimized = optimized
    model = sonnx.SONNXModel(optimized)
    sgd = opt.SGD(lr=1e-3)
    target = Tensor(data=np.random.default_rng(2).standard_normal((2, 5, HIDDEN)).astype(
        np.float32), requires_grad=False)  # fmt: skip
    previous, autograd.training = autograd.training, True
    try:
        losses = []
        for _ in range(2):
            loss = autograd.mse_loss(model.forward(*_inputs())[0], target)
            losses.append(float(to_numpy(loss).reshape(-1)[0]))
            grads = {}
            for p, g in autograd.backward(loss):
                grads[p.name] = to_numpy(g)
                sgd.update(p, g)
            sgd.step()
    finally:
        autograd.training = previous
    fused = [n.input[1] for n in optimized.graph.node if n.op_type == "Attention"]
    fused += [n.input[3] for n in optimized.graph.node if n.op_type == "MultiHeadAttention"]
    for name in fused:
        assert np.isfinite(grads[name]).all() and np.abs(grads[name]).max() > 0
    assert losses[1] < losses[0]
