"""Prepacked convolution weights in graphs of symbolic sizes (``sonnx.runtime.conv_prepack``):
every convolution of a graph-mode CNN whose batch alone is symbolic gets a packed weight, those
of symbolic image sizes keep a plain one, and the graph computes eager's answer at sizes other
than the one it was compiled at either way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import sonnx
from sonnx.runtime import compiled_graphs, conv_prepack
from sonnx.runtime.library_constants import SOURCES_FILE
from sonnx.runtime.store import store_root
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="oneDNN convolutions are CPU-build only"
)


class _Convs(nn.Module):
    """A plain, a strided depthwise and a 1x1 convolution with activations between."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.project = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        return self.project(nn.functional.hardswish(self.depthwise(y)))


@pytest.mark.parametrize(
    ("axes", "shapes", "packed_count"),
    [
        ({0: "n"}, [(2, 3, 16, 16), (3, 3, 16, 16), (1, 3, 16, 16)], 3),
        ({0: "n", 2: "h", 3: "w"}, [(2, 3, 16, 16), (3, 3, 24, 40), (4, 3, 9, 13)], 0),
    ],
    ids=["symbolic-batch", "symbolic-image-size"],
)
def test_symbolic_graphs_pack_weights_for_a_symbolic_batch_and_match_eager_at_other_sizes(
    monkeypatch: pytest.MonkeyPatch,
    axes: dict[int, str],
    shapes: list[tuple[int, ...]],
    packed_count: int,
) -> None:
    packed: list[str] = []

    def counting(graph: torch.fx.Graph) -> None:
        conv_prepack.prepack_convolution_weights(graph)
        packed.extend(n.target for n in graph.nodes if "_packed_" in str(n.target))

    monkeypatch.setattr(compiled_graphs, "prepack_convolution_weights", counting)
    torch.manual_seed(0)
    model = tm.export(_Convs(), (torch.randn(2, 3, 16, 16),), 17, ["x"], dynamic_axes={"x": axes})
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        got, expected = to_numpy(graph.run([x])[0]), to_numpy(eager.run([x])[0])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert graph.graph_runner.fallback is None
    assert graph.graph_runner.compile_count == 1
    assert len(packed) == packed_count
    # Packed weights (opaque) stay inside the library; plain ones are read from the model.
    root = store_root()
    assert root is not None
    (library,) = (root / "graphs").glob("*/*/graph.so")
    assert library.with_name(SOURCES_FILE).exists() == (packed_count == 0)


def _pointwise_graph(example: torch.Tensor) -> torch.fx.GraphModule:
    """``_convolution_pointwise(x, w)`` with ``w`` a constant, ``x``'s example ``example`` and
    the output expected channels-last, as inductor lays out a CNN's convolutions."""
    module = torch.fx.GraphModule(nn.Module(), torch.fx.Graph())
    module.register_buffer("w", torch.randn(4, 3, 3, 3))
    graph = module.graph
    x = graph.placeholder("x")
    x.meta["val"] = example
    w = graph.get_attr("w")
    args = (x, w, None, [1, 1], [1, 1], [1, 1], 1, "none", [], "")
    conv = graph.call_function(conv_prepack._POINTWISE, args)
    conv.meta["val"] = example.new_empty(example.shape[0], 4, *example.shape[2:]).contiguous(
        memory_format=torch.channels_last
    )
    graph.output(conv)
    module.recompile()
    return module


def _fake(dynamic: list[bool]) -> torch.Tensor:
    """A fake (2, 3, 8, 8) input whose dims are symbols where ``dynamic`` says."""
    sizes = [DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dynamic]
    return FakeTensorMode(shape_env=ShapeEnv()).from_tensor(
        torch.empty(2, 3, 8, 8), symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes)
    )


def test_weights_are_packed_where_only_the_batch_is_symbolic() -> None:
    torch.manual_seed(0)
    for example in (torch.empty(1, 3, 8, 8), _fake([True, False, True, True])):
        # Static sizes: inductor packs it itself. A symbolic image size: packing for the
        # example's size made oneDNN reorder slowly at the others.
        left = _pointwise_graph(example)
        conv_prepack.prepack_convolution_weights(left.graph)
        assert [n.target for n in left.graph.nodes if n.op == "get_attr"] == ["w"]

    symbolic = _pointwise_graph(_fake([True, False, False, False]))
    conv_prepack.prepack_convolution_weights(symbolic.graph)
    symbolic.recompile()
    (attr,) = [n.target for n in symbolic.graph.nodes if n.op == "get_attr"]
    assert getattr(symbolic, attr).is_mkldnn
    x = torch.randn(2, 3, 8, 8)
    expected = nn.functional.conv2d(x, symbolic.w, padding=1)
    torch.testing.assert_close(symbolic(x), expected, rtol=1e-5, atol=1e-5)


class _Spectrogram(nn.Module):
    """An STFT as a strided 1-D convolution of one channel, its magnitude, a 3-wide conv."""

    def __init__(self) -> None:
        super().__init__()
        self.basis = nn.Conv1d(1, 258, 256, stride=128, bias=False)
        self.encoder = nn.Conv1d(129, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.basis(nn.functional.pad(x.unsqueeze(1), (128, 128), mode="reflect"))
        return self.encoder(torch.sqrt(spec[:, :129] ** 2 + spec[:, 129:] ** 2))


def test_a_convolution_of_one_channel_keeps_its_plain_weight_and_matches_eager() -> None:
    """With its weight packed, the spectrogram of a padded waveform came out wrong."""
    torch.manual_seed(0)
    axes = {"x": {0: "n"}}
    model = tm.export(_Spectrogram(), (torch.randn(2, 512),), 17, ["x"], dynamic_axes=axes)
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 512)).astype(np.float32)
        got, expected = to_numpy(graph.run([x])[0]), to_numpy(eager.run([x])[0])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert graph.graph_runner.fallback is None


def test_a_convolution_expected_to_write_nchw_keeps_its_plain_weight() -> None:
    torch.manual_seed(0)
    module = _pointwise_graph(_fake([True, False, False, False]))
    (conv,) = [n for n in module.graph.nodes if n.target is conv_prepack._POINTWISE]
    conv.meta["val"] = conv.meta["val"].contiguous()
    conv_prepack.prepack_convolution_weights(module.graph)
    assert [n.target for n in module.graph.nodes if n.op == "get_attr"] == ["w"]
