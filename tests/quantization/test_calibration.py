"""Calibration ranges against onnxruntime's calibrators on the same model and feeds, the
histogram methods against onnxruntime's HistogramCollector on the same values, and the typed
errors for calibration feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization.calibrate import HistogramCollector, create_calibrator

from sonnx.errors import BadInputError
from sonnx.quantization import quantize_static
from sonnx.quantization.calibration import CalibrationOptions, calibrate, tensors_to_calibrate
from sonnx.quantization.histograms import entropy_range, percentile_range
from sonnx.quantization.placement import DEFAULT_OP_TYPES
from tests.quantization.models import ORT_METHODS, Reader, depthwise_cnn


@pytest.fixture(scope="module")
def cnn() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    model, feeds = depthwise_cnn()
    return onnx.shape_inference.infer_shapes(model), feeds


@pytest.mark.parametrize(
    ("method", "ort_options", "symmetric"),
    [
        ("minmax", {}, None),
        ("minmax", {"symmetric": True}, True),
        ("minmax", {"moving_average": True}, None),
        ("percentile", {}, None),
        ("percentile", {"symmetric": False, "percentile": 99.9}, False),
        ("entropy", {}, None),
    ],
)
def test_ranges_match_onnxruntime_calibrators(
    cnn, tmp_path: Path, method: str, ort_options: dict, symmetric: bool | None
):
    model, feeds = cnn
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    calibrator = create_calibrator(
        path,
        sorted(DEFAULT_OP_TYPES),
        augmented_model_path=str(tmp_path / "augmented.onnx"),
        calibrate_method=ORT_METHODS[method],
        extra_options=ort_options,
    )
    calibrator.collect_data(Reader(feeds))
    expected = calibrator.compute_data().data
    names = tensors_to_calibrate(model, set(DEFAULT_OP_TYPES))
    assert sorted(names) == sorted(expected)
    options = CalibrationOptions(
        method,
        symmetric,
        ort_options.get("moving_average", False),
        ort_options.get("percentile", 99.999),
    )
    ranges = calibrate(model, feeds, names, options)
    for name, (low, high) in ranges.items():
        want = np.ravel(expected[name].range_value)
        np.testing.assert_allclose([low, high], want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("symmetric", [True, False])
def test_percentile_matches_onnxruntime_histogram(symmetric: bool):
    values = np.random.default_rng(1).standard_t(3, 5000).astype(np.float32)
    collector = HistogramCollector("percentile", symmetric, 2048, 128, 99.9, "same")
    collector.collect({"t": [values]})
    expected = collector.compute_collection_result()["t"][:2]
    np.testing.assert_allclose(np.ravel(percentile_range(values, 99.9, symmetric)), expected)


def test_entropy_matches_onnxruntime_over_several_candidate_widths():
    """With 256 bins and 128 quantized bins, 65 widths compete (onnxruntime's default 128/128
    leaves one)."""
    values = np.random.default_rng(2).laplace(0.3, 1.0, 4000).astype(np.float32)
    collector = HistogramCollector("entropy", False, 256, 128, 99.999, "same")
    collector.collect({"t": [values]})
    expected = collector.compute_collection_result()["t"][:2]
    np.testing.assert_allclose(np.ravel(entropy_range(values, 256, 128)), expected)


def test_feed_with_an_unknown_or_missing_input_names_it(cnn):
    model, feeds = cnn
    with pytest.raises(BadInputError, match=r"feed 0: expected inputs \['x'\], unknown \['y'\]"):
        quantize_static(model, [{"y": feeds[0]["x"]}])
    with pytest.raises(BadInputError, match="expected 1 values in input order"):
        quantize_static(model, [[feeds[0]["x"], feeds[0]["x"]]])


def test_feed_with_a_wrong_dtype_or_shape_names_the_input(cnn):
    model, feeds = cnn
    x = feeds[0]["x"]
    with pytest.raises(BadInputError, match="input 'x' must be float32, received float64"):
        quantize_static(model, [feeds[0], {"x": x.astype(np.float64)}])
    with pytest.raises(
        BadInputError,
        match=r"input 'x' must have shape \(\?, 3, 16, 16\), received shape \(2, 2, 16, 16\)",
    ):
        quantize_static(model, [{"x": x[:, :2]}])


def test_empty_or_malformed_calibration_is_a_typed_error(cnn):
    model, feeds = cnn
    with pytest.raises(BadInputError, match="calibration gave no feed"):
        quantize_static(model, [])
    with pytest.raises(BadInputError, match="calibration gave no feed"):
        quantize_static(model, Reader([]))
    with pytest.raises(BadInputError, match="received ndarray"):
        quantize_static(model, [feeds[0]["x"]])
    with pytest.raises(BadInputError, match="calibration must be an iterable of feeds"):
        quantize_static(model, feeds[0])
