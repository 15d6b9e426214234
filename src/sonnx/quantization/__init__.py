"""Quantization of imported ONNX models: post-training, the way onnxruntime's
``quantize_static`` does it (calibrate the float model in sonnx, then write the QDQ model:
integer weights behind DequantizeLinear, activations through QuantizeLinear/DequantizeLinear
pairs), quantization-aware training of any ONNX model, and weight-only int4 for LLMs.

Modules: :mod:`~sonnx.quantization.static` (post-training),
:mod:`~sonnx.quantization.calibration` and :mod:`~sonnx.quantization.histograms` (ranges),
:mod:`~sonnx.quantization.placement` (which tensors), :mod:`~sonnx.quantization.rewrite`
(the Q/DQ nodes), :mod:`~sonnx.quantization.qtypes` (types, scales, zero points),
:mod:`~sonnx.quantization.options`; :mod:`~sonnx.quantization.qat` (training, with
:mod:`~sonnx.quantization.fake_quant` and :mod:`~sonnx.quantization.qat_graph`);
:mod:`~sonnx.quantization.weights` (MatMulNBits).
"""

from sonnx.quantization.qat import convert, prepare_qat
from sonnx.quantization.static import quantize_static
from sonnx.quantization.weights import quantize_weights

__all__ = ["convert", "prepare_qat", "quantize_static", "quantize_weights"]
