"""Graph mode on stand-ins for model families it got wrong: the compiled runs equal the eager
ones, and the steps run compiled (a fallback to eager would hide a wrong compile).

Each stand-in is cut down to what the family's fault needed, so that it compiles in seconds.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import sonnx
from sonnx.runtime import segment_costs
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm


class _SpeechQuality(nn.Module):
    """A speech-quality scorer's layout: a 2-D convolution over a ``(N, 1, T, F)``
    spectrogram, ``Transpose[0, 2, 3, 1]`` and a Reshape to ``(N, T, C*F)`` whose target is
    computed from the tensor's shape (``Shape -> Gather -> Concat``), a Transpose into a
    ``Conv1d(k=1)``, a GRU and a ``Conv1d(k=1)`` head, averaged over time."""

    def __init__(self, channels: int = 8, freqs: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.front = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU())
        self.project = nn.Conv1d(channels * freqs, hidden, 1)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Conv1d(hidden, 1, 1)

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        y = self.front(spectrogram).permute(0, 2, 3, 1)
        y = y.reshape(y.shape[0], y.shape[1], y.shape[2] * y.shape[3])
        y = torch.relu(self.project(y.transpose(1, 2)))
        y, _ = self.gru(y.transpose(1, 2))
        return self.head(y.transpose(1, 2)).mean(dim=2)


@pytest.fixture(scope="module")
def speech_quality() -> onnx.ModelProto:
    torch.manual_seed(0)
    axes = {"spectrogram": {0: "batch", 2: "frames"}, "score": {0: "batch"}}
    example = (torch.randn(2, 1, 6, 8),)
    return tm.export(_SpeechQuality(), example, 11, ["spectrogram"], ["score"], dynamic_axes=axes)


def _eager_ops(rep: sonnx.SingaRep) -> list[str]:
    """The op types of the steps graph mode ran eagerly."""
    return sorted(rep.steps[i].info.op_type for i in rep.graph_runner.eager_steps)


def test_a_transpose_into_a_conv1d_after_a_shape_computed_reshape_matches_eager(
    speech_quality,
) -> None:
    # The compiled Conv1d read its input, a transposed view inductor gave a stride of 0 along
    # the height of 1 it runs 1-D convolutions at, as NCHW while the graph read its output
    # as channels-last: every frame's score mixed with others' (see
    # sonnx.runtime.conv_input_strides).
    rep, eager = sonnx.prepare(speech_quality, use_graph=True), sonnx.prepare(speech_quality)
    rng = np.random.default_rng(0)
    for batch, frames in ((2, 6), (1, 9), (3, 5)):
        x = rng.standard_normal((batch, 1, frames, 8)).astype(np.float32)
        got, expected = to_numpy(rep.run([x])[0]), to_numpy(eager.run([x])[0])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert rep.graph_runner.compile_count > 0
    # Only the GRU, stepping through a sequence of symbolic length, runs eagerly.
    assert _eager_ops(rep) == ["GRU"]


def _duration_expander() -> onnx.ModelProto:
    """A text-to-speech duration expander: token durations (``Ceil(Exp(log_durations))``)
    -> CumSum into each token's first and last frame -> a (frame, token) mask by comparing
    the frames' positions (a CumSum of the frame mask) -> NonZero -> ScatterND of ones into
    the alignment -> MatMul with the encoder output; plus RandomNormalLike noise, expanded
    alike, scaled and added."""

    def node(op: str, inputs: list[str], output: str, **attrs: object) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [output], name=output, **attrs)

    def constant(name: str, value: object, dtype: type = np.int64) -> onnx.NodeProto:
        tensor = onnx.numpy_helper.from_array(np.array(value, dtype=dtype), name)
        return helper.make_node("Constant", [], [name], name=name, value=tensor)

    zeros = {"value": helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])}
    ones = {"value": helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])}
    nodes = [
        node("RandomNormalLike", ["encoded"], "noise", seed=7.0),
        node("Exp", ["log_durations"], "scaled_durations"),
        node("Ceil", ["scaled_durations"], "durations"),
        constant("time_axis", 1),
        node("CumSum", ["durations", "time_axis"], "ends"),
        node("Sub", ["ends", "durations"], "starts"),
        node("CumSum", ["frame_mask", "time_axis"], "frames_so_far"),
        constant("one", 1.0, np.float32),
        node("Sub", ["frames_so_far", "one"], "positions"),
        node("Unsqueeze", ["positions"], "frame_column", axes=[2]),
        node("Unsqueeze", ["starts"], "start_row", axes=[1]),
        node("Unsqueeze", ["ends"], "end_row", axes=[1]),
        node("Less", ["frame_column", "start_row"], "before_start"),
        node("Not", ["before_start"], "from_start"),
        node("Less", ["frame_column", "end_row"], "before_end"),
        node("And", ["from_start", "before_end"], "in_token"),
        node("NonZero", ["in_token"], "pairs"),
        node("Transpose", ["pairs"], "indices", perm=[1, 0]),
        node("Shape", ["in_token"], "alignment_shape"),
        node("ConstantOfShape", ["alignment_shape"], "empty", **zeros),
        node("Shape", ["indices"], "indices_shape"),
        constant("first", [0]),
        node("Gather", ["indices_shape", "first"], "count", axis=0),
        node("ConstantOfShape", ["count"], "ones", **ones),
        node("ScatterND", ["empty", "indices", "ones"], "alignment"),
        node("Transpose", ["encoded"], "tokens", perm=[0, 2, 1]),
        node("MatMul", ["alignment", "tokens"], "frames"),
        node("Transpose", ["noise"], "token_noise", perm=[0, 2, 1]),
        node("MatMul", ["alignment", "token_noise"], "frame_noise"),
        constant("noise_scale", 0.5, np.float32),
        node("Mul", ["frame_noise", "noise_scale"], "scaled_noise"),
        node("Add", ["frames", "scaled_noise"], "noisy_frames"),
        node("Transpose", ["frames"], "expanded", perm=[0, 2, 1]),
        node("Transpose", ["noisy_frames"], "noisy", perm=[0, 2, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "duration_expander",
        [
            helper.make_tensor_value_info("encoded", TensorProto.FLOAT, ["batch", 4, "tokens"]),
            helper.make_tensor_value_info("log_durations", TensorProto.FLOAT, ["batch", "tokens"]),
            helper.make_tensor_value_info("frame_mask", TensorProto.FLOAT, ["batch", "frames"]),
        ],
        [
            helper.make_tensor_value_info("expanded", TensorProto.FLOAT, ["batch", 4, "frames"]),
            helper.make_tensor_value_info("noisy", TensorProto.FLOAT, ["batch", 4, "frames"]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _expander_inputs(rng: np.random.Generator, batch: int, tokens: int) -> list[np.ndarray]:
    """Encoder output, log-durations of 1 to 3 frames, and a frame mask as long as the
    longest utterance."""
    durations = rng.integers(1, 4, (batch, tokens)).astype(np.float32)
    frames = int(durations.sum(axis=1).max())
    return [
        rng.standard_normal((batch, 4, tokens)).astype(np.float32),
        np.log(durations - 0.5).astype(np.float32),
        np.ones((batch, frames), np.float32),
    ]


def test_a_duration_expander_with_nonzero_and_scatternd_matches_eager(monkeypatch) -> None:
    # Reported: a VITS model's compiled segment holding ScatterND raised inductor's "index
    # out of bounds" check instead of computing. These steps, cut down, do not; the test
    # holds what they must do: the graph after the eager NonZero serving every length and
    # count, equal to eager. The durations' arithmetic between the draw and the NonZero is
    # light, and timed cheap at its first run (pinned well above its time here, so that a
    # loaded machine cannot decide it): it runs eagerly (see sonnx.runtime.segment_costs).
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.05)
    model = _duration_expander()
    rep, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    for batch, tokens in ((1, 5), (2, 7), (1, 3)):
        feeds = _expander_inputs(rng, batch, tokens)
        got, expected = rep.run(feeds), eager.run(feeds)
        # The noise has a seed: the same draw in both runs.
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(to_numpy(g), to_numpy(e), rtol=1e-5, atol=1e-6)
    runner = rep.graph_runner
    assert runner.compile_count == 1
    assert [p.compiled for p in runner.parts() if len(p.steps) > 1] == [False, True]
    assert "CumSum" in {rep.steps[i].info.op_type for i in runner.parts()[1].steps}
    assert "not worth a compile" in runner.parts()[1].why_eager
    assert _eager_ops(rep) == ["NonZero", "RandomNormalLike"]
