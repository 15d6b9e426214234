"""Importer registrations for the convolutions (see :mod:`sonnx.operators.conv.conv`).

Every since-version shares one form: Conv-1/11/22 and ConvTranspose-1/11/22 only widened the
types and defaults, DeformConv-22 only added types.
"""

from sonnx.onnx.registry import register_operators
from sonnx.operators.conv.conv import Col2Im, Conv, ConvInteger, ConvTranspose, DeformConv

register_operators(Conv, ConvTranspose, ConvInteger, DeformConv, Col2Im)
