"""onnxruntime's own CPU kernels for the ``com.microsoft`` integer products torch has none for,
called on torch's memory.

torch has no CPU kernel for an int4 x int8 product, nor for onnxruntime's u8 x s8 products:
sonnx's torch paths multiply by the weight dequantized to float32 (``MatMulNBits``, 8x the bytes
onnxruntime's kernel reads) or compute the int32 sums exactly in float64
(``DynamicQuantizeMatMul``, ``MatMulIntegerToFloat``). onnxruntime is the reference
implementation of these operators, so for a frozen weight sonnx calls its kernel: one
single-node session per node and weight (:mod:`sonnx.operators.quantize.ort_sessions`), run with
IO binding on the activations' and a new output's torch memory.

Each call is a torch custom op with a fake implementation (``sonnx::matmul_nbits_ort`` here;
``sonnx::qlinear_ort`` for the other single-output nodes, DynamicQuantizeMatMul and
MatMulIntegerToFloat included, in :mod:`~sonnx.operators.quantize.ort_qlinear`;
``sonnx::dynamic_quantize_lstm_ort`` in :mod:`~sonnx.operators.quantize.ort_lstm`), so graph
mode's trace keeps it as one extern call instead of tracing into it.

The bridge is optional: without onnxruntime importable, or for a node onnxruntime cannot build
(one warning naming the node), the torch path runs. ``prepare(..., kernels="torch")`` turns it
off for a model (:func:`choose_kernels`); ``explain()`` lists the bridged steps
(:func:`kernel_lines`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

import torch

from sonnx.caller_warnings import warn_at_caller
from sonnx.engine.extern_ops import extern_op
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.operators.quantize.ort_sessions import (
    NodeSpec,
    kernel_for,
    onnxruntime_module,
)

__all__ = [
    "KERNEL_CHOICES",
    "BridgedNode",
    "KernelChoice",
    "bridged_product",
    "choose_kernels",
    "kernel_lines",
    "nbits_spec",
    "register_bridge",
]

#: The values of ``prepare(..., kernels=...)``: onnxruntime's kernels where they are used
#: (the default), or torch's everywhere.
KERNEL_CHOICES = ("onnxruntime", "torch")

_NBITS_ATTRS = ("K", "N", "bits", "block_size", "accuracy_level")
_NBITS_SLOTS = ("A", "B", "scales", "zero_points", "g_idx", "bias")


def nbits_spec(attrs: Sequence[int]) -> NodeSpec:
    """The spec of a ``MatMulNBits`` node (its bias, where it has one, a slot of the session:
    onnxruntime's kernel adds it inside its accumulation, which can differ in the last bit from
    adding it afterwards).

    :param attrs: its attributes K, N, bits, block_size and accuracy_level.
    :returns: the spec (one object for equal attributes).
    """
    return _nbits_spec(tuple(attrs))


@functools.lru_cache(maxsize=1024)
def _nbits_spec(attrs: tuple[int, ...]) -> NodeSpec:
    return NodeSpec("MatMulNBits", tuple(zip(_NBITS_ATTRS, attrs, strict=True)), _NBITS_SLOTS, (0,))


class BridgedNode:
    """One node run by onnxruntime's kernel: its spec and name.

    :param name: the node's name (for warnings).
    :param spec: what its session is built from.
    :param n: the output's last dimension (N) of a product; 0 for a node whose registered
        calls (:func:`register_bridge`) shape its outputs.
    """

    def __init__(self, name: str, spec: NodeSpec, n: int) -> None:
        self.name = name
        self.spec = spec
        self.n = n


def _run(spec: NodeSpec, n: int, inputs: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The node's product [..., N] by onnxruntime's kernel, on the activations' memory (A is
    run as [M, K])."""
    a = inputs[0]
    flat = a.reshape(-1, a.shape[-1])
    if not flat.is_contiguous():
        flat = flat.contiguous()
    y = torch.empty((flat.shape[0], n), dtype=torch.float32, device=flat.device)
    if flat.shape[0]:
        full = [flat, *inputs[1:]]
        bound = [x if x is None else x.contiguous() for x in (full[i] for i in spec.bound)]
        kernel_for(spec, full)(bound, y)
    return y.reshape(*a.shape[:-1], n)


def _matmul_nbits_ort_fake(
    a: torch.Tensor,
    b: Any,
    scales: Any,
    zero_points: Any,
    g_idx: Any,
    bias: Any,
    attrs: list[int],
) -> torch.Tensor:
    return a.new_empty((*a.shape[:-1], attrs[1]))


@extern_op(
    "matmul_nbits_ort",
    "(Tensor a, Tensor b, Tensor scales, Tensor? zero_points, Tensor? g_idx, Tensor? bias, "
    "int[] attrs) -> Tensor",
    _matmul_nbits_ort_fake,
)
def matmul_nbits_ort(
    a: torch.Tensor,
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    g_idx: torch.Tensor | None,
    bias: torch.Tensor | None,
    attrs: list[int],
) -> torch.Tensor:
    """onnxruntime's MatMulNBits kernel as a torch operator (``attrs``: K, N, bits,
    block_size, accuracy_level)."""
    return _run(nbits_spec(attrs), attrs[1], (a, b, scales, zero_points, g_idx, bias))


#: How a trace records each operator's call (the custom op, one extern call).
_TRACED: Mapping[str, Callable[[BridgedNode, Sequence[Any]], torch.Tensor]] = {
    "MatMulNBits": lambda node, x: torch.ops.sonnx.matmul_nbits_ort(
        *x, [v for _, v in node.spec.attrs]
    ),
}


#: Node calls beside the products', by op type: (eager, traced), each taking the node and its
#: inputs and returning what the operator's forward returns (:func:`register_bridge`).
_CALLS: dict[str, tuple[Callable[[BridgedNode, Sequence[Any]], Any], ...]] = {}


def register_bridge(
    op_type: str,
    eager: Callable[[BridgedNode, Sequence[Any]], Any],
    traced: Callable[[BridgedNode, Sequence[Any]], Any],
) -> None:
    """Bridge an operator whose node is not a product ``[..., N]`` (several outputs, outputs
    shaped from several inputs): its module says how a call runs and how a trace records it.

    :param op_type: the ``com.microsoft`` operator.
    :param eager: runs the node's session on its inputs (one per slot of its spec).
    :param traced: records the call while graph mode traces (its torch custom op).
    """
    _CALLS[op_type] = (eager, traced)


def _vectors(inputs: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """``inputs`` with each 0-d tensor as one of shape [1] (the same scale or zero point to
    onnxruntime), so a traced call never takes a 0-d constant: inductor hands one to an extern
    call as a constant it names itself, which only the recorder's hook on inductor's naming
    sees (:mod:`sonnx.runtime.library_constants`, a patch of a private torch method)."""
    return [x.reshape(1) if x is not None and x.dim() == 0 else x for x in inputs]


def bridged_product(
    node: BridgedNode, inputs: Sequence[torch.Tensor | None], tracing: bool
) -> Any | None:
    """The node's float32 product by onnxruntime's kernel (or its registered call's outputs),
    or None (with a warning naming the node) where onnxruntime cannot build or run the node:
    the torch path then runs.

    :param node: the node.
    :param inputs: its inputs, one per slot of its spec (None when absent); a product's A
        [..., K] first.
    :param tracing: whether graph mode is tracing (the custom op is recorded as one call).
    :returns: the product [..., N] (or the registered call's outputs), or None when
        onnxruntime cannot run the node.
    """
    calls = _CALLS.get(node.spec.op_type)
    if tracing:
        return (calls[1] if calls else _TRACED[node.spec.op_type])(node, inputs)
    try:
        # Eagerly, the function itself: the dispatcher's custom-op overhead is not needed.
        if calls:
            return calls[0](node, inputs)
        return _run(node.spec, node.n, inputs)
    except Exception as error:  # onnxruntime's errors have no common base class
        first_line = (str(error).strip().splitlines() or [""])[0]
        warn_at_caller(
            f"{node.spec.op_type} node {node.name!r}: onnxruntime cannot run it "
            f"({type(error).__name__}: {first_line}); the torch path runs",
            RuntimeWarning,
        )
        return None


class KernelChoice:
    """An operator whose float32 CPU forward may run onnxruntime's kernel for its node.

    :func:`choose_kernels` sets ``kernels`` and ``constant_inputs`` (the positions of the
    node's inputs that are the program's constants: a session holds those, so only they may
    be a spec's unbound slots); ``kernel_used`` is what the last run used, for ``explain()``.
    """

    kernels = "onnxruntime"
    kernel_used: str | None = None
    constant_inputs: frozenset[int] | None = None
    #: Whether the unbound slots are known to be constants without ``constant_inputs`` (a
    #: packed 4-bit weight is never computed).
    weights_always_constant = False

    def onnxruntime_product(
        self, spec: NodeSpec, n: int, inputs: Sequence[torch.Tensor | None]
    ) -> torch.Tensor | None:
        """The product by onnxruntime's kernel, or None where the torch path must run: the
        bridge is off, onnxruntime is not importable or refused the node, an input is on
        another device, a float input is not float32 or needs a gradient (torch's path keeps
        training's backward), or a slot the session would hold is not a constant.

        :param spec: the node's spec.
        :param n: the output's last dimension.
        :param inputs: the node's inputs, one per slot of ``spec``.
        :returns: the product [..., N], or None.
        """
        return self._bridged(spec, n, inputs)

    def onnxruntime_outputs(
        self, spec: NodeSpec, inputs: Sequence[torch.Tensor | None]
    ) -> Any | None:
        """The outputs of a node bridged by :func:`register_bridge` (several, or shaped from
        several inputs), or None where the torch path must run (as
        :meth:`onnxruntime_product`).

        :param spec: the node's spec.
        :param inputs: the node's inputs, one per slot of ``spec``.
        :returns: what the registered call returns, or None.
        """
        return self._bridged(spec, 0, inputs)

    def _bridged(self, spec: NodeSpec, n: int, inputs: Sequence[torch.Tensor | None]) -> Any:
        if not self.bridgeable(spec, inputs):
            return None
        node = self.__dict__.get("_bridge")
        if node is None or node.spec != spec:
            node = self._bridge = BridgedNode(getattr(self, "name", ""), spec, n)
        y = bridged_product(node, inputs, tracing=not value_checks())
        if y is None:
            self._refused = True
        return y

    def bridgeable(self, spec: NodeSpec, inputs: Sequence[torch.Tensor | None]) -> bool:
        """Whether onnxruntime's kernel may run the node on ``inputs`` (see
        :meth:`onnxruntime_product`: the bridge is on and has not been refused, the held slots
        are constants, every input is on the CPU, every float one float32 and none needs a
        gradient, and onnxruntime is importable).

        :param spec: the node's spec.
        :param inputs: the node's inputs, one per slot of ``spec``.
        :returns: whether the bridge may run.
        """
        if self.kernels != "onnxruntime" or self.__dict__.get("_refused", False):
            return False
        if not self.weights_always_constant:
            constants = self.constant_inputs
            held = {i for i, x in enumerate(inputs) if x is not None and i not in spec.bound}
            if constants is None or not held <= constants:
                return False
        grad = torch.is_grad_enabled()
        for x in inputs:  # a loop, not comprehensions: this runs at every call of the node
            if x is not None and (
                not x.is_cpu
                or (x.dtype.is_floating_point and x.dtype != torch.float32)
                or (grad and x.requires_grad)
            ):
                return False
        found = self.__dict__.get("_onnxruntime_importable")
        if found is None:  # asked once per operator: an import attempt costs a few us
            found = self._onnxruntime_importable = onnxruntime_module() is not None
        return found


def choose_kernels(
    steps: Iterable[Any], kernels: str, constants: Container[str], runner: Any = None
) -> None:
    """Set which kernels the operators of a prepared program's ``steps`` use, and which of
    their inputs are constants.

    :param steps: the program's steps (each with an ``op``).
    :param kernels: one of :data:`KERNEL_CHOICES`.
    :param constants: the names of the program's constants (weights included).
    :param runner: the model's graph runner (None without graph mode): with torch's kernels
        for steps that have a choice, its graphs are stored apart from the default's (the
        traced graph differs; the store's key does not see it otherwise).
    :raises BadInputError: ``kernels`` is not one of them.
    """
    if kernels not in KERNEL_CHOICES:
        raise BadInputError(
            f"prepare: kernels must be one of {list(KERNEL_CHOICES)}, received {kernels!r}"
        )
    chosen = [step for step in steps if isinstance(step.op, KernelChoice)]
    for step in chosen:
        step.op.kernels = kernels
        step.op.constant_inputs = frozenset(
            i for i, name in enumerate(step.inputs) if name and name in constants
        )
    if chosen and kernels != KERNEL_CHOICES[0] and getattr(runner, "identity", None):
        runner.identity = f"{runner.identity}|kernels={kernels}"


def kernel_lines(steps: Sequence[Any]) -> list[str]:
    """The lines ``explain()`` adds: which steps run onnxruntime's kernel (after a run has
    decided it), and which chose torch's.

    :param steps: the program's steps.
    :returns: one line per kernel used, naming the steps; none when no step has a choice.
    """
    ran: dict[str, list[str]] = {}
    for i, step in enumerate(steps):
        used = getattr(step.op, "kernel_used", None)
        if used is not None:
            ran.setdefault(used, []).append(f"{i} ({step.info.op_type})")
    return [f"  {kernel} kernel: steps {', '.join(found)}" for kernel, found in ran.items()]
