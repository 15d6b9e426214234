"""The operator contract: one class per ONNX operator, which knows how to run and to export.

An :class:`Operator` subclass is named exactly as its ONNX operator (``Conv``, ``MaxPool``) and
holds that operator's attributes under their ONNX names in ``self.attrs``. Calling it on sonnx
tensors runs :meth:`Operator.forward` on the wrapped torch tensors (torch autograd records the
gradient), wraps the results and records the operator as their ``creator`` with its inputs, so
that :func:`sonnx.to_onnx` can later walk from outputs back to inputs and call
:meth:`Operator.export` on each operator.

``version`` is the ONNX since-version whose semantics the instance follows (``None``: the newest);
the importer passes the version it matched, framework code leaves it unset.

What an operator *is* — how its output shape is decided, which inputs parameterise it, whether
it only moves elements, draws random numbers or trains — is declared as class attributes (its
*traits*, see :class:`Operator`) on the class or its family's base class, and read from there by
the importer's passes (shape values, constant folding, graph mode, string and symbolic inputs).
Each default is the safe answer: an operator that declares nothing is value-sized, moves no
elements, has no size or parameterising inputs, is deterministic and trains.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from sonnx import dtypes
from sonnx.engine.host_values import call_placed, host
from sonnx.errors import BadInputError
from sonnx.proto.attributes import schema_defaults
from sonnx.run_state import TRAINING
from sonnx.strings import StringArray, run_on_strings
from sonnx.symbolic_sizes import SYMBOLIC_TYPES, SymbolicInts, run_on_symbols
from sonnx.tensor import (
    RecordedTensor,
    StringTensor,
    SymbolicTensor,
    Tensor,
    string_tensor,
    symbolic_tensor,
)

if TYPE_CHECKING:
    from sonnx.engine.singa_functions import SingaFunction
    from sonnx.proto.graph_builder import GraphBuilder

TorchOutputs = torch.Tensor | Sequence[torch.Tensor | None]
# Computed inputs with at most this many elements are kept whole by the operator reading them.
KEPT_VALUE_SIZE = 64
# Numbers operator calls in the order they ran, so an export can keep that order.
_call_order = itertools.count()


class OutputShape(enum.Enum):
    """How an operator's output shape is decided: what a run may know before computing it."""

    #: By the values of its inputs (NonZero, Unique): known only once computed. The default.
    VALUE_SIZED = "value-sized"
    #: By its inputs' shapes, its attributes and the values of its ``shape_inputs`` alone.
    FROM_SHAPES = "from shapes"


class Randomness(enum.Enum):
    """Whether an operator's results differ from run to run with the same inputs."""

    NONE = "deterministic"
    #: Draws random numbers on every call (RandomNormal, Bernoulli).
    ALWAYS = "random"
    #: Draws only while training (Dropout).
    WHILE_TRAINING = "random while training"


def next_call_number() -> int:
    """The next position in the order of operator calls (see :attr:`Operator.sequence`)."""
    return next(_call_order)


#: ``is_training() -> bool``: ``sonnx.autograd.training`` in this thread (see
#: :mod:`sonnx.run_state`); the context variable's own ``get``, the cheapest read.
is_training = TRAINING.get


class Operator:
    """Base class of every recorded operation.

    Subclasses set ``op_type`` (and ``domain`` outside the default ONNX domain) and the
    ``since_versions`` they serve, and implement :meth:`forward`. Override :meth:`export` only
    when the ONNX form differs from "one node of ``op_type`` with ``self.attrs``" (a
    decomposition, or an older opset's spelling).

    Calling an instance runs it on sonnx tensors (numbers and arrays become constants) and
    returns one :class:`~sonnx.tensor.Tensor`, or a tuple for several outputs; bad inputs raise
    :class:`~sonnx.errors.BadInputError` naming the operator and the input.

    :param version: the ONNX since-version whose meaning to follow (None: the newest schema).
    :param attrs: the ONNX attributes under their ONNX names (``alpha=0.1``, ``axis=1``); an
        attribute left out takes the schema's default.
    """

    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    #: The since-versions of ``op_type`` in ``domain`` this class runs as they are written
    #: (``cls(version=v, **attrs)``), each declared by the class itself: the importer registers
    #: it for exactly these (:func:`~sonnx.onnx.registry.register_operators`). Older versions an
    #: adapter function converts (an attribute that later became an input) are not listed.
    since_versions: ClassVar[tuple[int, ...]] = ()

    # ---- traits: what the operator is (safe defaults; declared by the class or its family) ----
    #: How the output's shape is decided. Not declared FROM_SHAPES, an operator is value-sized:
    #: nothing computed from its output's shape is reused from one run to the next.
    output_shape: ClassVar[OutputShape] = OutputShape.VALUE_SIZED
    #: Inputs whose values, not only their shapes, decide the output's shape (Reshape's target,
    #: Resize's scales and sizes, TopK's k). The output's shape is known before the run only
    #: where these are constants.
    shape_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Inputs read on the host as sizes (through :func:`host_ints`): in a trace with symbolic
    #: sizes a symbolic value goes in as it is (see :mod:`sonnx.symbolic_sizes`).
    size_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Inputs that parameterise the operation rather than carry data or weights (a shape, axes,
    #: pads, scales, an exponent, a bound, a quantization scale): a float initializer read
    #: only at such inputs is a constant, never a trainable weight.
    parameterising_inputs: ClassVar[frozenset[int]] = frozenset()
    #: Every output is made of elements of the inputs, moved (Reshape, Gather, Concat): such an
    #: operator runs on strings and on symbolic sizes through int64 positions standing in for
    #: the elements (see :mod:`sonnx.strings`).
    moves_elements_only: ClassVar[bool] = False
    #: The inputs whose elements a moves-elements-only operator moves (None: every input); the
    #: others are indices, conditions or shapes.
    moved_inputs: ClassVar[frozenset[int] | None] = frozenset({0})
    #: Reads only its input's shape, never its values (Shape, Size).
    reads_shape_only: ClassVar[bool] = False
    #: Reads the characters of string inputs itself (Equal, Cast, StringConcat): it receives
    #: the :class:`~sonnx.strings.StringArray`; other operators refuse strings unless they
    #: move elements only.
    takes_strings: ClassVar[bool] = False
    #: Whether its results differ from run to run with the same inputs.
    random: ClassVar[Randomness] = Randomness.NONE
    #: Carries no gradient and has no trainable weights (the ai.onnx.ml operators): a loss
    #: computed with it cannot train.
    inference_only: ClassVar[bool] = False
    #: Exports a whole kept graph rather than one node (a run of an imported model): it has a
    #: ``source`` and a ``plan_export(builder, used_outputs)``, which the exporter calls.
    exports_kept_graph: ClassVar[bool] = False
    #: The SINGA-named functions that build and call this class (``relu``), declared here and
    #: written by ``python -m sonnx.operators.singa_codegen`` (see
    #: :mod:`sonnx.engine.singa_functions`). Read from the class itself, never inherited.
    singa_functions: ClassVar[tuple[SingaFunction, ...]] = ()

    def __init__(self, version: int | None = None, **attrs: Any) -> None:
        self.version = version
        self.attrs: dict[str, Any] = attrs
        self.inputs: tuple[Tensor | None, ...] = ()
        self.num_outputs = 0
        # Set by the importer to the number of outputs the ONNX node names (Split needs it).
        self.requested_outputs: int | None = None
        self.name: str | None = None
        self.sequence = -1  # position among all operator calls, set when the op runs

    def attr(self, name: str) -> Any:
        """Attribute ``name``: its set value, else the ONNX schema default, else None.

        None also means the schema of ``self.version`` has no such attribute (TopK-10 has no
        ``largest``): an op whose meaning depends on an attribute added later must supply that
        attribute's implied value for older versions itself.
        """
        if name in self.attrs:
            return self.attrs[name]
        return schema_defaults(self.op_type, self.version, self.domain).get(name)

    # ---- the part a subclass writes -------------------------------------------------------
    def forward(self, *xs: torch.Tensor | None) -> TorchOutputs:
        """Compute the outputs from the inputs' torch tensors (``None`` for absent inputs)."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Emit this operator as ONNX node(s) into ``g`` (``""`` names an absent input)."""
        g.add_node(self.op_type, inputs, outputs, domain=self.domain, **self.export_attrs(g))

    def export_attrs(self, g: GraphBuilder) -> dict[str, Any]:
        """Attributes written on export: every attribute that has a value."""
        return {k: v for k, v in self.attrs.items() if v is not None}

    # ---- running and recording ------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        """Run on sonnx tensors (numbers and arrays become constants); record and wrap.

        Returns one :class:`Tensor`, or a tuple when the operator has several outputs.
        """
        args = self._as_tensors(inputs)
        given = [None if a is None else a.data for a in args]
        if any(type(a) is StringTensor for a in args):
            result = run_on_strings(self, given)
        elif any(type(a) is SymbolicTensor for a in args):
            result = run_on_symbols(self, given)
        else:
            with torch.set_grad_enabled(is_training()):
                result = call_placed(self.op_type, self.forward, given)
        self.inputs = tuple(recorded_input(a) for a in args)
        self.sequence = next_call_number()
        needs_grad = any(a is not None and a.requires_grad for a in args)
        if isinstance(result, (torch.Tensor, StringArray, SymbolicInts)):
            self.num_outputs = 1
            return _wrap(result, self, 0, needs_grad)
        outs = tuple(
            None if r is None else _wrap(r, self, i, needs_grad) for i, r in enumerate(result)
        )
        # Trailing outputs the operator did not produce (None) are not the node's: export
        # writes no name for them, as ONNX leaves optional trailing outputs out.
        produced = [i for i, r in enumerate(outs) if r is not None]
        self.num_outputs = produced[-1] + 1 if produced else len(outs)
        return outs

    def _as_tensors(self, inputs: Sequence[Any]) -> list[Tensor | None]:
        reference = next((x for x in inputs if isinstance(x, Tensor)), None)
        args: list[Tensor | None] = []
        for position, x in enumerate(inputs):
            if x is None or isinstance(x, Tensor):
                args.append(x)
            else:
                args.append(_constant(x, reference, self.op_type, position))
        return args

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items() if v is not None)
        return f"{type(self).__name__}({shown})"


def _wrap(
    data: torch.Tensor | StringArray | SymbolicInts,
    creator: Operator,
    index: int,
    needs_grad: bool,
) -> Tensor:
    if type(data) is StringArray:
        return string_tensor(data, creator, index)
    if type(data) is SymbolicInts:
        return symbolic_tensor(data, creator, index)
    out = object.__new__(Tensor)
    out.data = data
    out.creator = creator
    out.output_index = index
    out.name = None
    out._requires_grad = needs_grad and data.requires_grad
    out._stores_grad = False
    return out


def recorded_input(t: Tensor | None) -> Tensor | None:
    """What this operator keeps of input ``t``: leaves (parameters, constants, graph inputs),
    parameters and small values whole — an export may write a small computed value (a scale, an
    axis) as an attribute — and large computed values as a :class:`RecordedTensor`."""
    if t is None or t.creator is None or t._stores_grad:
        return t
    count = t.data.numel()
    if not isinstance(count, torch.SymInt) and count <= KEPT_VALUE_SIZE:
        return t
    return RecordedTensor(t)


def _constant(value: Any, reference: Tensor | None, op_type: str, position: int) -> Tensor:
    """A Python number, list or NumPy array used as an operator input becomes a constant.

    A bare Python number takes the element type of the operator's first tensor input, so
    ``x * 2`` keeps ``x``'s dtype as ONNX's same-type rule requires.
    """
    device = reference.device if reference is not None else None
    if isinstance(value, (bool, int, float)) and reference is not None:
        dtype = reference.dtype
        if isinstance(value, float) and not dtypes.is_float(dtype):
            dtype = torch.float32
        return Tensor(data=torch.tensor(value, dtype=dtype), device=device, requires_grad=False)
    if isinstance(
        value, (bool, int, float, str, list, tuple, np.ndarray, np.generic, torch.Tensor)
    ):
        return Tensor(
            data=np.asarray(value) if isinstance(value, (list, tuple)) else value,
            device=device,
            requires_grad=False,
        )
    raise BadInputError(
        f"{op_type}: input {position} must be a sonnx Tensor, a number or an array, "
        f"received {type(value).__name__}"
    )


def host_ints(x: torch.Tensor | SymbolicInts | None) -> list[int] | None:
    """An integer tensor input (a shape, axes, pads) as a Python list; None stays None.

    A symbolic shape value (:mod:`sonnx.symbolic_sizes`) keeps its symbols: reading them as
    ints would pin the traced graph to their current values."""
    if x is None:
        return None
    value = host(x)
    if type(value) is SymbolicInts:
        flat = value.array.reshape(-1).tolist()
        return [v if isinstance(v, SYMBOLIC_TYPES) else int(v) for v in flat]
    values = value.tolist() if value.dim() == 1 else value.reshape(-1).tolist()
    return [int(v) for v in values]
