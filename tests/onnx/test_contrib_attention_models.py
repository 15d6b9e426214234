"""A BERT-style encoder fused by onnxruntime's transformer optimizer into com.microsoft
Attention: sonnx runs it as onnxruntime does, in eager and graph mode, and exports it back."""

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


def _attention_only() -> FusionOptions:
    """The optimizer's BERT options with every fusion but attention switched off."""
    options = FusionOptions("bert")
    for name, value in vars(options).items():
        if name.startswith("enable_") and isinstance(value, bool):
            setattr(options, name, name == "enable_attention")
    return options


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    torch.manual_seed(0)
    path = Path(tmp_path_factory.mktemp("bert")) / "encoder.onnx"
    ids, mask = torch.zeros(2, 5, dtype=torch.int64), torch.ones(2, 5, dtype=torch.int64)
    dims = {0: "batch", 1: "seq"}
    torch.onnx.export(
        Encoder().eval(), (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
        output_names=["hidden"], dynamic_axes={"input_ids": dims, "attention_mask": dims},
        opset_version=17, dynamo=False,
    )  # fmt: skip
    model = optimize_model(
        str(path), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN,
        optimization_options=_attention_only(), opt_level=0,
    )  # fmt: skip
    # As a user would: saving adds the com.microsoft opset import the in-memory model lacks.
    model.save_model_to_file(str(path))
    return onnx.load(str(path))


def _inputs() -> list[np.ndarray]:
    ids = np.random.default_rng(1).integers(0, VOCAB, (2, 5)).astype(np.int64)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)
    return [ids, mask]


def _onnxruntime(model: onnx.ModelProto, inputs: list[np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input]
    return session.run(None, dict(zip(names, inputs, strict=True)))[0]


def test_optimizer_fuses_attention(optimized: onnx.ModelProto) -> None:
    fused = [n for n in optimized.graph.node if n.op_type == "Attention"]
    assert len(fused) == 2 and all(n.domain == "com.microsoft" for n in fused)


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_optimized_encoder_matches_onnxruntime(optimized: onnx.ModelProto, use_graph) -> None:
    inputs = _inputs()
    (got,) = sonnx.prepare(optimized, use_graph=use_graph).run(inputs)
    np.testing.assert_allclose(to_numpy(got), _onnxruntime(optimized, inputs), rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_optimized_encoder_exports_as_it_came(optimized: onnx.ModelProto) -> None:
    arrays = _inputs()
    inputs = [Tensor(data=a, requires_grad=False, name=i.name)
              for a, i in zip(arrays, optimized.graph.input, strict=True)]  # fmt: skip
    (out,) = sonnx.prepare(optimized).run({t.name: t for t in inputs})
    exported = to_onnx(inputs, [out])
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in optimized.graph.node]
    np.testing.assert_allclose(_onnxruntime(exported, arrays), to_numpy(out), rtol=1e-4,
                               atol=1e-5)  # fmt: skip
