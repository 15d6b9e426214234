"""A GroupQueryAttention decoder written with onnx.helper, in onnxruntime-genai's layout (its
input and output names, its attention-mask subgraph, a shared past/present buffer), for tests
and benchmarks that must run where onnxruntime-genai's builder is not installed (the GPU
machines), and the genai_config.json of such layouts. Random weights from a fixed seed.

The default :class:`GqaSizes` are the tests' one-layer decoder (vocabulary 48, hidden 32);
``bench/gpu_decode.py`` builds a larger one from the same function and rebuilds it in torch
from :func:`gqa_weights`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "GENAI_CONFIG",
    "GqaSizes",
    "genai_config",
    "gqa_decoder",
    "gqa_weights",
    "rotary_angles",
]

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_SIZE, MAX_POSITIONS = 48, 32, 4, 2, 16, 64


@dataclass(frozen=True)
class GqaSizes:
    """The sizes of :func:`gqa_decoder`'s model; ``ffn`` 0 leaves out the MLP blocks."""

    layers: int = 1
    hidden: int = HIDDEN
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    head_size: int = HEAD_SIZE
    vocab: int = VOCAB
    ffn: int = 0
    max_positions: int = MAX_POSITIONS


def genai_config(
    layers: int, share_buffer: bool, kv_heads: int = KV_HEADS, head_size: int = HEAD_SIZE
) -> dict:
    """The parts of onnxruntime-genai's config a cache layout reads (as its builder writes
    them), for ``layers`` layers of ``kv_heads`` heads of ``head_size``."""
    return {
        "model": {
            "decoder": {
                "num_hidden_layers": layers,
                "num_key_value_heads": kv_heads,
                "head_size": head_size,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            }
        },
        "search": {"past_present_share_buffer": share_buffer},
    }


#: The config of :func:`gqa_decoder`'s default model (it takes no position_ids: the layout
#: drops them).
GENAI_CONFIG = genai_config(layers=1, share_buffer=True)


def gqa_decoder(seed: int = 0, sizes: GqaSizes = GqaSizes()) -> onnx.ModelProto:
    """Embedding; per layer a GroupQueryAttention block (packed QKV, rotary) and, where
    ``sizes.ffn``, a SiLU MLP, each with a residual; an output head: logits (batch, sequence,
    vocab). No normalizations: the weights are scaled to keep activations near unit size."""
    weights = gqa_weights(seed, sizes)
    s = sizes
    angles = rotary_angles(s)
    initializers = [numpy_helper.from_array(w, name) for name, w in weights.items()]
    initializers += [
        numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"),
        numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(1, np.int64), "one_scalar"),
    ]
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["h_0"]),
        # genai's attn_mask_reformat: seqlens_k = ReduceSum(mask) - 1, total = mask's width.
        helper.make_node("ReduceSum", ["attention_mask", "one"], ["valid"], keepdims=0),
        helper.make_node("Sub", ["valid", "one"], ["seqlens"]),
        helper.make_node("Cast", ["seqlens"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "one_scalar"], ["width"]),
        helper.make_node("Cast", ["width"], ["total"], to=TensorProto.INT32),
    ]
    for i in range(s.layers):
        nodes += _layer_nodes(i, s)
    nodes.append(helper.make_node("MatMul", [f"h_{s.layers}", "lm_head"], ["logits"]))
    cache = ["batch", s.kv_heads, "past", s.head_size]
    present = ["batch", s.kv_heads, "total", s.head_size]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", s.vocab])
    ]
    for i in range(s.layers):
        for kind in ("key", "value"):
            past = f"past_key_values.{i}.{kind}"
            inputs.append(helper.make_tensor_value_info(past, TensorProto.FLOAT, cache))
            outputs.append(
                helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, present)
            )
    graph = helper.make_graph(nodes, "gqa_decoder", inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def gqa_weights(seed: int = 0, sizes: GqaSizes = GqaSizes()) -> dict[str, np.ndarray]:
    """:func:`gqa_decoder`'s float32 weights by initializer name: ``embed`` (vocab, hidden),
    per layer ``layers.N.qkv`` (hidden, (heads + 2 kv_heads) head_size), ``layers.N.out``,
    and where ``ffn`` ``layers.N.up`` and ``layers.N.down``; ``lm_head`` (hidden, vocab)."""
    rng = np.random.default_rng(seed)
    s = sizes
    # 0.3 at hidden 32 (the tests' decoder), shrinking as 1/sqrt(hidden).
    scale = 0.3 * (HIDDEN / s.hidden) ** 0.5

    def draw(*shape: int, std: float = scale) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    weights = {"embed": draw(s.vocab, s.hidden, std=1.0)}
    for i in range(s.layers):
        weights[f"layers.{i}.qkv"] = draw(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_size)
        weights[f"layers.{i}.out"] = draw(s.heads * s.head_size, s.hidden)
        if s.ffn:
            weights[f"layers.{i}.up"] = draw(s.hidden, s.ffn)
            down = scale * (s.hidden / s.ffn) ** 0.5
            weights[f"layers.{i}.down"] = draw(s.ffn, s.hidden, std=down)
    weights["lm_head"] = draw(s.hidden, s.vocab)
    return weights


def rotary_angles(sizes: GqaSizes) -> np.ndarray:
    """(max_positions, head_size / 2) rotary angles, base 10000: the caches' cos and sin."""
    half = sizes.head_size // 2
    return np.outer(np.arange(sizes.max_positions), 1e-2 ** (np.arange(half) / (half / 2)))


def _layer_nodes(i: int, s: GqaSizes) -> list[onnx.NodeProto]:
    """Layer ``i``: ``h_{i+1}`` from ``h_i``."""
    x, p = f"h_{i}", f"layers.{i}."
    attention = helper.make_node(
        "GroupQueryAttention",
        [
            p + "packed",
            "",
            "",
            f"past_key_values.{i}.key",
            f"past_key_values.{i}.value",
            "seqlens_k",
            "total",
            "cos_cache",
            "sin_cache",
        ],
        [p + "attended", f"present.{i}.key", f"present.{i}.value"],
        domain="com.microsoft",
        num_heads=s.heads,
        kv_num_heads=s.kv_heads,
        do_rotary=1,
    )
    after = p + "h" if s.ffn else f"h_{i + 1}"
    nodes = [
        helper.make_node("MatMul", [x, p + "qkv"], [p + "packed"]),
        attention,
        helper.make_node("MatMul", [p + "attended", p + "out"], [p + "projected"]),
        helper.make_node("Add", [x, p + "projected"], [after]),
    ]
    if s.ffn:
        nodes += [
            helper.make_node("MatMul", [after, p + "up"], [p + "up_out"]),
            helper.make_node("Sigmoid", [p + "up_out"], [p + "gate"]),
            helper.make_node("Mul", [p + "up_out", p + "gate"], [p + "silu"]),
            helper.make_node("MatMul", [p + "silu", p + "down"], [p + "mlp"]),
            helper.make_node("Add", [after, p + "mlp"], [f"h_{i + 1}"]),
        ]
    return nodes
