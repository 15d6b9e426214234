"""The constants of a compiled graph, kept outside its library: where each one comes from.

AOTInductor can write a graph's constants (its frozen weights and what inductor computed from
them) into the library's ``.so``; its loader then copies them into one block of memory per
loaded library. sonnx keeps them out of the library (``package_constants_in_so=False``) and
hands the runner tensors when it loads one:

- the model's weights are held once: the runner reads the model's own tensors, with no block
  per loaded graph (on the GPU, where there was no sharing, each compiled graph held one more
  copy of the weights in GPU memory);
- the graph store keeps no copy of the weights on disk for every graph it stores (a model of
  a billion float32 weights wrote 4 GB per compiled graph);
- on the GPU, torch's loader of in-library constants crashed loading a compiled ResNet-50 with
  its ~100 MiB of weights (segmentation fault in ``AOTIModelContainerRunnerCuda``, on an H100
  and an H200, torch 2.11), where a library of kilobytes of weights loaded.

While a graph compiles, :class:`ConstantRecorder` (inductor's last post-grad pass) notes the
value of every constant the graph reads, and, entered as a context, every constant inductor
names itself while lowering (``constant0``, ...: a 0-d tensor an extern call takes, a tensor a
lowering builds), which no pass sees. After compiling, :func:`save_sources` gives each one a
source, saved beside the library as ``constants.pt``:

- ``("weight", name)``: the model's tensor ``name`` itself (the same memory, or equal bytes);
- ``("transposed", name)``: the contiguous transpose of the 2-D model tensor ``name`` (the plain
  weight of a Gemm by a transposed initializer: :mod:`~sonnx.runtime.plain_linears`);
- ``("saved", name)``: a tensor inductor computed from the weights (a folded constant: a
  dequantized 4-bit weight), saved in the file.

:func:`load_constants` turns the sources back into tensors when a library is loaded; a saved
one equal to a tensor an earlier graph of the model reads (the prompt's and the decode step's
graphs fold a 4-bit weight alike) is read from there, so it too is held once.

oneDNN's packed weights (opaque tensors, which can be neither saved nor handed over from
outside) stay inside the library: a graph holding one (on the CPU, a convolution's packed
weight) is compiled with its constants in the ``.so``, as AOTInductor does by default.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

#: Beside a library whose constants are outside it: each constant's source.
SOURCES_FILE = "constants.pt"


@dataclass
class LibraryWeights:
    """What a loaded library may read: the model's tensors by name, and the tensors graphs
    loaded before read (see the module docstring)."""

    named: Mapping[str, torch.Tensor] = field(default_factory=dict)
    shared: Sequence[torch.Tensor] = ()

    @classmethod
    def of(cls, datas: Mapping[str, Any], graphs: Iterable[Any]) -> LibraryWeights:
        """What a graph loaded now reads: the model's tensors among ``datas`` (its constants'
        values by name), and what the ``graphs`` loaded before read (two graphs of one model,
        as a prompt's and a decode step's, fold the same weights alike: a dequantized 4-bit
        weight is then held once).

        :param datas: the constants' values by name.
        :param graphs: the model's compiled graphs so far.
        :returns: the weights.
        """
        named = {n: d for n, d in datas.items() if isinstance(d, torch.Tensor)}
        shared = [t for g in graphs for t in getattr(g.run, "constants", {}).values()]
        return cls(named, shared)


class StaleLibraryError(Exception):
    """A library's constants cannot be found: the model has no tensor it names, or one of
    another dtype or shape (a library stored for another model)."""


class ConstantRecorder:
    """An inductor post-grad pass noting every constant the graph reads, as it reaches code
    generation; a graph holding an opaque (oneDNN-packed) constant is switched to keep its
    constants inside the library."""

    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}
        self.inside = False

    def __enter__(self) -> ConstantRecorder:
        _record_named_constants()
        _ACTIVE.recorder = self
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.recorder = None

    def __deepcopy__(self, memo: dict[int, Any]) -> ConstantRecorder:
        # inductor deep-copies its config patches, this pass among them: the copy it calls
        # must record into this recorder.
        return self

    def __call__(self, graph: torch.fx.Graph) -> None:
        from torch._inductor import config as inductor_config

        module = graph.owning_module
        for node in graph.nodes:
            if node.op == "get_attr":
                value = getattr(module, node.target, None)
                if isinstance(value, torch.Tensor):
                    self.values[node.target] = value
        self.inside = any(v.layout != torch.strided for v in self.values.values())
        # Read when the library's code is generated, after this pass; the compile's config
        # patch restores it afterwards.
        inductor_config.aot_inductor.package_constants_in_so = self.inside


#: The recorder of the graph this thread is compiling (compiles run in the calling thread).
_ACTIVE = threading.local()


def _record_named_constants() -> None:
    """Have inductor's ``GraphLowering.allocate_non_dup_const_name`` (every constant a
    compiled graph holds is named there) also give the name and value to the thread's active
    recorder. A patch of a private torch method, installed once: a torch upgrade that renames
    it leaves those constants unseen (the library is then refused at load: "reads a constant
    ... of no source", and its steps run eagerly)."""
    from torch._inductor.graph import GraphLowering

    original = getattr(GraphLowering, "allocate_non_dup_const_name", None)
    if original is None or getattr(original, "records_for_sonnx", False):
        return

    def allocate(self: Any, name: str | None, data: Any) -> str:
        new_name = original(self, name, data)
        recorder = getattr(_ACTIVE, "recorder", None)
        if recorder is not None and isinstance(data, torch.Tensor):
            recorder.values.setdefault(new_name, data)
        return new_name

    allocate.records_for_sonnx = True  # type: ignore[attr-defined]
    GraphLowering.allocate_non_dup_const_name = allocate


def save_sources(
    recorded: Mapping[str, torch.Tensor], named: Mapping[str, torch.Tensor], path: Path
) -> None:
    """Write the source of each recorded constant (see the module docstring) to ``path``."""
    same_memory = {_identity(t): n for n, t in named.items()}
    by_layout: dict[tuple[Any, ...], list[str]] = {}
    for n, t in named.items():
        if t.layout == torch.strided and t.is_contiguous():
            by_layout.setdefault((t.dtype, tuple(t.shape), t.device), []).append(n)
    sources: dict[str, tuple[str, str, tuple[int, ...]]] = {}
    saved: dict[str, torch.Tensor] = {}
    for target, value in recorded.items():
        kind, name = _source(value, named, same_memory, by_layout) or ("saved", target)
        if kind == "saved":
            saved[target] = value.detach().clone()
        sources[target] = (kind, name, tuple(value.shape))
    torch.save({"sources": sources, "saved": saved}, path)


def _source(
    value: torch.Tensor,
    named: Mapping[str, torch.Tensor],
    same_memory: Mapping[tuple[Any, ...], str],
    by_layout: Mapping[tuple[Any, ...], list[str]],
) -> tuple[str, str] | None:
    """``value`` as a model tensor or its transpose, if it is one."""
    name = same_memory.get(_identity(value))
    if name is not None:
        return ("weight", name)
    if not value.is_contiguous():
        return None
    for name in by_layout.get((value.dtype, tuple(value.shape), value.device), ()):
        if named[name].equal(value):
            return ("weight", name)
    if value.dim() == 2:
        flipped = (value.dtype, tuple(reversed(value.shape)), value.device)
        for name in by_layout.get(flipped, ()):
            if _transposes(named[name], value):
                return ("transposed", name)
    return None


def _transposes(weight: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether ``value`` equals ``weight``'s transpose (a few elements compared first)."""
    corner = (slice(0, 4), slice(0, 4))
    if not weight.t()[corner].equal(value[corner]):
        return False
    return weight.t().equal(value)


def load_constants(
    path: Path, names: Mapping[str, str], device: torch.device, weights: LibraryWeights
) -> dict[str, torch.Tensor]:
    """The tensors a library reads, by the runner's constant names (``names`` maps each to
    the name it had in the graph); raises :class:`StaleLibraryError` where the model has no
    tensor a source names."""
    kept = torch.load(path, map_location=device, weights_only=True)
    sources, saved = kept["sources"], kept["saved"]
    earlier = _EqualTensors(weights.shared)
    reads: dict[str, torch.Tensor] = {}
    for constant, original in names.items():
        if original not in sources:
            raise StaleLibraryError(f"the library reads a constant {original!r} of no source")
        kind, name, shape = sources[original]
        if kind == "weight":
            reads[constant] = _model_tensor(weights.named, name, shape)
        elif kind == "transposed":
            transposed = _model_tensor(weights.named, name, shape[::-1]).t().contiguous()
            reads[constant] = earlier.equal_to(transposed)
        else:
            reads[constant] = earlier.equal_to(saved[name])
    return reads


def _model_tensor(
    named: Mapping[str, torch.Tensor], name: str, shape: tuple[int, ...]
) -> torch.Tensor:
    """The model's tensor ``name``, of ``shape``."""
    weight = named.get(name)
    if weight is None or tuple(weight.shape) != tuple(shape):
        raise StaleLibraryError(
            f"the library reads the model's tensor {name!r} as shape {list(shape)}; "
            + ("the model has none" if weight is None else f"it is {list(weight.shape)}")
        )
    return weight.detach()


class _EqualTensors:
    """The tensors graphs loaded before read, found by value (indexed when first asked)."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = tensors
        self.index: dict[tuple[Any, ...], list[torch.Tensor]] | None = None

    def equal_to(self, value: torch.Tensor) -> torch.Tensor:
        """A tensor already read that equals ``value``, or ``value``."""
        if self.index is None:
            self.index = {}
            for t in self.tensors:
                if t.layout == torch.strided and t.is_contiguous():
                    self.index.setdefault(_fingerprint(t), []).append(t)
        same = (t for t in self.index.get(_fingerprint(value), ()) if t.equal(value))
        return next(same, value)


def _identity(t: torch.Tensor) -> tuple[Any, ...]:
    """Which memory ``t`` views, and how."""
    if t.layout != torch.strided:
        return (id(t),)
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def _fingerprint(t: torch.Tensor) -> tuple[Any, ...]:
    """What tells contiguous tensors apart without reading them whole: dtype, shape, device
    and up to 192 of their bytes (the first, middle and last 64)."""
    # Elements in order from the storage offset (what contiguous means), read flat; not
    # ``reshape(-1)``, which keeps a stride of 0 that a tensor of one element or none may
    # have, and which ``view`` as bytes rejects.
    raw = t.detach().as_strided((t.numel(),), (1,)).view(torch.uint8)
    n = raw.numel()
    sample = torch.cat([raw[:64], raw[n // 2 : n // 2 + 64], raw[-64:]])
    return (t.dtype, tuple(t.shape), t.device, bytes(sample.cpu().numpy()))
