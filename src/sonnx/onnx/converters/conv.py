"""Importer registrations for the convolutions (see :mod:`sonnx.operators.conv.conv`).

Every since-version shares one form: Conv-1/11/22 and ConvTranspose-1/11/22 only widened the
types and defaults, DeformConv-22 only added types.
"""

from sonnx.onnx.registry import register_operator
from sonnx.operators.conv.conv import Col2Im, Conv, ConvInteger, ConvTranspose, DeformConv

register_operator(Conv, 1, 11, 22)
register_operator(ConvTranspose, 1, 11, 22)
register_operator(ConvInteger, 10)
register_operator(DeformConv, 19, 22)
register_operator(Col2Im, 18)
