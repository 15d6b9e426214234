"""ImageDecoder: PNG/BMP/JPEG bytes decode to the pixels Pillow gives, in RGB, BGR or
grayscale; bad bytes and wrong input types are named errors (export: test_export_more)."""

from __future__ import annotations

import io

import numpy as np
import PIL.Image
import pytest

from sonnx import autograd as ag
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

# A decoded image reaches torch as a writable array: torch warns on a read-only one.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")

PIXELS = np.random.default_rng(0).integers(0, 256, (5, 7, 3)).astype(np.uint8)


def encoded(image_format: str, pixels: np.ndarray = PIXELS) -> np.ndarray:
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels).save(buffer, format=image_format)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8).copy()


@pytest.mark.parametrize("image_format", ["PNG", "BMP", "TIFF"])
def test_lossless_formats_give_back_the_pixels(image_format):
    data = Tensor(data=encoded(image_format), requires_grad=False)
    np.testing.assert_array_equal(ag.image_decoder(data).numpy(), PIXELS)
    np.testing.assert_array_equal(ag.image_decoder(data, "BGR").numpy(), PIXELS[:, :, ::-1])
    gray = np.asarray(PIL.Image.fromarray(PIXELS).convert("L"))[:, :, None]
    np.testing.assert_array_equal(ag.image_decoder(data, "Grayscale").numpy(), gray)


def test_jpeg_decodes_as_pillow_decodes_it():
    data = encoded("JPEG")
    expected = np.asarray(PIL.Image.open(io.BytesIO(data.tobytes())).convert("RGB"))
    got = ag.image_decoder(Tensor(data=data, requires_grad=False)).numpy()
    np.testing.assert_array_equal(got, expected)


def test_bytes_that_are_no_image_are_named():
    junk = Tensor(data=np.arange(40, dtype=np.uint8), requires_grad=False)
    with pytest.raises(BadInputError, match=r"encoded_stream \(40 bytes\) is not an image"):
        ag.image_decoder(junk)
    with pytest.raises(BadInputError, match=r"must be 1-D uint8.*received float32"):
        ag.image_decoder(Tensor(data=np.zeros(4, np.float32), requires_grad=False))
