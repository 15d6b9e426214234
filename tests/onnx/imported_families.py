"""Small stand-ins of the model families whose exports must survive import and fine-tuning:
a CNN with symbolic batch, height and width, a BERT-style encoder with ``[batch, sequence]``
int64 inputs, an ``If`` on a value computed from the input, a ``Loop`` whose trip count is an
input, an LSTM with state inputs and outputs, and an int8-weight model (DequantizeLinear).

Each family gives the model, a feed builder ``make(batch, variant)`` (``variant`` changes the
other dims, the branch taken or the trip count) and the example variant used while training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from sonnx.testing import torch_models as tm

F = np.float32
Feeds = dict[str, np.ndarray]


@dataclass
class Family:
    model: onnx.ModelProto
    make: Callable[[int, int], Feeds]


class GlobalPoolCNN(nn.Module):
    """Conv/BN/ReLU blocks, a global average pool and a linear head: any image size."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class StatefulLSTM(nn.Module):
    """An LSTM with its state as inputs and outputs, as streaming models are exported."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x, h, c):
        y, (h, c) = self.lstm(x, (h, c))
        return self.out(y), h, c


def cnn() -> Family:
    torch.manual_seed(0)
    net = GlobalPoolCNN()
    axes = {"x": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}
    model = tm.export(
        net, (torch.randn(2, 3, 12, 12),), 17, ["x"], ["logits"], True, True, dynamic_axes=axes
    )

    def make(batch: int, variant: int) -> Feeds:
        size = (12 + 4 * variant, 12 + 6 * variant)
        rng = np.random.default_rng(batch * 10 + variant)
        return {"x": rng.standard_normal((batch, 3, *size)).astype(F)}

    return Family(model, make)


def bert() -> Family:
    torch.manual_seed(0)
    net = tm.TinyBert(vocab=50, hidden=16, heads=2, layers=1, ffn=32, max_len=40)
    names = ["input_ids", "attention_mask"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    model = tm.export(net, tm.bert_inputs(2, 8, 50), 17, names, ["logits"], True, dynamic_axes=axes)

    def make(batch: int, variant: int) -> Feeds:
        ids, mask = tm.bert_inputs(batch, 8 + 12 * variant, 50, seed=batch + variant)
        return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}

    return Family(model, make)


def _weight(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    data = np.random.default_rng(seed).standard_normal(shape).astype(F) * 0.5
    return numpy_helper.from_array(data, name)


def if_on_input() -> Family:
    """``y = If(ReduceSum(x) > 0, x @ W1, -(x @ W2))``, both branches reading outer weights."""
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["then_y"], name="then_matmul")],
        "then_branch", [], [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    other = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W2"], ["else_mm"], name="else_matmul"),
            helper.make_node("Neg", ["else_mm"], ["else_y"], name="else_neg"),
        ],
        "else_branch", [], [helper.make_tensor_value_info("else_y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes,
        "if_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [_weight("W1", 4, 3), _weight("W2", 4, 3, seed=1),
         numpy_helper.from_array(np.array(0.0, F), "zero")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def make(batch: int, variant: int) -> Feeds:
        x = np.abs(np.random.default_rng(batch).standard_normal((batch, 4))).astype(F)
        return {"x": x if variant % 2 == 0 else -x}

    return Family(model, make)


def if_with_branch_weights() -> Family:
    """``If(ReduceSum(x) > 0, x @ Wt, x @ We)`` with each weight an initializer of its branch."""
    branches = []
    for name, seed in (("then", 5), ("else", 6)):
        branches.append(
            helper.make_graph(
                [helper.make_node("MatMul", ["x", f"W_{name}"], [f"{name}_y"], name=f"{name}_mm")],
                f"{name}_branch",
                [],
                [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)],
                [_weight(f"W_{name}", 4, 3, seed=seed)],
            )
        )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        helper.make_node(
            "If", ["cond"], ["y"], name="branch", then_branch=branches[0], else_branch=branches[1]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "if_inner_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(np.array(0.0, F), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return Family(model, if_on_input().make)


def local_function() -> Family:
    """A model-local function ``LinearRelu(x, W, b)`` called twice, with metadata and docs."""
    body = [
        helper.make_node("MatMul", ["X", "W"], ["XW"]),
        helper.make_node("Add", ["XW", "B"], ["S"]),
        helper.make_node("Relu", ["S"], ["Y"]),
    ]
    function = helper.make_function(
        "local", "LinearRelu", ["X", "W", "B"], ["Y"], body, [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(
        [
            helper.make_node("LinearRelu", ["x", "W1", "b1"], ["h"], name="first", domain="local"),
            helper.make_node("LinearRelu", ["h", "W2", "b2"], ["y"], name="second", domain="local"),
        ],
        "function_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [_weight("W1", 4, 5), _weight("b1", 5, seed=1), _weight("W2", 5, 3, seed=2),
         _weight("b2", 3, seed=3)],
        doc_string="two linear layers",
    )  # fmt: skip
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[function],
        doc_string="a model with a local function",
    )
    helper.set_model_props(model, {"author": "sonnx tests", "license": "Apache-2.0"})

    def make(batch: int, variant: int) -> Feeds:
        return {"x": np.random.default_rng(batch + variant).standard_normal((batch, 4)).astype(F)}

    return Family(model, make)


def loop_with_trip_count() -> Family:
    """``h = tanh(h @ W + b)`` repeated ``n`` times, ``n`` an input."""
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "W"], ["hw"], name="body_matmul"),
            helper.make_node("Add", ["hw", "b"], ["hb"], name="body_add"),
            helper.make_node("Tanh", ["hb"], ["h_out"], name="body_tanh"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, None),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "keep_going", "h0"], ["h"], name="loop", body=body)],
        "loop_model",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["batch", 4]),
        ],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4])],
        [_weight("W", 4, 4), _weight("b", 4, seed=2),
         numpy_helper.from_array(np.array(True), "keep_going")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def make(batch: int, variant: int) -> Feeds:
        h0 = np.random.default_rng(batch).standard_normal((batch, 4)).astype(F)
        return {"n": np.array(2 + variant, np.int64), "h0": h0}

    return Family(model, make)


def lstm() -> Family:
    torch.manual_seed(0)
    names, outs = ["x", "h0", "c0"], ["y", "hn", "cn"]
    axes = {"x": {0: "sequence", 1: "batch"}, "y": {0: "sequence", 1: "batch"}}
    axes |= {n: {1: "batch"} for n in ["h0", "c0", "hn", "cn"]}
    example = (torch.randn(5, 2, 4), torch.zeros(1, 2, 6), torch.zeros(1, 2, 6))
    model = tm.export(StatefulLSTM(), example, 14, names, outs, True, dynamic_axes=axes)

    def make(batch: int, variant: int) -> Feeds:
        rng = np.random.default_rng(batch + 7 * variant)
        return {
            "x": rng.standard_normal((5 + 3 * variant, batch, 4)).astype(F),
            "h0": rng.standard_normal((1, batch, 6)).astype(F),
            "c0": rng.standard_normal((1, batch, 6)).astype(F),
        }

    return Family(model, make)


def int8_weights() -> Family:
    """``relu(x @ DequantizeLinear(W_int8, scale, zero_point) + bias)``."""
    w = np.random.default_rng(3).integers(-100, 100, (6, 5)).astype(np.int8)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["W_q", "W_scale", "W_zero"], ["W"], name="deq"),
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
            helper.make_node("Add", ["xw", "bias"], ["pre"], name="add"),
            helper.make_node("Relu", ["pre"], ["y"], name="relu"),
        ],
        "int8_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [
            numpy_helper.from_array(w, "W_q"),
            numpy_helper.from_array(np.array(0.02, F), "W_scale"),
            numpy_helper.from_array(np.array(0, np.int8), "W_zero"),
            _weight("bias", 5, seed=4),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    def make(batch: int, variant: int) -> Feeds:
        return {"x": np.random.default_rng(batch + variant).standard_normal((batch, 6)).astype(F)}

    return Family(model, make)


FAMILIES = {
    "cnn": cnn,
    "bert": bert,
    "if": if_on_input,
    "if_inner": if_with_branch_weights,
    "function": local_function,
    "loop": loop_with_trip_count,
    "lstm": lstm,
    "int8": int8_weights,
}
