"""The first-run check of a newly compiled graph: its outputs against the eager program's.

A compiled graph computes what the eager steps compute, in another order and with other
kernels, so floating-point results differ in their last bits; a miscompiled graph (a wrong
index, a wrong stride) differs by far more. Graph mode runs the eager steps once beside each
graph's first run (``prepare(..., verify=False)`` skips it) and compares with the tolerance
of the outputs' type:

* floating point: ``|compiled - eager| <= rtol * |eager| + atol * max|eager|`` at every
  element, ``rtol`` and ``atol`` from the table below, so the absolute part scales with the
  output (logits of 50 and probabilities of 1e-3 alike), NaN equal to NaN;
* integers and booleans: equal (an index or a count is right or wrong).

The float32 bounds are a thousand times what reordering a long sum costs, and a thousand
times below the errors seen from miscompiles (a detector's pixel at 0.30 for 0.0045, a
speech score off by 10 %).

A segment that rounds values (quantizes them: ``DynamicQuantizeLinear``, ``QuantizeLinear``,
the integer products, ``Round``) turns a last-bit difference into a whole quantization step
wherever a value sits on a rounding boundary, and the step travels on: a four-layer int8
encoder's compiled output differed from eager by 0.011 on values up to 3.9, though both
compute the same function. Its outputs are held to ``rounded_tolerance`` (1 % of the value
and of the output's largest magnitude), integers included (a quantized code moves by one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram
    from sonnx.runtime.segments import Segment

__all__ = ["first_difference", "rounds_values", "segment_difference", "tolerance"]

#: (rtol, atol relative to the output's largest magnitude) by floating-point type.
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


#: The bound of outputs of segments that round values, whatever their type.
ROUNDED_TOLERANCE = (1e-2, 1e-2)

#: Parts of the names of the operators that round values to a grid (see the module docstring).
_ROUNDING_NAMES = ("Quantize", "Integer", "NBits", "QLinear", "QGemm", "QAttention", "QEmbed")


def rounds_values(op_types: Iterable[str]) -> bool:
    """Whether any of ``op_types`` rounds values to a grid (quantizes them)."""
    return any(
        op in ("Round", "Floor", "Ceil") or any(part in op for part in _ROUNDING_NAMES)
        for op in op_types
    )


def segment_difference(
    program: GraphProgram,
    segment: Segment,
    compiled: Sequence[torch.Tensor],
    eager: Sequence[torch.Tensor],
) -> str | None:
    """How a segment's compiled graph's outputs differ from its eager steps' (see
    :func:`first_difference`, held to the rounded tolerance where the segment rounds values).

    :param program: the steps.
    :param segment: the segment.
    :param compiled: its graph's outputs.
    :param eager: its eager steps' outputs, in the same order.
    :returns: the first difference described; None where they agree.
    """
    steps = program.steps[segment.start : segment.stop]
    rounded = rounds_values(step.info.op_type for step in steps)
    return first_difference(segment.outputs, compiled, eager, rounded)


def tolerance(dtype: torch.dtype) -> tuple[float, float] | None:
    """The (rtol, scaled atol) compiled results of ``dtype`` are held to; None: exact."""
    if dtype.is_complex:
        return _TOLERANCES.get(dtype.to_real(), _TOLERANCES[torch.float32])
    if dtype.is_floating_point:
        return _TOLERANCES.get(dtype, _TOLERANCES[torch.float16])
    return None


def first_difference(
    names: Sequence[str], compiled: Sequence[Any], eager: Sequence[Any], rounded: bool = False
) -> str | None:
    """How the first of ``names`` whose compiled value differs from its eager one differs,
    in words (``output 'y': max difference 0.29 at [0, 0, 53, 261] ...``); None when every
    value is within its type's tolerance, or within :data:`ROUNDED_TOLERANCE` where the
    values were ``rounded`` (see :func:`rounds_values`)."""
    for name, got, expected in zip(names, compiled, eager, strict=True):
        found = _difference(got, expected, rounded)
        if found is not None:
            return f"output {name!r}: {found}"
    return None


def _difference(got: Any, expected: Any, rounded: bool) -> str | None:
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return None  # not a tensor on both sides: nothing the compiler computed to compare
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return (
            f"{got.dtype}{list(got.shape)} where the eager steps give "
            f"{expected.dtype}{list(expected.shape)}"
        )
    if got.numel() == 0:
        return None
    got, expected = got.detach(), expected.detach().to(got.device)
    bounds = tolerance(got.dtype)
    if rounded and got.dtype != torch.bool:
        bounds = tuple(map(max, bounds or ROUNDED_TOLERANCE, ROUNDED_TOLERANCE))
    if bounds is None:
        wrong = got != expected
        if not bool(wrong.any()):
            return None
        where = _first_index(wrong)
        return (
            f"{int(wrong.sum())} of {got.numel()} elements differ, the first at {where} "
            f"({got[tuple(where)].item()} where the eager steps give "
            f"{expected[tuple(where)].item()})"
        )
    if got.is_complex():
        got, expected = torch.view_as_real(got), torch.view_as_real(expected)
    got, expected = got.double(), expected.double()
    rtol, atol = bounds
    magnitude = expected.nan_to_num(0.0, 0.0, 0.0).abs()  # NaN and infinities: exact
    scale = float(magnitude.max())
    error = (got - expected).abs()
    same_special = (got == expected) | (got.isnan() & expected.isnan())
    error = torch.where(same_special, torch.zeros_like(error), error.nan_to_num(torch.inf))
    allowed = rtol * magnitude + atol * scale + torch.finfo(torch.float32).tiny
    beyond = error > allowed
    if not bool(beyond.any()):
        return None
    where = _first_index(error == error.max())
    return (
        f"max difference {float(error.max()):.3g} at {where} ({got[tuple(where)].item():.6g} "
        f"where the eager steps give {expected[tuple(where)].item():.6g}); "
        f"{int(beyond.sum())} of {got.numel()} elements beyond rtol {rtol:g} + atol {atol:g} "
        f"x {scale:.3g}"
    )


def _first_index(mask: torch.Tensor) -> list[int]:
    """The index of ``mask``'s first true element, one integer per dimension."""
    flat = int(mask.reshape(-1).nonzero()[0, 0])
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape)]
