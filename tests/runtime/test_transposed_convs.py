"""Constant operations after a transposed convolution folded into it
(``sonnx.runtime.transposed_convs``) along its output channels, with the results unchanged; the
end-to-end case (a DB text detector's head in graph mode) is in ``tests/testing/test_zoo.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.runtime.transposed_convs import fold_into_transposed_convolutions

_aten = torch.ops.aten
_BINARY = {_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor}


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


@pytest.mark.parametrize("case", list(CASES))
def test_a_constant_per_channel_operation_is_folded_with_the_same_results(case: str) -> None:
    torch.manual_seed(0)
    cin, cout, groups, after = CASES[case]
    module = _traced(cin, cout, groups, after)
    x = torch.randn(2, cin, 5, 4)
    expected = module(x)
    fold_into_transposed_convolutions(module)
    targets = {n.target for n in module.graph.nodes if n.op == "call_function"}
    assert not targets & _BINARY
    torch.testing.assert_close(module(x), expected, rtol=1e-5, atol=1e-5)


def test_an_operation_not_of_a_per_channel_constant_is_left_alone() -> None:
    torch.manual_seed(0)
    per_pixel = torch.randn(1, 4, 6, 6)
    for after in (
        lambda y, x: y + per_pixel,  # a constant, but not one value per channel
        lambda y, x: y * x.mean((2, 3), keepdim=True),  # per channel, but computed
        lambda y, x: y * y,
    ):
        module = _traced(4, 4, 1, after)
        x = torch.randn(1, 4, 3, 3)
        expected = module(x)
        before = [n.target for n in module.graph.nodes]
        fold_into_transposed_convolutions(module)
        assert [n.target for n in module.graph.nodes] == before
        torch.testing.assert_close(module(x), expected)
