"""Importer registration of ImageDecoder: see sonnx.autograd.image."""

from sonnx.autograd.image import ImageDecoder
from sonnx.onnx.registry import register_operator

register_operator(ImageDecoder, 20)
