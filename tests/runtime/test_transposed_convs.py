"""Constant operations after a transposed convolution folded into it
(``sonnx.runtime.transposed_convs``) along its output channels, with the results unchanged; the
end-to-end cases (a DB text detector's head in graph mode) are in ``tests/testing/test_zoo.py``
and ``tests/runtime/test_graph_mode_detectors.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.runtime.transposed_convs import fold_into_transposed_convolutions

_aten = torch.ops.aten
_BINARY = {_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor}
_BATCH_NORM = _aten._native_batch_norm_legit_no_training.default


def _traced(
    cin: int, cout: int, groups: int, after: Callable[..., torch.Tensor]
) -> torch.fx.GraphModule:
    """A transposed convolution of ``cin`` channels of ``x`` to ``cout`` (no bias) and
    ``after(y, x)`` of its output ``y``, its weight and constants captured as the module's
    attributes (as graph mode freezes them)."""
    weight = torch.randn(cin, cout // groups, 2, 2)

    def model(x: torch.Tensor) -> torch.Tensor:
        y = F.conv_transpose2d(x, weight, None, stride=2, groups=groups)
        return after(y, x)

    return make_fx(model)(torch.randn(1, cin, 3, 3))


def _channels(cout: int, seed: int) -> torch.Tensor:
    """Per-channel constants, away from zero (some divide)."""
    return torch.randn(1, cout, 1, 1, generator=torch.Generator().manual_seed(seed)) + 2


ADD1, ADD3, MUL4, ADD4, SCALE4, SUB6 = (
    _channels(c, seed) for seed, c in enumerate((1, 3, 4, 4, 4, 6))
)


def _statistics(channels: int, seed: int) -> list[torch.Tensor]:
    """A trained BatchNorm's mean, variance (one near zero), scale and shift: each channel's
    its own."""
    g = torch.Generator().manual_seed(seed)
    var = torch.rand(channels, generator=g) * 2 + 0.1
    var[0] = 1e-7
    return [torch.randn(channels, generator=g), var, torch.rand(channels, generator=g) + 0.5,
            torch.randn(channels, generator=g)]  # fmt: skip


MEAN4, VAR4, SCALE4N, SHIFT4 = _statistics(4, 10)
MEAN6, VAR6, SCALE6N, SHIFT6 = _statistics(6, 11)
# (channels in, out, groups, what follows): paddle2onnx's one-channel head with its bias added
# (the shape inductor mis-sized), a square one scaled per channel (which inductor computed
# wrong), and grouped ones.
CASES = {
    "add-one-channel": (24, 1, 1, lambda y, x: y + ADD1),
    "bias-first": (6, 3, 1, lambda y, x: ADD3 + y),
    "mul-square": (4, 4, 1, lambda y, x: y * MUL4),
    "add-then-mul": (4, 4, 1, lambda y, x: (y + ADD4) * SCALE4),
    "sub-grouped": (4, 6, 2, lambda y, x: y - SUB6),
    "div-grouped-scalar": (4, 6, 2, lambda y, x: y / 3.0),
}
# A DB head's (issue #48): BatchNormalization after the transposed convolution, or after the
# Add of its bias, which inductor decomposed and folded along the wrong dimension.
NORMS = {
    "norm-square": (4, 4, 1, lambda y, x: F.batch_norm(y, MEAN4, VAR4, SCALE4N, SHIFT4)),
    "add-then-norm": (
        4, 4, 1, lambda y, x: F.batch_norm(y + ADD4, MEAN4, VAR4, SCALE4N, SHIFT4, eps=1e-3)
    ),
    "norm-grouped-no-affine": (4, 6, 2, lambda y, x: F.batch_norm(y, MEAN6, VAR6)),
}  # fmt: skip


@pytest.mark.parametrize("case", [*CASES, *NORMS])
def test_a_constant_per_channel_operation_is_folded_with_the_same_results(case: str) -> None:
    torch.manual_seed(0)
    cin, cout, groups, after = {**CASES, **NORMS}[case]
    module = _traced(cin, cout, groups, after)
    x = torch.randn(2, cin, 5, 4)
    expected = module(x)
    fold_into_transposed_convolutions(module)
    targets = {n.target for n in module.graph.nodes if n.op == "call_function"}
    assert not targets & {*_BINARY, _BATCH_NORM}
    torch.testing.assert_close(module(x), expected, rtol=1e-5, atol=1e-5)


def test_an_operation_not_of_a_per_channel_constant_is_left_alone() -> None:
    torch.manual_seed(0)
    per_pixel = torch.randn(1, 4, 6, 6)
    for after in (
        lambda y, x: y + per_pixel,  # a constant, but not one value per channel
        lambda y, x: y * x.mean((2, 3), keepdim=True),  # per channel, but computed
        lambda y, x: y * y,
        lambda y, x: F.batch_norm(y, MEAN4, VAR4) + y,  # not the convolution's only reader
        lambda y, x: F.batch_norm(y, x.mean((0, 2, 3)), VAR4),  # statistics computed
    ):
        module = _traced(4, 4, 1, after)
        x = torch.randn(1, 4, 3, 3)
        expected = module(x)
        before = [n.target for n in module.graph.nodes]
        fold_into_transposed_convolutions(module)
        assert [n.target for n in module.graph.nodes] == before
        torch.testing.assert_close(module(x), expected)
