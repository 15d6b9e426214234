"""Load-time folding: steps that read only weights and constants, and the results they keep.

A DequantizeLinear or Cast of an int8 weight, a Transpose of a weight, the Shape of an
initializer: such a step computes the same result at every run as long as the tensors it reads
are the same and unchanged. :func:`mark_foldable` finds these steps when a graph is compiled;
:class:`FoldedResults` keeps each one's result with the tensors it was computed from
(:class:`~sonnx.engine.kept_results.KeptResult`), and hands it back until one of them is
replaced (``load_states``) or changed in place (an optimizer step). In training, a step on a
trainable weight is computed at every run, so that the weight stays in torch's graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sonnx.engine.kept_results import KeptResult
from sonnx.engine.operator import Randomness, is_training
from sonnx.engine.tracing import value_checks
from sonnx.onnx.registry import operator_class
from sonnx.runtime.steps import StepKind
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.steps import Step

__all__ = ["FoldedResults", "mark_foldable"]


def mark_foldable(steps: Sequence[Step], constants: dict[str, Tensor]) -> None:
    """Mark the steps that read only constants and steps marked before them (no subgraphs, no
    random draws): what depends only on weights and constants."""
    known = set(constants)
    for step in steps:
        reads = [n for n in step.inputs if n]
        if (
            reads
            and not step.has_subgraphs
            and operator_class(step.info).random is not Randomness.ALWAYS
            and all(n in known for n in reads)
        ):
            step.kind = StepKind.FOLDED
            known.update(o for o in step.outputs if o)


class FoldedResults:
    """The kept results of foldable steps, by step index."""

    def __init__(self) -> None:
        self._kept: dict[int, KeptResult] = {}

    def result(self, index: int, args: list[Any]) -> Any:
        """Step ``index``'s kept result, if its inputs are the same tensors, unchanged (else
        None)."""
        kept = self._kept.get(index)
        if kept is None or not _foldable_now(args) or not kept.holds_for(args):
            return None
        return kept.result

    def keep(self, index: int, args: list[Any], result: Any) -> None:
        """Keep step ``index``'s ``result`` of ``args``, if it may be kept now."""
        if _foldable_now(args):
            self._kept[index] = KeptResult(args, result)


def _foldable_now(args: list[Any]) -> bool:
    """Whether a result can be kept: outside graph tracing (its values would be placeholders)
    and not part of a gradient (a trainable weight in training mode must stay in torch's
    graph)."""
    if not value_checks():
        return False
    return not is_training() or not any(
        isinstance(a, Tensor) and a.data.requires_grad for a in args
    )
