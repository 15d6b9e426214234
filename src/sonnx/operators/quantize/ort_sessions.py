"""Single-node onnxruntime sessions run on torch's memory: the machinery under
:mod:`sonnx.operators.quantize.ort_kernels`.

A :class:`NodeSpec` describes one ``com.microsoft`` node: its op type, attributes, the names
of its input slots and which of them a run binds (the activations, lengths and states); the
others are the node's constants (weights, scales, zero points), held by the session as
initializers; and its outputs (one, or several, as DynamicQuantizeLSTM's Y, Y_h and Y_c). The
session runs on CPU with torch's intra-op thread count and no spinning, and a call binds the
torch tensors' memory as its inputs and outputs (no copy, no NumPy array).

Sessions are found by the addresses, shapes and versions of the constants (by their values for
small ones: scales, zero points), so a compiled graph loaded in a new process builds its own on
its first call. An entry remembers the tensors it was handed (weak references and versions) and
the digest of the constants' bytes. A tensor new to it with the same digest joins it: each
compiled graph of a model (a prompt's, a decode step's) hands an extern call its own tensor over
the model's memory, and these took turns evicting each other's session (82 builds per
``generate`` call of a 100M int4 model). A tensor freed and another allocated at its address
(the next model's weight, version 0 again) with other values, or a weight changed in place
(seen through a tensor with a version counter of its own), builds a new session. An entry
whose constants are all small has no tensor to watch: the newest 256 of those are kept.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from sonnx.errors import BadInputError

__all__ = ["NodeSpec", "SessionKernel", "kernel_for", "onnxruntime_module"]

_LOCK = threading.RLock()  # _forget_group may run inside the locked section (a collection)


@dataclass
class _Entry:
    """One session under its key: the digest of the large constants it holds, and the
    tensors it has been handed them as (per group, one tensor per constant: weak references
    and the versions they had), with the finalizers that drop a group when its first tensor
    is freed."""

    key: tuple[Any, ...]
    kernel: SessionKernel
    digest: bytes
    seen: list[tuple[tuple[Any, ...], tuple[int, ...]]] = field(default_factory=list)
    finalizers: list[weakref.finalize] = field(default_factory=list)
    retired: bool = False

    def finds(self, constants: Sequence[torch.Tensor]) -> bool:
        """Whether ``constants`` are tensors this entry was handed, unchanged since."""
        versions = tuple(w._version for w in constants)
        return any(
            seen_versions == versions
            and all(ref() is w for ref, w in zip(refs, constants, strict=True))
            for refs, seen_versions in self.seen
        )

    def join(self, constants: Sequence[torch.Tensor]) -> None:
        """Know ``constants`` too (under the lock); their group leaves when its first tensor
        is freed, and the entry with its last group."""
        group = (tuple(weakref.ref(w) for w in constants), tuple(w._version for w in constants))
        self.seen.append(group)
        if constants:
            self.finalizers.append(weakref.finalize(constants[0], _forget_group, self, group))

    def retire(self) -> None:
        """Stop watching the tensors (a newer entry took the key)."""
        self.retired = True
        for finalizer in self.finalizers:
            finalizer.detach()


#: (constant addresses, shapes, dtypes, absent slots, spec, run dtypes, threads) -> its entry.
_SESSIONS: dict[tuple[Any, ...], _Entry] = {}


class _Recent:
    """An entry and the tensors (all of a node's constants: weak references, so an identity
    reused after a free misses) it was last found for, with their versions then; once the
    entry is retired (its constants changed, seen through another tensor), it is not used."""

    def __init__(self, entry: _Entry, constants: Sequence[torch.Tensor]) -> None:
        self.entry = entry
        self.refs = tuple(weakref.ref(w) for w in constants)
        self.versions = tuple(w._version for w in constants)

    def finds(self, constants: Sequence[torch.Tensor]) -> SessionKernel | None:
        """The entry's kernel while ``constants`` are these tensors, unchanged, else None."""
        if self.entry.retired or self.versions != tuple(w._version for w in constants):
            return None
        if all(ref() is w for ref, w in zip(self.refs, constants, strict=True)):
            return self.entry.kernel
        return None


#: The entries last found for each spec, thread count, bound inputs' types and ranks and
#: identities of the constants: a call
#: with the same tensors (each node of a compiled graph, at every run) skips the key's
#: addresses, shapes and small constants' bytes (about 20 us a call); the record checks the
#: tensors are the ones it was found for, unchanged.
_RECENT: dict[tuple[Any, ...], _Recent] = {}
_RECENT_SIZE = 4096
#: The keys of the entries whose constants are all small (found by value alone), oldest
#: first: no tensor's freeing drops them, so only the newest of them are kept.
_BY_VALUE_KEYS: dict[tuple[Any, ...], None] = {}
_BY_VALUE_ENTRIES = 256
#: Constants up to this size are found by their values, the others by their tensors: a graph
#: compiled by inductor hands an extern call each small constant (a scale, a zero point, a
#: short bias) in a new buffer at every run, so their addresses change while their values do
#: not (found by address, every run built a new session and kept it).
_BY_VALUE_BYTES = 4096

#: The element types a call binds, torch's to onnxruntime's (NumPy's names).
_BOUND_TYPES = {
    torch.float32: "float32",
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.int32: "int32",
}


def onnxruntime_module() -> Any | None:
    """The ``onnxruntime`` module, or None when it cannot be imported (the bridge is then
    off and the torch path runs)."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError:
        return None


@dataclass(frozen=True)
class NodeSpec:
    """What a node's session is built from.

    :param op_type: the ``com.microsoft`` operator.
    :param attrs: its attributes, as (name, value) pairs (a list as a tuple).
    :param slots: the names of its input slots, in order.
    :param bound: the positions of the slots a call binds; the others are constants.
    :param outputs: the names of its outputs, each float32, all bound by a call.
    """

    op_type: str
    attrs: tuple[tuple[str, Any], ...]
    slots: tuple[str, ...]
    bound: tuple[int, ...]
    outputs: tuple[str, ...] = ("y",)

    def model_bytes(self, inputs: Sequence[torch.Tensor | None]) -> bytes:
        """The model of :meth:`nodes` for ``inputs`` (one per slot, None where absent): bound ones
        as graph inputs of their types and ranks, the others as initializers, the outputs
        of the types onnxruntime infers.

        :param inputs: the node's inputs.
        :returns: the serialized model.
        """
        from onnx import helper, numpy_helper

        names = [s if x is not None else "" for s, x in zip(self.slots, inputs, strict=True)]
        graph_inputs, initializers = [], []
        for i, (slot, x) in enumerate(zip(self.slots, inputs, strict=True)):
            if x is None:
                continue
            if i in self.bound:
                elem = helper.np_dtype_to_tensor_dtype(_numpy_type(x))
                dims = [f"d{i}_{d}" for d in range(x.dim())]
                graph_inputs.append(helper.make_tensor_value_info(slot, elem, dims))
            else:
                initializers.append(numpy_helper.from_array(x.detach().contiguous().numpy(), slot))
        # Untyped: onnxruntime infers each from the node (float32, or a QLinear node's 8 bits).
        outputs = [helper.make_empty_tensor_value_info(y) for y in self.outputs]
        graph = helper.make_graph(
            self.nodes(names), self.op_type, graph_inputs, outputs, initializers
        )
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()

    def nodes(self, names: Sequence[str]) -> list[Any]:
        """The session's nodes: this one node (a spec of several nodes reading one input
        overrides it).

        :param names: the input name of each slot, "" where the input is absent.
        :returns: the ``NodeProto`` list.
        """
        from onnx import helper

        names = list(names)
        while names and names[-1] == "":
            names.pop()
        return [
            helper.make_node(
                self.op_type, names, list(self.outputs), domain="com.microsoft", **dict(self.attrs)
            )
        ]


#: NumPy's dtype objects of :data:`_BOUND_TYPES`, made at the first call (one dict look-up a
#: binding instead of a dtype built from its name).
_NUMPY_TYPES: dict[torch.dtype, Any] = {}


def _numpy_type(x: torch.Tensor) -> Any:
    found = _NUMPY_TYPES.get(x.dtype)
    if found is not None:
        return found
    import numpy as np

    name = _BOUND_TYPES.get(x.dtype)
    if name is None:
        raise BadInputError(
            f"onnxruntime kernel: cannot bind a {x.dtype} tensor (float32, uint8, int8 or "
            "int32 only)"
        )
    found = _NUMPY_TYPES[x.dtype] = np.dtype(name)
    return found


class _Held:
    """A thread's binding of one session and what each of its names was last bound to
    (address, shape, dtype): a name bound to the same memory as at the last call is not bound
    again. The binding only points at that memory, so binding it again would change nothing;
    an extern call in a compiled graph often gets the same buffers at every step."""

    def __init__(self, binding: Any) -> None:
        self.binding = binding
        self.last: dict[str, tuple[int, torch.Size, torch.dtype]] = {}

    def bind(
        self,
        device: Any,
        inputs: Sequence[tuple[str, torch.Tensor]],
        outputs: Sequence[tuple[str, torch.Tensor]],
    ) -> None:
        """Bind ``inputs`` and ``outputs`` (name, tensor) where they changed."""
        last, binding = self.last, self.binding
        for names, bind in ((inputs, binding.bind_input), (outputs, binding.bind_output)):
            for name, x in names:
                where = (x.data_ptr(), x.shape, x.dtype)
                if last.get(name) != where:
                    bind(name, device, _numpy_type(x), list(x.shape), where[0])
                    last[name] = where


class SessionKernel:
    """One node's session and the call binding torch memory to it.

    onnxruntime's ``IOBinding`` wrapper costs about 35 us a call in Python; its pybind layer,
    where this onnxruntime has it, is called directly (same calls, without the wrapper's
    bookkeeping), with one binding per thread (a new binding per call cost 20 us more at M=1),
    each name bound again where its memory changed (:class:`_Held`); otherwise the public
    wrapper is used.

    :param ort: the onnxruntime module.
    :param spec: the node.
    :param inputs: its inputs (constants included; the session holds copies of those).
    """

    def __init__(self, ort: Any, spec: NodeSpec, inputs: Sequence[torch.Tensor | None]) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Between sonnx's torch calls an idle onnxruntime thread must not spin on the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            spec.model_bytes(inputs), options, providers=["CPUExecutionProvider"]
        )
        self._names = [spec.slots[i] for i in spec.bound]
        self._outputs = spec.outputs
        low = getattr(getattr(ort, "capi", None), "_pybind_state", None)
        try:
            self._device = low.OrtDevice(low.OrtDevice.cpu(), low.OrtDevice.default_memory(), 0)
            self._binding_of = low.SessionIOBinding
            self._inner = self.session._sess
        except AttributeError:
            self._inner = None
        self._bindings = threading.local()

    def __call__(
        self, bound: Sequence[torch.Tensor | None], y: torch.Tensor | Sequence[torch.Tensor]
    ) -> None:
        """Run on ``bound`` (the bound slots' tensors, contiguous; None where absent), writing
        the float32 ``y`` (one contiguous tensor per output of the spec, or the one)."""
        pairs = [(n, x) for n, x in zip(self._names, bound, strict=True) if x is not None]
        ys = [y] if isinstance(y, torch.Tensor) else list(y)
        outs = list(zip(self._outputs, ys, strict=True))
        if self._inner is not None:
            held = getattr(self._bindings, "held", None)
            if held is None:
                held = self._bindings.held = _Held(self._binding_of(self._inner))
            held.bind(self._device, pairs, outs)
            self._inner.run_with_iobinding(held.binding, None)
            return
        binding = self.session.io_binding()
        for name, x in pairs:
            binding.bind_input(name, "cpu", 0, _numpy_type(x), tuple(x.shape), x.data_ptr())
        for name, x in outs:
            binding.bind_output(name, "cpu", 0, _numpy_type(x), tuple(x.shape), x.data_ptr())
        self.session.run_with_iobinding(binding)


def kernel_for(spec: NodeSpec, inputs: Sequence[torch.Tensor | None]) -> SessionKernel:
    """The kernel for ``spec`` with these constants, its session built on first use (raises
    what onnxruntime raises when it cannot build one).

    :param spec: the node.
    :param inputs: its inputs, one per slot (None where absent).
    :returns: the kernel; the entry is dropped when its first large constant is freed.
    """
    constants, kinds, bound = [], [], spec.bound
    for i, x in enumerate(inputs):  # one loop: this runs at every call of a bridged node
        if x is not None:
            if i in bound:
                kinds.append((x.dtype, x.dim()))
            else:
                constants.append(x)
    threads, runs = torch.get_num_threads(), tuple(kinds)
    recent_key = (spec, threads, runs, *map(id, constants))
    recent = _RECENT.get(recent_key)
    kernel = None if recent is None else recent.finds(constants)
    if kernel is not None:
        return kernel
    small = [w for w in constants if w.numel() * w.element_size() <= _BY_VALUE_BYTES]
    large = [w for w in constants if w.numel() * w.element_size() > _BY_VALUE_BYTES]
    key = (
        tuple(w.data_ptr() for w in large),
        tuple((tuple(w.shape), w.dtype, _value(w)) for w in small),
        tuple((tuple(w.shape), w.dtype) for w in large),
        tuple(x is None for x in inputs),
        spec,
        runs,
        threads,
    )
    found = _SESSIONS.get(key)
    if found is None or not found.finds(large):
        found = _session(spec, inputs, key, large)
    if len(_RECENT) >= _RECENT_SIZE:
        _RECENT.clear()
    _RECENT[recent_key] = _Recent(found, constants)
    return found.kernel


def _session(
    spec: NodeSpec,
    inputs: Sequence[torch.Tensor | None],
    key: tuple[Any, ...],
    constants: Sequence[torch.Tensor],
) -> _Entry:
    """The entry under ``key`` knowing ``constants``: the current one, joined by tensors
    of its values, or a new session."""
    with _LOCK:
        found = _SESSIONS.get(key)
        if found is not None and found.finds(constants):
            return found
        digest = _digest(constants)
        if found is not None and found.digest == digest:
            found.join(constants)  # other tensors over the same values: another graph's
            return found
        ort = onnxruntime_module()
        if ort is None:
            raise BadInputError(f"{spec.op_type}: onnxruntime is not importable")
        if found is not None:
            found.retire()
        found = _SESSIONS[key] = _Entry(key, SessionKernel(ort, spec, inputs), digest)
        found.join(constants)
        if not constants:
            _keep_newest_by_value(key)
        return found


def _keep_newest_by_value(key: tuple[Any, ...]) -> None:
    """Note a new entry found by value alone, dropping the oldest past the bound (a model
    prepared again and again, each with small weights of its own, would otherwise keep a
    session per preparation)."""
    _BY_VALUE_KEYS.pop(key, None)
    _BY_VALUE_KEYS[key] = None
    while len(_BY_VALUE_KEYS) > _BY_VALUE_ENTRIES:
        oldest = next(iter(_BY_VALUE_KEYS))
        del _BY_VALUE_KEYS[oldest]
        dropped = _SESSIONS.pop(oldest, None)
        if dropped is not None:
            dropped.retire()


def _digest(constants: Sequence[torch.Tensor]) -> bytes:
    """The SHA-256 of the constants' bytes (about 1 GB/s: once per session, and once per
    tensor object new to one)."""
    found = hashlib.sha256()
    for w in constants:
        found.update(memoryview(w.detach().contiguous().view(-1).view(torch.uint8).numpy()))
    return found.digest()


def _value(w: torch.Tensor) -> bytes:
    """A small constant's bytes."""
    return w.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def _forget_group(entry: _Entry, group: tuple[tuple[Any, ...], tuple[int, ...]]) -> None:
    """Drop a group of ``entry`` once its first tensor is freed, and the entry with its last
    group (unless a newer entry took its key)."""
    with _LOCK:
        # By identity: weak references compare their referents, tensors elementwise.
        entry.seen = [g for g in entry.seen if g is not group]
        if not entry.seen and _SESSIONS.get(entry.key) is entry:
            del _SESSIONS[entry.key]
