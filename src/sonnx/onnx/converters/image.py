"""Importer registration of ImageDecoder: see sonnx.operators.image.decode."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.image.decode import ImageDecoder

register_operator(ImageDecoder, 20)
