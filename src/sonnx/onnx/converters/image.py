"""Importer registration of ImageDecoder: see sonnx.operators.image.decode."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.image.decode import ImageDecoder

register_operators(ImageDecoder)
