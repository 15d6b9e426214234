"""Audio stand-in for the model zoo benchmark: a streaming voice-activity detector.

:class:`StreamingVAD` imitates Silero-VAD's ONNX file: it takes a chunk of 512 samples
``input [batch, 512]``, the sample rate ``sr`` (an int64 scalar) and the LSTM state
``h``, ``c [1, batch, hidden]``, and returns the speech probability ``output [batch, 1]`` and
the next state ``hn``, ``cn``. :func:`export_vad` writes it as Silero's scripted export does:
an ``If`` on ``sr == 16000`` choosing between two front-ends (branches reading outer-scope
initializers), each a reflect ``Pad`` and an STFT computed as a ``Conv`` with a fixed
windowed-Fourier basis, the magnitude (``Slice``, ``Mul``, ``Add``, ``Sqrt``) and strided
convs; then shared convs, an ``LSTM`` whose state is an input and an output, and a sigmoid
decoder. The branches and the body are exported by torch separately and put together with
``onnx.helper``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from torch import nn

from sonnx.testing.torch_models import export

CHUNK = 512
RATES = (16000, 8000)


class STFTFrontEnd(nn.Module):
    """Magnitude spectrogram by a strided Conv1d with a Hann-windowed DFT basis, then two
    convs (the second with stride 2) to ``channels`` features: ``[batch, channels, frames]``."""

    def __init__(self, n_fft: int, hop: int, channels: int) -> None:
        super().__init__()
        self.pad, self.hop, self.bins = n_fft // 2, hop, n_fft // 2 + 1
        n = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(self.bins, dtype=torch.float64)[:, None]
        window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
        angle = 2 * math.pi * k * n / n_fft
        basis = torch.cat((torch.cos(angle) * window, -torch.sin(angle) * window))
        self.register_buffer("basis", basis.to(torch.float32)[:, None, :])
        self.encoder = nn.Sequential(
            nn.Conv1d(self.bins, channels, 3, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.pad(x.unsqueeze(1), (self.pad, self.pad), mode="reflect")
        spec = nn.functional.conv1d(x, self.basis, stride=self.hop)
        real, imag = spec[:, : self.bins], spec[:, self.bins :]
        return self.encoder(torch.sqrt(real * real + imag * imag))


class VADBody(nn.Module):
    """Shared convs, the stateful LSTM over the frames, and the decoder of the last frame."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(channels, channels, 3, padding=1), nn.ReLU(),
            nn.Conv1d(channels, hidden, 1), nn.ReLU(),
        )  # fmt: skip
        self.lstm = nn.LSTM(hidden, hidden)
        self.decoder = nn.Linear(hidden, 1)

    def forward(
        self, features: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.convs(features).permute(2, 0, 1), (h, c))
        return torch.sigmoid(self.decoder(torch.relu(y[-1]))), h, c


class StreamingVAD(nn.Module):
    """The torch reference: ``forward(input, sr, h, c)`` picks the front-end in Python.

    The real model uses 64 features and a 64-unit LSTM (``channels``, ``hidden``).
    """

    def __init__(self, channels: int = 64, hidden: int = 64) -> None:
        super().__init__()
        self.hidden = hidden
        self.front16 = STFTFrontEnd(256, 128, channels)
        self.front8 = STFTFrontEnd(128, 64, channels)
        self.body = VADBody(channels, hidden)

    def forward(
        self, x: torch.Tensor, sr: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        front = self.front16 if int(sr) == 16000 else self.front8
        return self.body(front(x), h, c)


def vad_inputs(batch: int, sr: int, hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A chunk of noise with a tone, the sample rate and a random (mid-stream) state."""
    rng = np.random.default_rng(seed)
    t = np.arange(CHUNK) / sr
    tone = 0.3 * np.sin(2 * np.pi * 440 * t)[None, :]
    x = (tone + 0.05 * rng.standard_normal((batch, CHUNK))).astype(np.float32)
    h, c = (0.5 * rng.standard_normal((2, 1, batch, hidden))).astype(np.float32)
    return {"input": x, "sr": np.array(sr, np.int64), "h": h, "c": c}


def _renamed(graph: onnx.GraphProto, prefix: str, keep: set[str]) -> onnx.GraphProto:
    """``graph`` with every node, value and initializer name prefixed, except ``keep``."""
    out = onnx.GraphProto()
    out.CopyFrom(graph)

    def name(n: str) -> str:
        return n if not n or n in keep else prefix + n

    for node in out.node:
        node.name = prefix + node.name
        node.input[:] = [name(n) for n in node.input]
        node.output[:] = [name(n) for n in node.output]
    for value in [*out.initializer, *out.input, *out.output, *out.value_info]:
        value.name = name(value.name)
    return out


def export_vad(module: StreamingVAD, opset: int = 17) -> onnx.ModelProto:
    """The ONNX file of ``module``: ``If(sr == 16000)`` over the two exported front-ends
    (their weights lifted into the main graph, read from the branches as outer-scope values),
    then the exported body."""
    module.eval()
    x = torch.zeros(1, CHUNK)
    state = torch.zeros(1, 1, module.hidden)
    branches, weights = [], []
    for front, prefix in ((module.front16, "front16/"), (module.front8, "front8/")):
        axes = {"input": {0: "batch"}, "features": {0: "batch", 2: "frames"}}
        part = _renamed(
            export(front, (x,), opset, ["input"], ["features"], dynamic_axes=axes).graph,
            prefix,
            {"input"},
        )
        weights += part.initializer
        branches.append(
            helper.make_graph(
                part.node, prefix.rstrip("/"), [],
                [helper.make_tensor_value_info(f"{prefix}features", TensorProto.FLOAT, None)],
            )
        )  # fmt: skip
    axes = {
        "features": {0: "batch", 2: "frames"},
        **{n: {1: "batch"} for n in ("h", "c", "hn", "cn")},
        "output": {0: "batch"},
    }
    body = export(
        module.body,
        (module.front16(x), state, state),
        opset,
        ["features", "h", "c"],
        ["output", "hn", "cn"],
        dynamic_axes=axes,
    ).graph
    body = _renamed(body, "body/", {"features", "h", "c", "output", "hn", "cn"})
    nodes = [
        helper.make_node(
            "Constant", [], ["sr16k"], name="sr16k",
            value=helper.make_tensor("sr16k", TensorProto.INT64, [], [16000]),
        ),
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="is16k"),
        helper.make_node(
            "If", ["is16k"], ["features"], name="front_end",
            then_branch=branches[0], else_branch=branches[1],
        ),
        *body.node,
    ]  # fmt: skip
    state_type = ["1", "batch", module.hidden]
    graph = helper.make_graph(
        nodes,
        "streaming_vad",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", CHUNK]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, state_type),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, state_type),
        ],
        list(body.output),
        [*weights, *body.initializer],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model
