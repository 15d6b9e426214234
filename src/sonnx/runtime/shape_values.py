"""Which steps of a graph compute shape values: results fixed by the inputs' shapes alone.

Exported transformers spend most of their nodes on shape arithmetic (``Shape -> Gather ->
Unsqueeze -> Concat -> Reshape``). Its results depend on the shapes and element types of the
graph inputs, never on their values, so a run can reuse them for every later run with the same
input signature (:class:`ShapeValueCache`) and skip those nodes.

:func:`shape_value_steps` finds them by following two properties through the graph in order:
a tensor's *value* is fixed by the input signature (constants; ``Shape``/``Size`` of a tensor
whose shape is fixed; any deterministic operation on such values), and a tensor's *shape* is
fixed by it (graph inputs; the outputs of operations whose output shape follows from their
inputs' shapes and the values of its shape inputs — elementwise, MatMul, Conv; a Reshape to a
computed shape, a Resize by constant scales — when those values are fixed or constants other
than trainable weights). Anything else — a subgraph, a random draw, an output sized by values
(NonZero), an operator that does not declare how its shape is decided — is neither, and so is
everything after it that depends on it. What an operator is comes from its class's traits
(:class:`~sonnx.engine.operator.Operator`). The cache keeps its values while the constants
they were computed from are unchanged (:func:`shape_value_sources`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from sonnx import dtypes
from sonnx.engine.operator import OutputShape, Randomness
from sonnx.onnx.registry import operator_class
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.steps import Step


def shape_value_steps(
    steps: Sequence[Step], constants: dict[str, Tensor], inputs: set[str]
) -> set[int]:
    """Indices of the steps whose outputs' values are fixed by the input signature and that
    read at least one graph-derived tensor (steps on constants alone are folded elsewhere).

    Only integer, boolean and 0-d float constants count as fixed values: weights train and
    BatchNorm statistics are updated in place, so what is computed from them is not reused.
    Any constant but a trainable weight may fix an output's *shape*, though (a Resize's float
    scales): the shapes, and the shape values read from them, are reused while it is unchanged
    (see :func:`shape_value_sources`).
    """
    fixed_value = {
        n for n, t in constants.items() if not dtypes.is_float(t.dtype) or t.data.dim() == 0
    }
    fixed_shape = set(constants) | set(inputs)
    found: set[int] = set()
    for index, step in enumerate(steps):
        reads = [n for n in step.inputs if n]
        traits = operator_class(step.info)
        if step.has_subgraphs or step.info.domain not in ("", "ai.onnx") or not reads:
            continue
        if traits.reads_shape_only:
            values = reads[0] in fixed_shape
        else:
            values = traits.random is Randomness.NONE and all(n in fixed_value for n in reads)
        if values:
            fixed_value.update(o for o in step.outputs if o)
            fixed_shape.update(o for o in step.outputs if o)
            if not all(n in fixed_value and n in constants for n in reads):
                found.add(index)
            continue
        shapes_known = all(n in fixed_shape for n in reads)
        follows = traits.output_shape is OutputShape.FROM_SHAPES and all(
            n in fixed_value or _sizing_constant(n, constants) for n in _shape_inputs(step)
        )
        if shapes_known and follows:
            fixed_shape.update(o for o in step.outputs if o)
    return found


def _shape_inputs(step: Step) -> list[str]:
    """The inputs whose values decide the output's shape (besides the inputs' shapes)."""
    positions = operator_class(step.info).shape_inputs
    return [n for i, n in enumerate(step.inputs) if n and i in positions]


def _sizing_constant(name: str, constants: dict[str, Tensor]) -> bool:
    """A constant whose values may fix a shape: not a trainable weight, whose values change
    at every training step (a float initializer read only as a shape input, a Resize's
    scales, is a constant: see :mod:`sonnx.runtime.constants`)."""
    return name in constants and not constants[name].is_param


def shape_value_sources(
    steps: Sequence[Step],
    shape_steps: set[int],
    constants: dict[str, Tensor],
    producer: Mapping[str, int],
) -> tuple[str, ...]:
    """The constants the shape values are computed from, directly or through steps folded
    from constants (an int8 embedding table and its scale, dequantized into a value a
    shape-value Gather reads), and those that size a tensor a shape value may be read from
    (a Resize's scales, a Reshape's target): shape values are reused only while these are
    unchanged (``producer``: the step computing each value, from the program's index)."""
    pending = [n for i in shape_steps for n in steps[i].inputs if n]
    pending += [n for step in steps for n in _shape_inputs(step) if _sizing_constant(n, constants)]
    seen: set[str] = set()
    found: list[str] = []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in constants:
            found.append(name)
        elif name in producer and steps[producer[name]].foldable:
            pending.extend(n for n in steps[producer[name]].inputs if n)
    return tuple(sorted(found))


def input_signature(values: dict[str, Any], names: Sequence[str]) -> tuple[Any, ...] | None:
    """Shapes, element types and devices of the graph inputs (None if one is not a tensor)."""
    signature = []
    for name in names:
        value = values.get(name)
        if type(value) is not Tensor:
            return None
        data = value.data
        signature.append((data.shape, data.dtype, data.device))
    return tuple(signature)


_VERSION = attrgetter("_version")


def _state(constants: dict[str, Tensor], names: Sequence[str]) -> tuple[Any, ...]:
    """Which tensors the named constants hold, and a sum of their versions: the same tensors
    have the same versions exactly when the sum is the same (a version counter only grows)."""
    datas = [constants[n].data for n in names]
    return (tuple(map(id, datas)), sum(map(_VERSION, datas)))


class ShapeValueCache:
    """The shape values computed for each input signature, reused by later runs."""

    #: Input signatures kept per graph (a server feeding every batch size stays bounded).
    LIMIT = 64

    def __init__(self) -> None:
        self._by_signature: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._sources: tuple[Any, ...] | None = None

    def get(
        self, signature: tuple[Any, ...], constants: dict[str, Tensor], sources: Sequence[str]
    ) -> dict[str, Any] | None:
        """The shape values kept for ``signature``; none at all once a constant they are
        computed from (``sources``, see :func:`shape_value_sources`) changed or was replaced
        (``load_states``, ``set_states``): the next run computes them afresh."""
        state = _state(constants, sources) if sources else None
        if state != self._sources:
            self._by_signature.clear()
            self._sources = state
            return None
        return self._by_signature.get(signature)

    def store(self, signature: tuple[Any, ...], values: dict[str, Any]) -> None:
        # A new table replaces the old whole: a thread running the same graph may be reading
        # it, or storing its own signature (dropping the oldest in place, both could pop it).
        kept = dict(self._by_signature)
        if len(kept) >= self.LIMIT:
            kept.pop(next(iter(kept)))
        kept[signature] = values
        self._by_signature = kept


class RangeShapeValues:
    """The shape values of graph mode's eager ranges of steps, each range's own
    :class:`ShapeValueCache` (a range's first run of an input signature finds those it
    computes)."""

    def __init__(self) -> None:
        self._caches: dict[tuple[int, int], ShapeValueCache | None] = {}

    def cache(self, bounds: tuple[int, int], shape_steps: set[int]) -> ShapeValueCache | None:
        """The cache of the steps ``[start, stop)`` = ``bounds``; None where none of them is a
        shape-value step (``shape_steps``): there is nothing to find, and its plan may run
        from its first run.

        :param bounds: the range's first step and the step after its last.
        :param shape_steps: the program's shape-value steps.
        :returns: the cache, or None.
        """
        if bounds not in self._caches:
            finds = any(bounds[0] <= i < bounds[1] for i in shape_steps)
            self._caches[bounds] = ShapeValueCache() if finds else None
        return self._caches[bounds]
