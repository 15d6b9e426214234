"""com.microsoft QEmbedLayerNormalization against onnxruntime's CPU kernel on single-node
models; its export; its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto

import sonnx
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.normalization.contrib_quantized import QEmbedLayerNormalization
from sonnx.tensor import Tensor, to_numpy
from tests.contrib_quant_helpers import both, node_model, ort_run

RNG = np.random.default_rng(0)
BATCH, SEQ, HIDDEN, VOCAB = 2, 5, 8, 11


def _table(dtype: type, rows: int | None) -> np.ndarray:
    shape = (HIDDEN,) if rows is None else (rows, HIDDEN)
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _inputs(dtype: type, segments: bool, mask: bool) -> dict[str, np.ndarray | None]:
    """The node's 18 inputs in order; None: left out."""
    names = ["word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"]
    rows = [VOCAB, SEQ, 2, None, None]
    tables = {n: _table(dtype, r) for n, r in zip(names, rows, strict=True)}
    if not segments:
        tables["segment_embedding"] = None
    ids = RNG.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    valid = (np.arange(SEQ) < np.array([[SEQ], [SEQ - 2]])).astype(np.int32)
    inputs: dict[str, np.ndarray | None] = {
        "input_ids": ids,
        "segment_ids": (np.arange(SEQ) >= 2).astype(np.int32)[None].repeat(BATCH, 0)
        if segments
        else None,
        **{f"{n}_quant": t for n, t in tables.items()},
        "mask": valid if mask else None,
    }
    for n, t in tables.items():
        inputs[f"{n}_scale"] = None if t is None else np.float32(RNG.uniform(0.01, 0.05))
    for n, t in tables.items():
        zero = RNG.integers(np.iinfo(dtype).min // 4, np.iinfo(dtype).max // 4 + 1)
        inputs[f"{n}_zero_point"] = None if t is None else np.array(zero, dtype)
    return inputs


def _model(inputs: dict[str, np.ndarray | None]):
    graph_inputs = [n for n in ("input_ids", "segment_ids", "mask") if inputs[n] is not None]
    feeds = {n: inputs[n] for n in graph_inputs}
    model = node_model("QEmbedLayerNormalization", inputs, graph_inputs,
                       outputs=(TensorProto.FLOAT, TensorProto.INT32),
                       shapes=((BATCH, SEQ, HIDDEN), (BATCH,)), epsilon=1e-5)  # fmt: skip
    return model, feeds


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("segments", "mask"), [(True, True), (False, False), (True, False)])
def test_qembed_layer_normalization_matches_onnxruntime(dtype, segments, mask) -> None:
    model, feeds = _model(_inputs(dtype, segments, mask))
    (expected, expected_index), (got, got_index) = both(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got_index, expected_index)


def test_qembed_layer_normalization_exports_as_it_came() -> None:
    model, feeds = _model(_inputs(np.uint8, True, True))
    inputs = [Tensor(data=a, requires_grad=False, name=n) for n, a in feeds.items()]
    outputs = sonnx.prepare(model).run({t.name: t for t in inputs})
    exported = to_onnx(inputs, outputs)
    assert [(n.domain, n.op_type) for n in exported.graph.node] == [
        ("com.microsoft", "QEmbedLayerNormalization")
    ]
    for e, g in zip(ort_run(exported, feeds), outputs, strict=True):
        np.testing.assert_allclose(to_numpy(g), e, rtol=1e-4, atol=1e-5)


def test_qembed_layer_normalization_names_a_table_without_its_scale() -> None:
    inputs = _inputs(np.uint8, False, False)
    tensors = [None if a is None else torch.as_tensor(a) for a in inputs.values()]
    tensors[9] = None  # position_embedding_scale
    with pytest.raises(BadInputError, match="position_embedding_quant needs its"):
        QEmbedLayerNormalization().forward(*tensors)
