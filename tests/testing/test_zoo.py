"""The model-zoo stand-ins (``sonnx.testing.zoo_*``) at small sizes: each exports, loads in
onnxruntime and computes what its torch module computes there, and sonnx's eager run equals
onnxruntime's within 1e-4 at two different values of the dynamic dims."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import sonnx
from sonnx import autograd
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.tensor import to_numpy
from sonnx.testing import zoo_audio, zoo_ocr, zoo_text, zoo_vision

Feeds = dict[str, np.ndarray]


@dataclass
class Case:
    """A stand-in's ONNX model, its torch module and feeds at two shapes of the dynamic dims.

    ``reference_atol`` bounds the torch-vs-onnxruntime difference (int8 weights against the
    float module: the quantization error). ``exact_ort`` asks onnxruntime for basic graph
    optimizations only: at its default level it rewrites ``DequantizeLinear -> MatMul`` into
    ``com.microsoft.MatMulNBits``, which approximates (about 1e-2 on this encoder's outputs).
    """

    model: onnx.ModelProto
    module: Callable[..., object]
    feeds: list[Feeds]
    reference_atol: float = 1e-4
    exact_ort: bool = False


def _images(*shape: int, seed: int = 0) -> Feeds:
    return {"images": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _classifier(module: torch.nn.Module) -> Case:
    return Case(
        zoo_vision.export_image_model(module),
        module,
        [_images(1, 3, 64, 64), _images(2, 3, 64, 64, seed=1)],
    )


def _detector(module: torch.nn.Module, spatial_outputs: bool) -> Case:
    model = zoo_vision.export_image_model(module, 17, True, spatial_outputs)
    return Case(model, module, [_images(1, 3, 64, 64), _images(2, 3, 96, 128, seed=1)])


def resnet50() -> Case:
    return _classifier(zoo_vision.ResNet50(num_classes=10, width=8, blocks=(1, 1, 1, 1)))


def mobilenetv3() -> Case:
    return _classifier(zoo_vision.MobileNetV3(num_classes=10, width=0.25))


def yolov8() -> Case:
    return _detector(zoo_vision.YoloV8(num_classes=4, width=0.125), spatial_outputs=False)


def dbnet() -> Case:
    return _detector(zoo_vision.DBNet(width=4, inner=16), spatial_outputs=True)


def dbnet_paddle() -> Case:
    return _detector(zoo_vision.PaddleDBHead(), spatial_outputs=True)


def ppocr_det() -> Case:
    detector = zoo_ocr.PPOCRDetector(zoo_ocr.PPOCRDetector.SMALL, inner=16)
    module = zoo_ocr.trained_statistics(detector)
    feeds = [
        {"x": zoo_ocr.normalized_images(1, 64, 64)},
        {"x": zoo_ocr.normalized_images(2, 96, 128, seed=1)},
    ]
    return Case(zoo_ocr.export_ppocr_detector(module), module, feeds)


def crnn() -> Case:
    module = zoo_text.CRNN(num_classes=11, width=4, hidden=8)
    rng = np.random.default_rng(0)
    feeds = [
        {"image": rng.standard_normal((1, 3, 48, 64)).astype(np.float32)},
        {"image": rng.standard_normal((2, 3, 48, 100)).astype(np.float32)},
    ]
    return Case(zoo_text.export_crnn(module), module, feeds)


def bert_int8() -> Case:
    module = zoo_text.BertEncoder(vocab=100, hidden=32, heads=2, layers=2, ffn=64, max_len=64)
    model = zoo_text.export_bert(module, min_elements=256)
    feeds = [zoo_text.text_inputs(1, 16, 100, seed=1), zoo_text.text_inputs(2, 24, 100, seed=2)]
    return Case(model, module, feeds, reference_atol=0.1, exact_ort=True)


def vad() -> Case:
    module = zoo_audio.StreamingVAD(channels=8, hidden=8)
    feeds = [
        zoo_audio.vad_inputs(batch, sr, 8, seed=seed)
        for seed, (batch, sr) in enumerate([(1, 16000), (3, 8000), (3, 16000), (1, 8000)])
    ]
    return Case(zoo_audio.export_vad(module), module, feeds)


FAMILIES: dict[str, Callable[[], Case]] = {
    "resnet50": resnet50,
    "mobilenetv3": mobilenetv3,
    "yolov8": yolov8,
    "dbnet": dbnet,
    "dbnet_paddle": dbnet_paddle,
    "ppocr_det": ppocr_det,
    "crnn": crnn,
    "bert_int8": bert_int8,
    "vad": vad,
}

#: Operators each export must contain: the exporter features the stand-in is there to exercise.
FEATURES = {
    "resnet50": {"Conv", "Add", "GlobalAveragePool", "Gemm"},
    "mobilenetv3": {"HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul"},
    "yolov8": {"Split", "Sigmoid", "MaxPool", "Resize", "Shape", "Gather", "Range", "Expand",
               "ConstantOfShape", "Softmax"},
    "dbnet": {"HardSwish", "Shape", "Slice", "Resize", "ConvTranspose", "Sigmoid"},
    "dbnet_paddle": {"ConvTranspose", "Add", "BatchNormalization", "Sigmoid"},
    "ppocr_det": {"HardSigmoid", "Clip", "Resize", "ConvTranspose", "BatchNormalization",
                  "Sigmoid"},
    "crnn": {"Squeeze", "Transpose", "LSTM", "Softmax"},
    "bert_int8": {"DequantizeLinear", "Cast", "Mul", "Range", "Gather", "MatMul", "Erf"},
    "vad": {"If", "Equal", "Pad", "Conv", "Sqrt", "LSTM"},
}  # fmt: skip


@functools.cache
def case(name: str) -> Case:
    torch.manual_seed(0)
    built = FAMILIES[name]()
    if isinstance(built.module, torch.nn.Module):
        built.module.eval()
    return built


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)


def _session(model: onnx.ModelProto, exact: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if exact:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _torch_outputs(module: Callable[..., object], feeds: Feeds) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*(torch.from_numpy(a) for a in feeds.values()))
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_stand_in_exports_with_its_features_and_onnxruntime_matches_torch(name: str) -> None:
    c = case(name)
    onnx.checker.check_model(c.model, full_check=True)
    assert FEATURES[name] <= {n.op_type for n in _nodes(c.model.graph)}
    session = _session(c.model, exact=False)
    for feeds in c.feeds:
        expected = _torch_outputs(c.module, feeds)
        got = session.run(None, feeds)
        assert len(got) == len(expected)
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=c.reference_atol)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_sonnx_matches_onnxruntime_at_two_shapes_of_the_dynamic_dims(name: str) -> None:
    c = case(name)
    session = _session(c.model, c.exact_ort)
    rep = sonnx.prepare(c.model)
    shapes = []
    for feeds in c.feeds:
        expected = session.run(None, feeds)
        got = [to_numpy(t) for t in rep.run(feeds)]
        assert [g.shape for g in got] == [e.shape for e in expected]
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        shapes.append([e.shape for e in expected])
    assert shapes[0] != shapes[1]


def _graph_mode_matches_eager(name: str) -> GraphRunner:
    """Runs the stand-in's feeds in graph mode and eagerly, checks they agree, and returns
    the graph runner."""
    c = case(name)
    graph, eager = sonnx.prepare(c.model, use_graph=True), sonnx.prepare(c.model)
    previous, autograd.training = autograd.training, False
    try:
        for feeds in c.feeds:
            got, expected = graph.run(feeds), eager.run(feeds)
            for g, e in zip(got, expected, strict=True):
                np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-5)
    finally:
        autograd.training = previous
    return graph.graph_runner


def test_dbnet_compiles_whole_in_graph_mode_and_matches_eager_at_both_shapes() -> None:
    """Its head ends in a one-channel ConvTranspose with a bias, which inductor's freezing
    could not compile when the bias was a separate add, and its transposed convolutions' kernel
    choice guarded the batch: one graph for a batch of one, one for the rest (issue #11). One
    graph serves batch 1 at 64x64 and batch 2 at 96x128 now."""
    runner = _graph_mode_matches_eager("dbnet")
    assert runner.fallback is None
    assert runner.compile_count == 1


def test_paddle_dbnet_head_compiles_whole_in_graph_mode_and_matches_eager() -> None:
    """paddle2onnx's transposed convolutions without a bias input, each followed by the Add
    of its bias: inductor's binary folding sized the one-channel one's bias by its input
    channels (24), the graph failed to compile and the whole model ran eagerly (issue #32)."""
    transposed = [n for n in case("dbnet_paddle").model.graph.node if n.op_type == "ConvTranspose"]
    assert [len(n.input) for n in transposed] == [2, 2]  # no bias input
    runner = _graph_mode_matches_eager("dbnet_paddle")
    (part,) = runner.parts()
    assert part.compiled and part.steps == range(len(runner.program.steps))
    assert runner.fallback is None
    assert runner.compile_count == 1


def test_vad_compiles_whole_in_graph_mode_with_a_graph_per_rate_and_matches_eager() -> None:
    """Its ``If`` on the sample-rate input is compiled as the branch each rate takes, and its
    one-channel STFT convolution keeps a plain weight (issue #11)."""
    runner = _graph_mode_matches_eager("vad")
    assert runner.fallback is None
    # Two rates, each a graph for a batch of one and one for larger batches (the LSTM's state
    # checks and a reshape's strides tell them apart).
    assert 2 <= runner.compile_count <= 4
