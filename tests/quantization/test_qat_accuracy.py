"""Quantization-aware training on real Fashion-MNIST: a depthwise-separable CNN trained and
exported by torch, fine-tuned for one epoch with fake quantization in sonnx, converted, and run
by onnxruntime's integer kernels.

onnxruntime's x86 kernels multiply uint8 activations by int8 weights; on CPUs without VNNI
(this CI's) the pairwise int16 sums saturate unless the weights take 7 bits, so the int8 case
uses onnxruntime's advice for them: ``activation_type="uint8", reduce_range=True``.
"""

from __future__ import annotations

import numpy as np

import sonnx
from sonnx.quantization import convert, prepare_qat, quantize_static
from sonnx.quantization.qat_graph import fold_batch_norms
from tests.quantization.fashion import fashion, ort_predictions, predictions, train_epoch


def _accuracy(found: np.ndarray, labels: np.ndarray) -> float:
    return float((found == labels).mean() * 100)


def test_int8_qat_keeps_float_accuracy_and_onnxruntime_agrees() -> None:
    data = fashion()
    float_accuracy = _accuracy(predictions(sonnx.prepare(data.model), data.test_x), data.test_y)
    rep = prepare_qat(data.model, data.calibration(), activation_type="uint8", reduce_range=True)
    train_epoch(rep, data)
    ours = predictions(rep, data.test_x)
    theirs = ort_predictions(convert(rep), data.test_x)
    print(
        f"int8 QAT: float {float_accuracy:.2f} %, QAT {_accuracy(ours, data.test_y):.2f} %, "
        f"onnxruntime agrees on {(ours == theirs).mean() * 100:.2f} % of images"
    )
    assert _accuracy(ours, data.test_y) >= float_accuracy - 0.3
    assert (ours == theirs).mean() >= 0.999


def test_int4_weight_qat_recovers_what_int4_ptq_loses() -> None:
    data = fashion()
    float_accuracy = _accuracy(predictions(sonnx.prepare(data.model), data.test_x), data.test_y)
    options = {"weight_type": "int4", "per_channel": True}
    # onnxruntime's recipe: BatchNorm folded by its pre-processing, then quantize_static
    ptq = quantize_static(fold_batch_norms(data.model), data.calibration(), **options)
    ptq_accuracy = _accuracy(ort_predictions(ptq, data.test_x), data.test_y)
    rep = prepare_qat(data.model, data.calibration(), **options)
    train_epoch(rep, data)
    qat_accuracy = _accuracy(ort_predictions(convert(rep), data.test_x), data.test_y)
    print(f"int4: float {float_accuracy:.2f} %, PTQ {ptq_accuracy:.2f} %, QAT {qat_accuracy:.2f} %")
    assert qat_accuracy >= float_accuracy - 1.0
    assert qat_accuracy > ptq_accuracy
