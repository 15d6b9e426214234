"""ImageDecoder (opset 20): encoded image bytes -> pixels, decoded by Pillow.

Image codecs are not math torch has, so the decoding is Pillow's (the library onnx's reference
implementation uses; an optional dependency: ``pip install sonnx[images]``). BMP, JPEG,
JPEG 2000, PNG, PNM, TIFF and WebP are read, as far as the installed Pillow reads them.
"""

from __future__ import annotations

import io

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.tensor import Tensor

__all__ = ["ImageDecoder", "image_decoder"]

_MODES = {"RGB": "RGB", "BGR": "RGB", "Grayscale": "L"}


class ImageDecoder(Operator):
    """``encoded`` (1-D uint8, a whole image file) -> ``image`` uint8 (H, W, C): C is 3 for
    ``pixel_format`` RGB or BGR, 1 for Grayscale. Not differentiable."""

    op_type = "ImageDecoder"
    since_versions = (20,)
    output_shape = OutputShape.VALUE_SIZED

    def forward(self, encoded: torch.Tensor) -> torch.Tensor:
        pixel_format = str(self.attr("pixel_format"))
        if pixel_format not in _MODES:
            raise BadInputError(
                f"ImageDecoder: pixel_format must be one of {list(_MODES)}, received "
                f"{pixel_format!r}"
            )
        if encoded.dtype != torch.uint8 or encoded.dim() != 1:
            raise BadInputError(
                f"ImageDecoder: input encoded_stream must be 1-D uint8 (the bytes of an image "
                f"file), received {dtype_name(encoded.dtype)} with shape {tuple(encoded.shape)}"
            )
        image = _open(encoded.detach().cpu().numpy().tobytes()).convert(_MODES[pixel_format])
        pixels = np.array(image)  # a writable copy: torch warns on a read-only array
        if pixel_format == "BGR":
            pixels = pixels[:, :, ::-1]
        elif pixel_format == "Grayscale":
            pixels = pixels[:, :, None]
        return torch.from_numpy(np.ascontiguousarray(pixels)).to(encoded.device)


def _open(data: bytes):  # -> PIL.Image.Image
    try:
        import PIL.Image
    except ImportError:
        raise UnsupportedOperatorError(
            "ImageDecoder needs Pillow to decode images: pip install 'sonnx[images]'"
        ) from None
    try:
        image = PIL.Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, SyntaxError) as e:
        raise BadInputError(
            f"ImageDecoder: encoded_stream ({len(data)} bytes) is not an image Pillow can "
            f"decode: {e}"
        ) from None
    return image


def image_decoder(encoded: Tensor, pixel_format: str = "RGB") -> Tensor:
    """Decode the image file held in ``encoded`` (1-D uint8) into (H, W, C) uint8 pixels.

    :param encoded: the bytes of a whole image file, as a 1-D uint8 tensor.
    :param pixel_format: ``"RGB"``, ``"BGR"`` (C = 3) or ``"Grayscale"`` (C = 1).
    :returns: the (H, W, C) uint8 image (ONNX ImageDecoder).
    :raises BadInputError: ``pixel_format`` is unknown, ``encoded`` is not 1-D uint8, or Pillow
        cannot decode it.
    :raises UnsupportedOperatorError: Pillow is not installed (``pip install 'sonnx[images]'``).
    """
    return ImageDecoder(pixel_format=pixel_format)(encoded)
