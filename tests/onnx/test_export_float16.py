"""to_onnx(..., dtype="float16"): four zoo stand-ins run in onnxruntime close to float32,
the precision-sensitive operators stay float32, and what cannot be converted is refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import ExportError
from sonnx.onnx.float16 import to_float16
from sonnx.tensor import PlaceHolder, Tensor
from sonnx.testing import zoo_audio, zoo_text, zoo_vision
from sonnx.walkthrough import LayerCNN


def _run(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _exported(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], dtype: str) -> onnx.ModelProto:
    """The stand-in imported into sonnx, run, and written back with ``to_onnx``."""
    inputs = [Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()]
    return sonnx.to_onnx(inputs, sonnx.prepare(proto).run(inputs), dtype=dtype)


def _image(size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"images": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def _bert() -> onnx.ModelProto:
    encoder = zoo_text.BertEncoder(vocab=100, hidden=32, heads=2, layers=2, ffn=64, max_len=16)
    return zoo_text.export_bert(encoder, quantize=False)


def _crnn_image() -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(0).standard_normal((1, 3, 48, 64)).astype(np.float32)}


STAND_INS = {
    "bert": (_bert, lambda: zoo_text.text_inputs(2, 8, 100)),
    "mobilenet_v3": (
        lambda: zoo_vision.export_image_model(
            zoo_vision.MobileNetV3(10, width=0.25).eval(), size=32
        ),
        lambda: _image(32),
    ),
    "yolov8": (
        lambda: zoo_vision.export_image_model(zoo_vision.YoloV8(4, width=0.125).eval(), size=32),
        lambda: _image(32),
    ),
    "crnn": (
        lambda: zoo_text.export_crnn(zoo_text.CRNN(num_classes=11, width=8, hidden=16).eval()),
        _crnn_image,
    ),
}
#: onnxruntime 1.32's ORT_ENABLE_ALL optimizations crash (SIGSEGV) on the CRNN's float16 model,
#: onnxruntime's own converter's output included; up to ORT_ENABLE_EXTENDED it runs.
HALF_LEVEL = {"crnn": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}


@pytest.mark.parametrize("name", list(STAND_INS))
def test_float16_export_of_a_zoo_stand_in_runs_in_onnxruntime_near_float32(name: str) -> None:
    """Within 1e-2 of float32, relative to each output's largest magnitude (at least 1):
    YOLO's boxes are in pixels (hundreds), where float16 itself steps by 0.25."""
    torch.manual_seed(0)
    build, make_feeds = STAND_INS[name]
    proto, feeds = build(), make_feeds()
    reference = _run(_exported(proto, feeds, "float32"), feeds)
    half_model = _exported(proto, feeds, "float16")
    half_feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    level = HALF_LEVEL.get(name, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    got = _run(half_model, half_feeds, level)
    for expected, actual in zip(reference, got, strict=True):
        assert actual.dtype == np.float16
        scale = max(1.0, float(np.abs(expected).max()))
        assert float(np.abs(actual.astype(np.float32) - expected).max()) <= 1e-2 * scale


def test_normalizations_and_softmax_stay_float32_behind_casts() -> None:
    torch.manual_seed(0)
    feeds = zoo_text.text_inputs(2, 8, 100)
    model = _exported(_bert(), feeds, "float16")
    graph = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.value_info, *graph.input)}
    types |= {t.name: t.data_type for t in graph.initializer}
    kept = [n for n in graph.node if n.op_type in ("LayerNormalization", "Softmax")]
    assert kept
    for node in kept:
        assert types[node.input[0]] == TensorProto.FLOAT
        assert types[node.output[0]] == TensorProto.FLOAT
    matmuls = [n for n in graph.node if n.op_type == "MatMul"]
    assert matmuls and all(types[n.output[0]] == TensorProto.FLOAT16 for n in matmuls)
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT16 for v in graph.output)


def test_a_float32_output_is_cast_to_float16_under_its_name() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "g", [x], [y])
    model = to_float16(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op_type for n in model.graph.node] == ["Cast", "Softmax", "Cast"]
    feeds = {"x": np.arange(6, dtype=np.float16).reshape(2, 3)}
    (got,) = _run(model, feeds)
    expected = np.exp(np.arange(3)) / np.exp(np.arange(3)).sum()
    np.testing.assert_allclose(got.astype(np.float32), np.stack([expected] * 2), atol=1e-3)


def test_control_flow_is_refused_with_a_typed_error() -> None:
    torch.manual_seed(0)
    proto = zoo_audio.export_vad(zoo_audio.StreamingVAD(channels=8, hidden=8).eval())
    with pytest.raises(ExportError, match=r"node .*\(If\) has a subgraph"):
        to_float16(proto)


def test_a_constant_beyond_float16_range_is_refused() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    big = helper.make_tensor("big", TensorProto.FLOAT, [2], [1.0, 1e6])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "big"], ["y"])], "g", [x], [y], [big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ExportError, match=r"initializer 'big' holds 1e\+06, beyond float16"):
        to_float16(model)


def test_an_unknown_dtype_is_refused() -> None:
    x = Tensor(data=np.ones((2, 2), np.float32), requires_grad=False)
    with pytest.raises(ExportError, match=r"dtype must be one of \('float32', 'float16'\)"):
        sonnx.to_onnx([x], [x], dtype="bfloat16")


def test_a_model_built_with_sonnx_exports_as_float16() -> None:
    """Model.to_onnx(dtype="float16") of the walkthrough CNN (layer API)."""
    torch.manual_seed(0)
    net = LayerCNN()
    net.compile([PlaceHolder((2, 1, 28, 28))], is_train=False)
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    example = [Tensor(data=x, requires_grad=False)]
    full, half = (net.to_onnx(None, example, dtype=d) for d in ("float32", "float16"))
    name = full.graph.input[0].name
    (expected,) = _run(full, {name: x})
    (got,) = _run(half, {name: x.astype(np.float16)})
    assert got.dtype == np.float16
    scale = max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(got.astype(np.float32) - expected).max()) <= 1e-2 * scale
