"""Importer registration for QLinearConv: see sonnx.operators.quantize.qlinear_conv."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.quantize.qlinear_conv import QLinearConv

register_operator(QLinearConv, 10)
