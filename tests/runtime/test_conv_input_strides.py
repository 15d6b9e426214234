"""oneDNN convolutions compiled with a plain weight read a transposed view of a computed tensor
as the channels-last input inductor laid their output out for
(``sonnx.runtime.conv_input_strides``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from sonnx.runtime.compiled_graphs import load_library
from sonnx.runtime.symbolic_graphs import compile_symbolic

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="oneDNN convolutions are CPU-build only"
)


def _transposed_into_a_conv1d(weight: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """``(N, T, C)`` -> Relu -> Transpose to ``(N, C, T)`` -> a depthwise 1-D convolution of
    width 3 as sonnx runs it, a 2-D one of height 1."""
    y = torch.relu(x).transpose(1, 2).unsqueeze(2)
    return [F.conv2d(y, weight, None, 1, (0, 1), 1, y.shape[1]).squeeze(2)]


def test_a_transposed_computed_tensor_into_a_conv1d_matches_eager(tmp_path: Path) -> None:
    # Compiled before the fix, the output was eager's numbers in the wrong places: the input
    # view had a stride of 0 along its height of 1, which oneDNN's kernel took for NCHW while
    # the graph read its output as channels-last.
    torch.manual_seed(0)
    channels = 16
    weights = [torch.randn(channels, 1, 1, 3)]
    library = tmp_path / "graph.so"
    with torch.no_grad():
        guards = compile_symbolic(
            _transposed_into_a_conv1d,
            weights,
            [torch.randn(2, 6, channels)],
            library,
            {},
            [("batch", "frames", channels)],
        )
        run = load_library(library, torch.device("cpu"))
        for batch, frames in ((2, 6), (3, 11), (2, 9)):
            x = torch.randn(batch, frames, channels)
            for got, expected in zip(run(x), _transposed_into_a_conv1d(*weights, x), strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert "size()[1] == 6" not in guards, "the graph must serve other lengths"
