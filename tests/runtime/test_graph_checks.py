"""``first_difference``: a compiled graph's outputs against the eager steps', within the
tolerance of their type."""

from __future__ import annotations

import torch

from sonnx.runtime.graph_checks import first_difference, rounds_values, tolerance


def test_reordering_noise_passes_and_a_miscompile_is_named_with_where_and_by_how_much() -> None:
    eager = torch.linspace(-50.0, 50.0, 24).reshape(2, 3, 4)
    noisy = eager * (1 + 1e-6)  # what another summation order costs
    assert first_difference(["y"], [noisy], [eager]) is None
    wrong = eager.clone()
    wrong[1, 2, 3] += 0.5
    found = first_difference(["x", "y"], [eager, wrong], [eager, eager])
    assert found.startswith("output 'y': max difference 0.5 at [1, 2, 3] (50.5 where the eager")
    assert "1 of 24 elements beyond rtol 0.001 + atol 0.0001 x 50" in found


def test_the_absolute_bound_scales_with_the_output_and_small_values_are_held_to_rtol() -> None:
    probabilities = torch.tensor([0.0045, 0.9, 1e-7])
    assert first_difference(["p"], [probabilities + 5e-5], [probabilities]) is None
    moved = probabilities.clone()
    moved[0] = 0.299  # a detector's pixel, graph mode against eager
    assert "max difference 0.294" in first_difference(["p"], [moved], [probabilities])
    scores = torch.full((8,), 3e-3)
    assert first_difference(["s"], [scores * 1.1], [scores]) is not None  # 10 % off


def test_nan_matches_nan_and_integers_must_be_equal() -> None:
    eager = torch.tensor([float("nan"), float("inf"), 1.0])
    assert first_difference(["y"], [eager.clone()], [eager]) is None
    assert first_difference(["y"], [torch.tensor([0.0, float("inf"), 1.0])], [eager])
    ids = torch.tensor([[3, 1], [4, 1]])
    other = torch.tensor([[3, 1], [4, 2]])
    assert first_difference(["ids"], [other], [ids]) == (
        "output 'ids': 1 of 4 elements differ, the first at [1, 1] (2 where the eager steps give 1)"
    )
    flags = torch.tensor([True, False])
    assert first_difference(["f"], [flags.clone()], [flags]) is None


def test_a_shape_or_type_that_differs_is_a_difference() -> None:
    eager = torch.zeros(2, 3)
    assert first_difference(["y"], [torch.zeros(3, 2)], [eager]) == (
        "output 'y': torch.float32[3, 2] where the eager steps give torch.float32[2, 3]"
    )
    assert first_difference(["y"], [torch.zeros(2, 3, dtype=torch.float64)], [eager])
    assert first_difference(["e"], [torch.zeros(0, 3)], [torch.zeros(0, 3)]) is None


def test_tolerances_follow_the_type() -> None:
    assert tolerance(torch.float32) == (1e-3, 1e-4)
    assert tolerance(torch.bfloat16)[0] > tolerance(torch.float16)[0] > tolerance(torch.float32)[0]
    assert tolerance(torch.complex64) == tolerance(torch.float32)
    assert tolerance(torch.int64) is None and tolerance(torch.bool) is None


def test_values_rounded_to_a_grid_are_held_to_a_step_not_to_the_last_bits() -> None:
    """A last-bit difference before a quantization moves a code by one step, which travels
    on: within 1 % where the segment rounds, a difference where it does not."""
    eager = torch.linspace(-3.9, 3.9, 64)
    moved = eager + 0.011 * (torch.arange(64) % 2)
    assert first_difference(["h"], [moved], [eager])
    assert first_difference(["h"], [moved], [eager], rounded=True) is None
    assert first_difference(["h"], [eager + 0.3], [eager], rounded=True)  # a miscompile still
    codes = torch.tensor([0, 17, 255], dtype=torch.uint8)
    flipped = torch.tensor([0, 18, 255], dtype=torch.uint8)
    assert first_difference(["q"], [flipped], [codes])
    assert first_difference(["q"], [flipped], [codes], rounded=True) is None


def test_the_operators_that_round_values() -> None:
    assert rounds_values(["Relu", "DynamicQuantizeLinear", "MatMul"])
    for op in ("MatMulInteger", "QLinearConv", "MatMulNBits", "QAttention", "Round", "QGemm"):
        assert rounds_values([op])
    assert not rounds_values(["Conv", "Cast", "Softmax", "Gather"])
