"""A stand-in for a singing-synthesis front end: phoneme strings in, float frames out, with
strings also leaving as outputs. Tests of graph mode (string steps run eagerly, the rest
compiled) and of export (the front end written whole, in an order ONNX accepts) build it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

#: The phoneme vocabulary; unknown phonemes encode as "<pad>" (id 0).
PHONEMES = ["<pad>", "a", "k", "s", "t", "o"]
#: What the decoder names each frame's loudest channel.
LEVELS = ["low", "mid", "high", "top"]
OUTPUTS = ["frames", "voiced", "levels", "echo"]


def phonemes(count: int) -> np.ndarray:
    """``count`` phonemes (a STRING tensor), unknown ones and padding among them."""
    pool = np.array(["s", "a", "<pad>", "k", "zz", "t", "o", "a"], dtype=object)
    return np.resize(pool, count)


def in_onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """``model``'s outputs for phonemes ``x``, as onnxruntime computes them."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"phonemes": x})


def front_end(appended: bool = False) -> onnx.ModelProto:
    """``phonemes`` (STRING ``[N]``) -> LabelEncoder -> ids -> OneHot -> MatMul with an
    embedding -> Relu -> Add -> ``frames`` (float ``[N, 4]``); the voiced phonemes picked by a
    NonZero of ``ids > 0`` (``voiced``, strings); each frame's ArgMax decoded to a name by a
    LabelEncoder (``levels``, strings: they leave the compiled part); the phonemes passed
    through (``echo``). ai.onnx.ml opset 2, opset 13.

    :param appended: list the front end's LabelEncoder after the nodes that read its output
        (a front end added to a model by appending nodes): onnxruntime runs such a model, the
        ONNX checker rejects it.
    """
    encode = helper.make_node(
        "LabelEncoder",
        ["phonemes"],
        ["ids"],
        name="encode",
        domain="ai.onnx.ml",
        keys_strings=PHONEMES,
        values_int64s=list(range(len(PHONEMES))),
        default_int64=0,
    )
    rest = [
        helper.make_node("OneHot", ["ids", "depth", "off_on"], ["hot"], name="one_hot"),
        helper.make_node("MatMul", ["hot", "embedding"], ["embedded"], name="embed"),
        helper.make_node("Relu", ["embedded"], ["activated"], name="relu"),
        helper.make_node("Add", ["activated", "bias"], ["frames"], name="add"),
        helper.make_node("ArgMax", ["frames"], ["loudest"], name="loudest", axis=1, keepdims=0),
        helper.make_node("Greater", ["ids", "pad_id"], ["is_voiced"], name="is_voiced"),
        helper.make_node("NonZero", ["is_voiced"], ["where_voiced"], name="where_voiced"),
        helper.make_node("Gather", ["phonemes", "where_voiced"], ["voiced"], name="voiced"),
        helper.make_node(
            "LabelEncoder",
            ["loudest"],
            ["levels"],
            name="decode",
            domain="ai.onnx.ml",
            keys_int64s=list(range(len(LEVELS))),
            values_strings=LEVELS,
            default_string="?",
        ),
        helper.make_node("Identity", ["phonemes"], ["echo"], name="echo"),
    ]
    rng = np.random.default_rng(0)
    values = {
        "embedding": rng.standard_normal((len(PHONEMES), 4)).astype(np.float32),
        "depth": np.array(len(PHONEMES), np.int64),
        "off_on": np.array([0, 1], np.float32),
        "bias": np.full(4, 0.25, np.float32),
        "pad_id": np.array(0, np.int64),
    }
    initializers = [numpy_helper.from_array(v, n) for n, v in values.items()]
    graph = helper.make_graph(
        [*rest, encode] if appended else [encode, *rest],
        "front_end",
        [helper.make_tensor_value_info("phonemes", TensorProto.STRING, ["N"])],
        [
            helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("voiced", TensorProto.STRING, [1, "V"]),
            helper.make_tensor_value_info("levels", TensorProto.STRING, ["N"]),
            helper.make_tensor_value_info("echo", TensorProto.STRING, ["N"]),
        ],
        initializers,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 2)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)
