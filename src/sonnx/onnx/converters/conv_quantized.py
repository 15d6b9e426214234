"""Importer registration for QLinearConv: see sonnx.autograd.conv_quantized."""

from sonnx.autograd.conv_quantized import QLinearConv
from sonnx.onnx.registry import register_operator

register_operator(QLinearConv, 10)
