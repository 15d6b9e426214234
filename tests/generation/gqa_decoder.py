"""A one-layer GroupQueryAttention decoder written with onnx.helper, in onnxruntime-genai's
layout (its input and output names, its attention-mask subgraph, a shared past/present
buffer), for tests that must run where onnxruntime-genai's builder is not installed (the GPU
machines), and the genai_config.json of such layouts. Random weights from a fixed seed."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_SIZE, MAX_POSITIONS = 48, 32, 4, 2, 16, 64
PAST = ("past_key_values.0.key", "past_key_values.0.value")


def genai_config(layers: int, share_buffer: bool) -> dict:
    """The parts of onnxruntime-genai's config a cache layout reads (as its builder writes
    them), for ``layers`` layers of :data:`KV_HEADS` heads of :data:`HEAD_SIZE`."""
    return {
        "model": {
            "decoder": {
                "num_hidden_layers": layers,
                "num_key_value_heads": KV_HEADS,
                "head_size": HEAD_SIZE,
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


#: The config of :func:`gqa_decoder`'s model (it takes no position_ids: the layout drops them).
GENAI_CONFIG = genai_config(layers=1, share_buffer=True)


def gqa_decoder(seed: int = 0) -> onnx.ModelProto:
    """Embedding, one GroupQueryAttention layer (packed QKV, rotary) with a residual, and an
    output head: logits (batch, sequence, VOCAB)."""
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
        values = rng.standard_normal(shape) * scale
        return numpy_helper.from_array(values.astype(np.float32), name)

    angles = np.outer(np.arange(MAX_POSITIONS), 1e-2 ** (np.arange(HEAD_SIZE // 2) / 4))
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_SIZE
    initializers = [
        weight("embed", VOCAB, HIDDEN, scale=1.0),
        weight("w_qkv", HIDDEN, qkv),
        weight("w_out", HEADS * HEAD_SIZE, HIDDEN),
        weight("lm_head", HIDDEN, VOCAB),
        numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"),
        numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array(1, np.int64), "one_scalar"),
    ]
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["x"]),
        # genai's attn_mask_reformat: seqlens_k = ReduceSum(mask) - 1, total = mask's width.
        helper.make_node("ReduceSum", ["attention_mask", "one"], ["valid"], keepdims=0),
        helper.make_node("Sub", ["valid", "one"], ["seqlens"]),
        helper.make_node("Cast", ["seqlens"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "one_scalar"], ["width"]),
        helper.make_node("Cast", ["width"], ["total"], to=TensorProto.INT32),
        helper.make_node("MatMul", ["x", "w_qkv"], ["packed"]),
        helper.make_node(
            "GroupQueryAttention",
            ["packed", "", "", *PAST, "seqlens_k", "total", "cos_cache", "sin_cache"],
            ["attended", "present.0.key", "present.0.value"],
            domain="com.microsoft",
            num_heads=HEADS,
            kv_num_heads=KV_HEADS,
            do_rotary=1,
        ),
        helper.make_node("MatMul", ["attended", "w_out"], ["projected"]),
        helper.make_node("Add", ["x", "projected"], ["h"]),
        helper.make_node("MatMul", ["h", "lm_head"], ["logits"]),
    ]
    cache = ["batch", KV_HEADS, "past", HEAD_SIZE]
    present = ["batch", KV_HEADS, "total", HEAD_SIZE]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        *(helper.make_tensor_value_info(name, TensorProto.FLOAT, cache) for name in PAST),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", VOCAB]),
        helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, present),
        helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, present),
    ]
    graph = helper.make_graph(nodes, "gqa_decoder", inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)
