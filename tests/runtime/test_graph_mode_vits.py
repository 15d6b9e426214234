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

A tiny VITS duration predictor compiled 46 graphs over 8 runs, for two reasons the stand-in
``_ReversedFlow`` keeps: the channel flip before each flow (a Slice from -1 to INT64_MIN by -1)
got a data-dependent size in a symbolic trace, which the Split after it could not check, so
those segments compiled once per text length; and every NonZero of a spline's masks cut a
segment of a Transpose and a GatherND, compiled (10-15 s each) to do the same copies; and each
flow's spline, the same steps on the same constants, compiled a graph of its own. The spline's
``Mul`` and ``Exp`` of the latents inside the bound, between two NonZeros, took 15-20 s to
compile and saves about 0.3 ms a run: it runs eagerly (see sonnx.runtime.segment_costs).
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
from sonnx.runtime import segment_costs
from sonnx.runtime.segments import ONLY_MOVES
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


class _ReversedFlow(nn.Module):
    """A VITS duration-predictor flow run in reverse, as at inference: the channels flipped
    and split in halves, the first projected into a scale, the second transformed where it
    lies inside the tail bound and kept outside it (boolean-mask indexing: NonZero ->
    Transpose -> GatherND, and ScatterND for the writes)."""

    def __init__(self, bound: float = 1.0) -> None:
        super().__init__()
        self.bound = bound
        self.project = nn.Conv1d(1, 1, 1)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        first, second = torch.split(torch.flip(latents, [1]), [1, 1], dim=1)
        scale = torch.sigmoid(self.project(first))
        inside = (second >= -self.bound) & (second <= self.bound)
        outside = ~inside
        out = torch.zeros_like(second)
        out[outside] = second[outside]
        out[inside] = torch.exp(second[inside] * scale[inside])
        return torch.cat([first, out], dim=1)


class _NoisyFlows(nn.Module):
    """Noise drawn, scaled and added, then two such flows of weights of their own, as a VITS
    duration predictor runs at inference. The noise is scaled by 0 here: the draw is a step
    graph mode runs eagerly, so that the flows' inputs are computed ones, as in VITS, while
    the results stay comparable with onnxruntime's (whose draws differ)."""

    def __init__(self, noise_scale: float = 0.0) -> None:
        super().__init__()
        self.noise_scale = noise_scale
        self.flows = nn.ModuleList([_ReversedFlow(), _ReversedFlow()])

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        latents = latents + torch.randn_like(latents) * self.noise_scale
        for flow in self.flows:
            latents = flow(latents)
        return latents


@pytest.fixture(scope="module")
def noisy_flows() -> onnx.ModelProto:
    torch.manual_seed(0)
    module = _NoisyFlows()
    # Several latents inside and outside the bound in both channels: torch's exporter writes
    # a masked write of one element as a broadcast, which holds for a count of one only.
    example = torch.tensor([-3.0, -2.0, -0.5, 0.0, 0.5, 2.0, 3.0]).expand(1, 2, 7)
    axes = {"latents": {0: "batch", 2: "tokens"}, "flowed": {0: "batch", 2: "tokens"}}
    return tm.export(module, (example,), 17, ["latents"], ["flowed"], dynamic_axes=axes)


def test_flows_compile_two_graphs_for_every_length_and_nonzero_count(
    noisy_flows, monkeypatch
) -> None:
    # The spline's glue is timed at its first run: pinned well above its time, so that a
    # loaded machine's timing cannot decide what is compiled here.
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.05)
    rep = sonnx.prepare(noisy_flows, use_graph=True, compile_budget=None)
    eager = sonnx.prepare(noisy_flows)
    session = ort.InferenceSession(noisy_flows.SerializeToString())
    rng = np.random.default_rng(0)
    # Lengths longer and shorter than the traced one, batches of 2 and 3, counts of latents
    # outside the bound from many to none (spread 0.1).
    for batch, tokens, spread in ((1, 7, 1.5), (1, 12, 1.5), (2, 5, 1.5), (1, 4, 0.1), (3, 9, 2)):
        latents = (rng.standard_normal((batch, 2, tokens)) * spread).astype(np.float32)
        got, expected = to_numpy(rep.run([latents])[0]), to_numpy(eager.run([latents])[0])
        reference = session.run(None, {"latents": latents})[0]
        np.testing.assert_allclose(expected, reference, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    runner = rep.graph_runner
    parts = [p for p in runner.parts() if len(p.steps) > 1]
    ops = [[rep.steps[i].info.op_type for i in p.steps] for p in parts if p.compiled]
    # Compiled: the noise added and the first flow's steps before its NonZeros; the second
    # flow's steps before its NonZeros (with the first's last copies).
    assert len(ops) == 2 and all({"Slice", "Split", "Conv"} <= set(o) for o in ops)
    # One graph each for every run.
    assert (runner.compile_count, runner.loaded_count) == (2, 0)
    # The other parts between the NonZeros only copy elements, or are the Mul and Exp of the
    # latents inside the bound, timed cheap eagerly: they run eagerly.
    cheap = [p for p in parts if not p.compiled and p.why_eager != ONLY_MOVES]
    assert len(cheap) == 2 and all("not worth a compile" in p.why_eager for p in cheap)
    glue = [[rep.steps[i].info.op_type for i in p.steps] for p in cheap]
    assert glue[0] == glue[1] and glue[0][:2] == ["Transpose", "GatherND"] and "Exp" in glue[0]
    assert _eager_ops(rep) == ["NonZero"] * 10 + ["RandomNormalLike"]
    # Without a compile budget (None), explain() still describes every part.
    lines = rep.explain().splitlines()
    assert sum(line.startswith("  part") and ONLY_MOVES in line for line in lines) == 7


def _eager_ops(rep: sonnx.SingaRep) -> list[str]:
    """The op types of the steps graph mode found it must run eagerly."""
    return sorted(rep.steps[i].info.op_type for i in rep.graph_runner.eager_steps)
