"""The valid models every fuzz case starts from, with inputs that run them.

Three kinds of graph cover what importers meet: a small CNN exported by torch (Conv,
BatchNorm folded or kept, pooling, Gemm), a hand-made graph with control flow (If with two
branches, Loop with a carried value and a scan output, both reading the enclosing scope), and
a tiny BERT-style encoder exported by torch (Gather embeddings, Shape/Gather/Concat/Reshape
chains, attention with a mask, LayerNormalization, Erf-based GELU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from sonnx.testing import torch_models as tm


@dataclass(frozen=True)
class Seed:
    """A valid model (serialized) and the inputs it runs on."""

    name: str
    model: bytes
    feeds: dict[str, np.ndarray]


@cache
def seeds() -> tuple[Seed, ...]:
    """The seed models, built once per process (deterministic: fixed torch seed)."""
    return (_cnn(), _control_flow(), _bert())


def _cnn() -> Seed:
    torch.manual_seed(0)
    net = tm.SmallCNN(num_classes=4, in_channels=1)
    x = torch.randn(1, 1, 16, 16)
    model = tm.export(net, (x,), 13, ["x"], keep_batchnorm=True)
    return Seed("cnn", model.SerializeToString(), {"x": x.numpy()})


def _bert() -> Seed:
    torch.manual_seed(0)
    net = tm.TinyBert(vocab=30, hidden=8, heads=2, layers=1, ffn=16, max_len=8)
    ids, mask = tm.bert_inputs(1, seq=6, vocab=30)
    model = tm.export(net, (ids, mask), 14, ["input_ids", "attention_mask"])
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    return Seed("bert", model.SerializeToString(), feeds)


def _control_flow() -> Seed:
    """``y = If(sum(x) > 0, x * w, x - w)`` then a Loop of 3 trips accumulating ``y`` and
    scanning the running sum."""
    f = TensorProto.FLOAT
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["then_out"], name="then_mul")],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", f, [2, 3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "w"], ["else_out"], name="else_sub")],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", f, [2, 3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "y"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("ReduceSum", ["acc_out"], ["scan_out"], keepdims=0, name="body_sum"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", f, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", f, [2, 3]),
            helper.make_tensor_value_info("scan_out", f, []),
        ],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="total"),
        helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"),
        helper.make_node(
            "If", ["positive"], ["y"], then_branch=then_g, else_branch=else_g, name="branch"
        ),
        helper.make_node("Loop", ["trips", "", "start"], ["acc", "sums"], body=body, name="loop"),
        helper.make_node("Relu", ["acc"], ["out"], name="relu"),
    ]
    inits = [
        helper.make_tensor("w", f, [2, 3], np.linspace(-1, 1, 6).tolist()),
        helper.make_tensor("zero", f, [], [0.0]),
        helper.make_tensor("trips", TensorProto.INT64, [], [3]),
        helper.make_tensor("start", f, [2, 3], [0.0] * 6),
    ]
    graph = helper.make_graph(
        nodes,
        "control_flow",
        [helper.make_tensor_value_info("x", f, [2, 3])],
        [
            helper.make_tensor_value_info("out", f, [2, 3]),
            helper.make_tensor_value_info("sums", f, [3]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.checker.check_model(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0
    return Seed("control_flow", model.SerializeToString(), {"x": x})
