"""Importer registration for QLinearConv: see sonnx.operators.quantize.qlinear_conv."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.quantize.qlinear_conv import QLinearConv

register_operators(QLinearConv)
