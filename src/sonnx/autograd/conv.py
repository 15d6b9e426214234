"""Convolutions: Conv, ConvTranspose, ConvInteger, DeformConv, Col2Im (1-D/2-D/3-D, dilation,
groups, asymmetric pads, auto_pad).
"""

__all__: list[str] = []
