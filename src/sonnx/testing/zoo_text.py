"""Text stand-ins for the model zoo benchmark: an OCR recogniser and a quantized BERT encoder.

- :class:`CRNN` imitates a PaddleOCR/EasyOCR CRNN text recogniser: a conv stack that pools the
  48-pixel height to one row, ``Squeeze``/``Transpose`` to a sequence, a bidirectional
  ``LSTM`` (exported with ``batch_first`` transposes and the direction axis folded by
  ``Reshape``) and a linear CTC head with ``Softmax``; input ``[batch, 3, 48, width]`` with a
  dynamic width.
- :class:`BertEncoder` imitates a BERT-base export (Hugging Face's ``input_ids``,
  ``attention_mask``, ``token_type_ids``, all int64 ``[batch, sequence]``; positions computed
  with ``Shape -> Gather -> Range``; the mask ``Cast`` to float) returning the last hidden
  state and the pooled output. Layers are ``torch_models.EncoderLayer`` (post-LN, GELU).
- :func:`quantize_weights` rewrites an exported model as dynamically-quantized files look:
  each large float ``MatMul`` weight becomes an int8 initializer with per-column scales behind
  a ``DequantizeLinear`` (axis 1), each large ``Gather`` table (embeddings) an int8
  initializer behind ``Cast`` + ``Mul`` by its scale.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from sonnx.testing.torch_models import EncoderLayer, export

TEXT_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class CRNN(nn.Module):
    """Conv/BN/ReLU stages (2x2 pools, then pools of the height only), a BiLSTM, a CTC head.

    ``width`` scales the conv channels (32 is about PaddleOCR's small recogniser), ``hidden``
    is the LSTM's, ``num_classes`` counts the CTC blank.
    """

    HEIGHT = 48

    def __init__(self, num_classes: int = 97, width: int = 32, hidden: int = 96) -> None:
        super().__init__()
        c = [width, 2 * width, 4 * width, 8 * width]

        def stage(cin: int, cout: int, pool: tuple[int, int]) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(pool, pool),
            ]  # fmt: skip

        self.convs = nn.Sequential(
            *stage(3, c[0], (2, 2)), *stage(c[0], c[1], (2, 2)),  # 48 -> 12, width / 4
            *stage(c[1], c[2], (2, 1)), *stage(c[2], c[3], (2, 1)),  # 12 -> 3
            nn.MaxPool2d((3, 1)),  # 3 -> 1: one feature column per 4 pixels of width
        )  # fmt: skip
        self.rnn = nn.LSTM(c[3], hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.convs(x).squeeze(2).permute(0, 2, 1)  # [batch, width / 4, channels]
        y, _ = self.rnn(seq)
        return torch.softmax(self.fc(y), dim=2)


class BertEncoder(nn.Module):
    """BERT's embeddings (token, position, token type, LayerNorm), post-LN layers and pooler.

    BERT-base is ``hidden=768, heads=12, layers=12, ffn=3072, vocab=30522``; the benchmark uses
    ``hidden=256, layers=4`` to stay affordable on two cores.
    """

    def __init__(
        self,
        vocab: int = 30522,
        hidden: int = 256,
        heads: int = 4,
        layers: int = 4,
        ffn: int = 1024,
        max_len: int = 512,
        type_vocab: int = 2,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_len, hidden)
        self.types = nn.Embedding(type_vocab, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], dtype=torch.int64).unsqueeze(0)
        x = self.tokens(input_ids) + self.types(token_type_ids) + self.positions(positions)
        x = self.ln(x)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


def text_axes() -> dict[str, dict[int, str]]:
    """``dynamic_axes`` of :class:`BertEncoder`'s export: batch and sequence everywhere."""
    axes = {n: {0: "batch", 1: "sequence"} for n in [*TEXT_INPUTS, "last_hidden_state"]}
    return axes | {"pooler_output": {0: "batch"}}


def text_inputs(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids, a mask padding the end of each row, two segments of token types."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq), dtype=np.int64)
    lengths = rng.integers(seq // 2, seq + 1, batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    types = (np.arange(seq)[None, :] >= seq // 2).astype(np.int64).repeat(batch, 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def export_crnn(module: CRNN, opset: int = 17) -> onnx.ModelProto:
    """``image [batch, 3, 48, width]`` -> ``probs [batch, width / 4, classes]``."""
    axes = {"image": {0: "batch", 3: "width"}, "probs": {0: "batch", 1: "steps"}}
    example = torch.randn(1, 3, CRNN.HEIGHT, 64)
    return export(module, (example,), opset, ["image"], ["probs"], dynamic_axes=axes)


def export_bert(
    module: BertEncoder, opset: int = 17, quantize: bool = True, min_elements: int = 1024
) -> onnx.ModelProto:
    """The encoder's export (outputs ``last_hidden_state``, ``pooler_output``), with its large
    weights int8 (:func:`quantize_weights`) unless ``quantize`` is False."""
    vocab = module.tokens.num_embeddings
    example = tuple(torch.from_numpy(a) for a in text_inputs(2, 8, vocab).values())
    names = ["last_hidden_state", "pooler_output"]
    model = export(module, example, opset, TEXT_INPUTS, names, dynamic_axes=text_axes())
    return quantize_weights(model, min_elements) if quantize else model


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[str, int]]]:
    uses: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node.op_type, i))
    return uses


def quantize_weights(model: onnx.ModelProto, min_elements: int = 1024) -> onnx.ModelProto:
    """A copy of ``model`` whose large float weights are stored as int8 (symmetric, zero point
    0): ``MatMul`` right-hand sides per output column behind ``DequantizeLinear``, ``Gather``
    tables per tensor behind ``Cast`` + ``Mul``. The dequantized tensors keep the weights'
    names, so the consumers are untouched. Needs opset 13 or later (per-axis dequantize)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    uses = _consumers(graph)
    kept, added, front = [], [], []
    for init in graph.initializer:
        w = numpy_helper.to_array(init)
        role = set(uses.get(init.name, []))
        if w.dtype != np.float32 or w.size < min_elements:
            kept.append(init)
        elif role == {("MatMul", 1)} and w.ndim == 2:
            scale = np.maximum(np.abs(w).max(axis=0), 1e-8) / 127
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            added += [
                numpy_helper.from_array(q, f"{init.name}_quantized"),
                numpy_helper.from_array(scale.astype(np.float32), f"{init.name}_scale"),
                numpy_helper.from_array(np.zeros(w.shape[1], np.int8), f"{init.name}_zero_point"),
            ]
            front.append(
                helper.make_node(
                    "DequantizeLinear",
                    [f"{init.name}_quantized", f"{init.name}_scale", f"{init.name}_zero_point"],
                    [init.name],
                    name=f"{init.name}_DequantizeLinear",
                    axis=1,
                )
            )
        elif role == {("Gather", 0)}:
            scale = np.float32(max(float(np.abs(w).max()), 1e-8) / 127)
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            added += [
                numpy_helper.from_array(q, f"{init.name}_quantized"),
                numpy_helper.from_array(np.array(scale, np.float32), f"{init.name}_scale"),
            ]
            front += [
                helper.make_node(
                    "Cast", [f"{init.name}_quantized"], [f"{init.name}_float"],
                    name=f"{init.name}_Cast", to=TensorProto.FLOAT,
                ),
                helper.make_node(
                    "Mul", [f"{init.name}_float", f"{init.name}_scale"], [init.name],
                    name=f"{init.name}_Mul",
                ),
            ]  # fmt: skip
        else:
            kept.append(init)
    nodes = [*front, *graph.node]
    del graph.initializer[:]
    graph.initializer.extend([*kept, *added])
    del graph.node[:]
    graph.node.extend(nodes)
    # A dequantized weight is no longer an initializer: drop it from the inputs if listed.
    names = {n.output[-1] for n in front}
    inputs = [i for i in graph.input if i.name not in names]
    del graph.input[:]
    graph.input.extend(inputs)
    onnx.checker.check_model(out)
    return out
