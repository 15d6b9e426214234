"""Graph mode on a PP-OCR text detector as paddle2onnx writes it, with a trained network's
BatchNorm statistics (``sonnx.testing.zoo_ocr``): the probability map equals eager's and
onnxruntime's at every pixel (issue #48)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

import sonnx
from sonnx.tensor import to_numpy
from sonnx.testing import zoo_ocr


def test_a_paddle_text_detector_compiles_whole_and_matches_eager_at_every_pixel() -> None:
    """Its head's BatchNormalization after a transposed convolution (24 channels to 24 in the
    published file) was folded by inductor into the convolution's input channels: with
    per-channel statistics, pixels of the map were off by up to 1. One graph serves both
    image sizes, and no step runs eagerly (a compiled graph that departs must not be hidden by
    a fallback)."""
    detector = zoo_ocr.PPOCRDetector(zoo_ocr.PPOCRDetector.SMALL, inner=16)
    model = zoo_ocr.export_ppocr_detector(zoo_ocr.trained_statistics(detector))
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed, (height, width) in enumerate([(96, 128), (160, 224)]):
        feeds = {"x": zoo_ocr.normalized_images(1, height, width, seed)}
        got = to_numpy(graph.run(feeds)[0])
        # A probability map: 1e-4 of each pixel, and 3e-5 (eager and onnxruntime differ by
        # up to 1e-5 here) where it is near 0.
        np.testing.assert_allclose(got, to_numpy(eager.run(feeds)[0]), rtol=1e-4, atol=3e-5)
        np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=1e-4, atol=3e-5)
    runner = graph.graph_runner
    assert runner.fallback is None
    assert all(part.compiled for part in runner.parts())
    assert runner.compile_count == 1
