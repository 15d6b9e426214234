"""onnxruntime's own CPU kernel for a ``MatMulNBits`` node, called on torch's memory.

torch has no CPU kernel for an int4 x int8 product: sonnx's torch path multiplies by the weight
dequantized to float32 (8x the bytes onnxruntime's kernel reads). onnxruntime is the reference
implementation of the ``com.microsoft`` operators, so for a frozen weight sonnx calls its kernel:
one single-node :class:`onnxruntime.InferenceSession` per node and weight (CPU, torch's intra-op
thread count, no spinning), holding the node's constant inputs (packed weight, scales, zero
points, g_idx) as initializers, run with IO binding on the input's and a new output's torch
memory (no copy, no NumPy array).

The call is the torch custom op ``sonnx::matmul_nbits_ort`` (with a fake implementation), so
graph mode's trace keeps it as one extern call instead of tracing into it. Its sessions are
found by the addresses, shapes and versions of the weight tensors, so a compiled graph loaded
in a new process builds its own on its first call.

The bridge is optional: without onnxruntime importable, or for a node onnxruntime cannot build
(one warning naming the node), the torch path runs. ``prepare(..., kernels="torch")`` turns it
off for a model (:func:`choose_kernels`); ``explain()`` lists the bridged steps
(:func:`kernel_lines`).
"""

from __future__ import annotations

import importlib
import threading
import warnings
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from sonnx.errors import BadInputError

__all__ = [
    "KERNEL_CHOICES",
    "NbitsNode",
    "choose_kernels",
    "kernel_lines",
    "nbits_product",
    "onnxruntime_module",
]

#: The values of ``prepare(..., kernels=...)``: onnxruntime's kernels where they are used
#: (the default), or torch's everywhere.
KERNEL_CHOICES = ("onnxruntime", "torch")

_LOCK = threading.RLock()  # _forget may run inside the locked section (a collection)
#: (weight versions, kernel, weak references to the weights) of one session.
_Entry = tuple[tuple[int, ...], Any, tuple[Any, ...]]
#: (weight addresses, shapes, attributes, threads) -> its entry.
_SESSIONS: dict[tuple[Any, ...], _Entry] = {}


def onnxruntime_module() -> Any | None:
    """The ``onnxruntime`` module, or None when it cannot be imported (the bridge is then
    off and the torch path runs)."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError:
        return None


class NbitsNode:
    """The attributes of one ``MatMulNBits`` node that its session is built from.

    :param name: the node's name (for warnings).
    :param k: attribute K.
    :param n: attribute N.
    :param bits: attribute bits.
    :param block_size: attribute block_size.
    :param accuracy_level: attribute accuracy_level.
    """

    def __init__(
        self, name: str, k: int, n: int, bits: int, block_size: int, accuracy_level: int
    ) -> None:
        self.name = name
        self.attrs = (k, n, bits, block_size, accuracy_level)
        self._last: tuple[tuple[Any, ...], tuple[int, ...], int, _Kernel] | None = None

    def kernel(self, weights: Sequence[torch.Tensor | None]) -> _Kernel:
        """The kernel for ``weights``: the last one while they are the same tensors, unchanged,
        and torch's thread count is the same.

        :param weights: the packed weight, scales, zero points and g_idx (None when absent).
        :returns: the kernel.
        """
        versions = tuple(-1 if w is None else w._version for w in weights)
        last = self._last
        threads = torch.get_num_threads()
        if (
            last is not None
            and last[2] == threads
            and last[1] == versions
            and all(x is y for x, y in zip(last[0], weights, strict=True))
        ):
            return last[3]
        found = _kernel(self.attrs, weights)
        self._last = (tuple(weights), versions, threads, found)
        return found


def _model_bytes(attrs: tuple[int, ...], weights: Sequence[torch.Tensor | None]) -> bytes:
    """The single-node model: input ``a`` [M, K], output ``y`` [M, N], weights as
    initializers (an absent optional input is an empty name)."""
    from onnx import TensorProto, helper, numpy_helper

    k, n, bits, block_size, accuracy_level = attrs
    names = ["b", "scales", "zero_points", "g_idx"]
    inputs = ["a"] + [name if w is not None else "" for name, w in zip(names, weights, strict=True)]
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node(
        "MatMulNBits", inputs, ["y"], domain="com.microsoft",
        K=k, N=n, bits=bits, block_size=block_size, accuracy_level=accuracy_level,
    )  # fmt: skip
    initializers = [
        numpy_helper.from_array(w.detach().contiguous().numpy(), name)
        for name, w in zip(names, weights, strict=True)
        if w is not None
    ]
    graph = helper.make_graph(
        [node],
        "matmul_nbits",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        initializers,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _new_session(ort: Any, attrs: tuple[int, ...], weights: Sequence[torch.Tensor | None]) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Between sonnx's torch calls an idle onnxruntime thread must not spin on the cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        _model_bytes(attrs, weights), options, providers=["CPUExecutionProvider"]
    )


class _Kernel:
    """One node's session and the call binding torch memory to it.

    onnxruntime's ``IOBinding`` wrapper costs about 35 us a call in Python; its pybind layer,
    where this onnxruntime has it, is called directly (same calls, without the wrapper's
    bookkeeping); otherwise the public wrapper is used.
    """

    def __init__(self, ort: Any, session: Any) -> None:
        self.session = session
        low = getattr(getattr(ort, "capi", None), "_pybind_state", None)
        try:
            self._device = low.OrtDevice(low.OrtDevice.cpu(), low.OrtDevice.default_memory(), 0)
            self._binding_of = low.SessionIOBinding
            self._inner = session._sess
        except AttributeError:
            self._inner = None

    def __call__(self, flat: torch.Tensor, y: torch.Tensor) -> None:
        """Run on ``flat`` [M, K], writing ``y`` [M, N] (both contiguous float32)."""
        import numpy as np

        if self._inner is not None:
            binding = self._binding_of(self._inner)
            binding.bind_input("a", self._device, np.float32, list(flat.shape), flat.data_ptr())
            binding.bind_output("y", self._device, np.float32, list(y.shape), y.data_ptr())
            self._inner.run_with_iobinding(binding, None)
            return
        binding = self.session.io_binding()
        binding.bind_input("a", "cpu", 0, np.float32, tuple(flat.shape), flat.data_ptr())
        binding.bind_output("y", "cpu", 0, np.float32, tuple(y.shape), y.data_ptr())
        self.session.run_with_iobinding(binding)


def _kernel(attrs: tuple[int, ...], weights: Sequence[torch.Tensor | None]) -> _Kernel:
    """The kernel for these weights and attributes, its session built on first use (raises
    what onnxruntime raises when it cannot build one).

    An entry holds weak references to its weights: a tensor freed and another allocated at
    its address (the next model's weight, version 0 again) never finds the old session, and
    the entry is dropped when its first weight is freed."""
    present = [w for w in weights if w is not None]
    key = (
        tuple(w.data_ptr() for w in present),
        tuple(tuple(w.shape) for w in present),
        tuple(w is None for w in weights),
        attrs,
        torch.get_num_threads(),
    )
    versions = tuple(w._version for w in present)

    def current(found: _Entry | None) -> bool:
        return (
            found is not None
            and found[0] == versions
            and all(ref() is w for ref, w in zip(found[2], present, strict=True))
        )

    found = _SESSIONS.get(key)
    if current(found):
        return found[1]  # type: ignore[index]
    with _LOCK:
        found = _SESSIONS.get(key)
        if not current(found):
            ort = onnxruntime_module()
            if ort is None:
                raise BadInputError("MatMulNBits: onnxruntime is not importable")
            refs = tuple(weakref.ref(w) for w in present)
            found = (versions, _Kernel(ort, _new_session(ort, attrs, weights)), refs)
            _SESSIONS[key] = found
            weakref.finalize(present[0], _forget, key, found)
    return found[1]  # type: ignore[index]


def _forget(key: tuple[Any, ...], entry: _Entry) -> None:
    """Drop ``entry`` once its first weight is freed (unless a newer entry took its key)."""
    with _LOCK:
        if _SESSIONS.get(key) is entry:
            del _SESSIONS[key]


def _run(
    a: torch.Tensor,
    attrs: tuple[int, ...],
    weights: Sequence[torch.Tensor | None],
    node: NbitsNode | None = None,
) -> torch.Tensor:
    """``a @ dequantize(weights).T`` by onnxruntime's kernel, on ``a``'s memory (``node``
    remembers its last kernel: no lookup while its weights are the same, unchanged)."""
    k, n = attrs[0], attrs[1]
    flat = a.reshape(-1, k)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    y = torch.empty((flat.shape[0], n), dtype=torch.float32, device=flat.device)
    if flat.shape[0]:
        kernel = node.kernel(weights) if node is not None else _kernel(attrs, weights)
        kernel(flat, y)
    return y.reshape(*a.shape[:-1], n)


@torch.library.custom_op("sonnx::matmul_nbits_ort", mutates_args=(), device_types="cpu")
def matmul_nbits_ort(
    a: torch.Tensor,
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    g_idx: torch.Tensor | None,
    attrs: list[int],
) -> torch.Tensor:
    """onnxruntime's MatMulNBits kernel as a torch operator (``attrs``: K, N, bits,
    block_size, accuracy_level)."""
    return _run(a, tuple(attrs), (b, scales, zero_points, g_idx))


@matmul_nbits_ort.register_fake
def _matmul_nbits_ort_fake(
    a: torch.Tensor,
    b: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    g_idx: torch.Tensor | None,
    attrs: list[int],
) -> torch.Tensor:
    return a.new_empty((*a.shape[:-1], attrs[1]))


def nbits_product(
    node: NbitsNode,
    a: torch.Tensor,
    weights: tuple[torch.Tensor | None, ...],
    tracing: bool,
) -> torch.Tensor | None:
    """``a @ dequantize(weights).T`` by onnxruntime's kernel, or None (with a warning naming
    the node) where onnxruntime cannot build or run the node: the torch path then runs.

    :param node: the node's attributes.
    :param a: the float32 CPU input, [..., K].
    :param weights: the packed weight, scales, zero points and g_idx (None when absent).
    :param tracing: whether graph mode is tracing (the custom op is recorded as one call).
    :returns: the product [..., N], or None when onnxruntime cannot run the node.
    """
    if tracing:
        return torch.ops.sonnx.matmul_nbits_ort(a, *weights, list(node.attrs))
    try:
        # Eagerly, the function itself: the dispatcher's custom-op overhead is not needed.
        return _run(a, node.attrs, weights, node)
    except Exception as error:  # onnxruntime's errors have no common base class
        first_line = (str(error).strip().splitlines() or [""])[0]
        warnings.warn(
            f"MatMulNBits node {node.name!r}: onnxruntime cannot run it ({type(error).__name__}: "
            f"{first_line}); the torch path runs",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def choose_kernels(steps: Iterable[Any], kernels: str, runner: Any = None) -> None:
    """Set which kernels the operators of a prepared program's ``steps`` use.

    :param steps: the program's steps (each with an ``op``).
    :param kernels: one of :data:`KERNEL_CHOICES`.
    :param runner: the model's graph runner (None without graph mode): with torch's kernels
        for steps that have a choice, its graphs are stored apart from the default's (the
        traced graph differs; the store's key does not see it otherwise).
    :raises BadInputError: ``kernels`` is not one of them.
    """
    if kernels not in KERNEL_CHOICES:
        raise BadInputError(
            f"prepare: kernels must be one of {list(KERNEL_CHOICES)}, received {kernels!r}"
        )
    chosen = [step.op for step in steps if hasattr(step.op, "kernels")]
    for op in chosen:
        op.kernels = kernels
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
