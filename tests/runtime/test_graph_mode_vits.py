"""Graph mode on the piece of a VITS text-to-speech model that issue 43 names: the edges of its
rational-quadratic spline's derivatives, set by a ScatterND into a padded 4-D tensor.

The reported crash, inductor's ``index out of bounds: 0 <= tmp39 < ks0*ks1*ks2*ks3`` in
``cpp_fused_add_index_copy_mul_view_where_0``, bounds a linear position by four symbolic
sizes. Of a VITS export's ScatterNDs only those of ``derivatives[..., 0] = c`` and
``derivatives[..., -1] = c`` address all four axes of their data (the others address two, or
the three of a NonZero mask); their index tuples are computed from the padded tensor's shape
(``Shape -> Range -> Expand -> Concat``) and the position is ScatterND's ``index_copy`` row,
``((i0 * C + i1) * T + i2) * W + where(i3 < 0, i3 + W, i3)``. Compiled with symbolic sizes, the
graph must serve texts shorter and longer than the one it was traced with.

The crash did not reproduce on a tiny random ``transformers`` VitsModel exported as the MMS-TTS
models are (TorchScript exporter, opset 17, stochastic duration predictor with 2 and 4 flows,
noise on, a tail bound low enough that the NonZero counts vary; texts of 5 to 23 tokens): graph
mode equalled eager and onnxruntime. That model compiles for minutes, so this test keeps the
piece whose kernel the report names.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import sonnx
from sonnx.errors import GraphModeWarning
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm


class _SplineEdges(nn.Module):
    """A VITS ConvFlow's spline parameters (``transformers``' ``VitsConvFlow`` and
    ``_unconstrained_rational_quadratic_spline``): a 1x1 convolution projects the hidden
    states to ``3 * bins - 1`` values per channel and frame, reshaped to ``(N, C, T, 3*bins-1)``;
    the derivatives, padded by one on each side, get a fixed value at both edges."""

    def __init__(self, channels: int = 1, bins: int = 4, edge: float = 0.5) -> None:
        super().__init__()
        self.bins, self.edge = bins, edge
        self.project = nn.Conv1d(channels, channels * (3 * bins - 1), 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, channels, frames = hidden.shape
        params = self.project(hidden).reshape(batch, channels, -1, frames).permute(0, 1, 3, 2)
        derivatives = F.pad(params[..., 2 * self.bins :], (1, 1))
        derivatives[..., 0] = self.edge
        derivatives[..., -1] = self.edge
        return derivatives


@pytest.fixture(scope="module")
def spline_edges() -> onnx.ModelProto:
    torch.manual_seed(0)
    axes = {"hidden": {0: "batch", 2: "tokens"}, "derivatives": {0: "batch", 2: "tokens"}}
    example = (torch.randn(1, 1, 7),)
    return tm.export(_SplineEdges(), example, 17, ["hidden"], ["derivatives"], dynamic_axes=axes)


def test_the_spline_edges_scatternd_serves_every_text_length_compiled(spline_edges) -> None:
    # No budget: on a loaded machine the compile may outlast the default, and a part left
    # eager would hide what the test is for.
    rep = sonnx.prepare(spline_edges, use_graph=True, compile_budget=None)
    eager = sonnx.prepare(spline_edges)
    session = ort.InferenceSession(spline_edges.SerializeToString())
    ops = {n.op_type for n in spline_edges.graph.node}
    assert {"Pad", "Range", "ScatterND"} <= ops
    rng = np.random.default_rng(0)
    # Traced at 7 tokens; then longer, shorter (a position past the traced sizes would leave
    # the tensor) and a batch of two.
    for batch, tokens in ((1, 7), (1, 12), (1, 3), (2, 5)):
        hidden = rng.standard_normal((batch, 1, tokens)).astype(np.float32)
        with warnings.catch_warnings():
            # A fallback (a compiled run that raised, a first-run mismatch) is a failure here.
            warnings.simplefilter("error", GraphModeWarning)
            got = to_numpy(rep.run([hidden])[0])
        expected = to_numpy(eager.run([hidden])[0])
        reference = session.run(None, {"hidden": hidden})[0]
        np.testing.assert_allclose(expected, reference, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        assert got.shape == (batch, 1, tokens, 5)  # bins + 1 derivatives
        np.testing.assert_array_equal(got[..., 0], np.float32(0.5))
        np.testing.assert_array_equal(got[..., -1], np.float32(0.5))
    # One symbolic graph serves every length, and no step fell back to eager.
    assert rep.graph_runner.compile_count == 1
    assert not rep.graph_runner.eager_steps
