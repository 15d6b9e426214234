"""A segment of steps compiled ahead of time into a shared library, and the guards it serves.

Graph mode compiles with AOTInductor: inductor writes the kernels and the C++ code launching
them into one ``.so``, which a runner loads with ``dlopen`` (0.07 s for ResNet-50) and calls
from C++, with no Python per kernel. The weights it froze in stay outside the library where
they can: the runner reads the model's own tensors (:mod:`sonnx.runtime.library_constants`).
Unlike a graph compiled in memory, the library outlives the process: :mod:`sonnx.runtime.store`
keeps it, so a new process's first run of a model seen before loads its graphs instead of
tracing and compiling them.

A library serves the inputs its *guards* admit: a Python expression over the inputs
(``L['t0'].size()[0] <= 1``, a stride), kept as text beside the library and checked before each
run. inductor's on-disk FX-graph cache is off for these compiles: it checks guards only against
integer graph inputs, which a trace of tensors does not have, and would hand a graph compiled
for a batch of one back for a batch of eight without the guards that say so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.fx import GraphModule

from sonnx.runtime.conv_prepack import prepack_convolution_weights
from sonnx.runtime.library_constants import (
    SOURCES_FILE,
    ConstantRecorder,
    LibraryWeights,
    load_constants,
    save_sources,
)
from sonnx.runtime.plain_linears import keep_linears_plain
from sonnx.runtime.transposed_convs import fold_into_transposed_convolutions


@dataclass
class CompiledGraph:
    """A compiled segment: the weight versions it froze in, the guards saying which inputs it
    serves, the callable computing the segment's outputs, whether it was loaded from disk
    (rather than compiled by this process), and the library file while it exists (a graph
    kept in the store; one compiled with the store off is deleted once loaded)."""

    versions: tuple[Any, ...]
    guards: str
    run: Callable[..., Any]
    loaded: bool = False
    library: Path | None = None
    #: What its runs were compared with the eager steps at (see :class:`Checks`).
    checks: Checks = field(default_factory=lambda: Checks())
    _check: Any = field(default=None, repr=False)

    def compute(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """The graph's outputs for ``inputs``; :class:`CompiledRunError` where the compiled
        code raises (an index check inductor generated, a kernel it could not run)."""
        try:
            return self.run(*inputs)
        except Exception as e:
            raise CompiledRunError(first_line(e)) from e

    def twin(self) -> CompiledGraph:
        """This graph's code for another segment of the same steps and constants (see
        :mod:`~sonnx.runtime.segment_identity`): counted as loaded, not compiled, checked
        again at its first run there, and not the owner of the library file."""
        return CompiledGraph(self.versions, self.guards, self.run, loaded=True)

    def fits(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Whether the guards admit ``inputs``."""
        if not self.guards:
            return True
        if self._check is None:
            self._check = compile(self.guards, "<graph mode guards>", "eval")
        return _evaluate(self._check, inputs)


#: A graph's input sizes, input after input.
Sizes = tuple[tuple[int, ...], ...]


@dataclass
class Checks:
    """When a graph's run is compared with the eager steps: at its first run, and once more
    at its first run at other input sizes. A graph traced with symbolic sizes serves every
    size its guards admit, but inductor's loops differ by size (a vector tail, a size it
    specialised on while lowering), so a graph right at one size is not yet right at all of
    them; two sizes cost one eager run more, once per graph. A graph loaded from the store
    keeps what the process that checked it recorded there.

    :param first: the sizes of the first checked run (None before it).
    :param again: whether a run at other sizes was checked too.
    """

    first: Sizes | None = None
    again: bool = False

    def wanted(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Whether a run on ``inputs`` is to be checked.

        :param inputs: the graph's inputs.
        :returns: True before the first check and at the first other sizes after it.
        """
        if self.again:
            return False
        first = self.first  # compared in place: this is asked at every run until `again`
        return (
            first is None
            or len(first) != len(inputs)
            or any(x.shape != size for x, size in zip(inputs, first, strict=True))
        )

    def passed(self, inputs: Sequence[torch.Tensor]) -> None:
        """Record that the run on ``inputs`` equalled the eager steps.

        :param inputs: the graph's inputs.
        """
        if self.first is None:
            self.first = sizes(inputs)
        else:
            self.again = True


def sizes(inputs: Sequence[torch.Tensor]) -> Sizes:
    """The inputs' sizes, input after input.

    :param inputs: tensors.
    :returns: their shapes as tuples.
    """
    return tuple(tuple(x.shape) for x in inputs)


class CompiledRunError(Exception):
    """A compiled graph raised while running; graph mode then runs its steps eagerly (which
    raise sonnx's typed error where the inputs themselves are at fault)."""


def first_line(error: BaseException) -> str:
    """An error's first line (its type's name where it says nothing): what a warning quotes
    of a compiler's or a compiled graph's failure."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def admits(guards: str, inputs: Sequence[torch.Tensor]) -> bool:
    """Whether ``guards`` (a graph's, as text) admit ``inputs``."""
    return not guards or _evaluate(compile(guards, "<graph mode guards>", "eval"), inputs)


def _evaluate(check: Any, inputs: Sequence[torch.Tensor]) -> bool:
    """The guard expression's value; ``L['t0']`` is the first input (``ShapeEnv``'s names)."""
    try:
        return bool(eval(check, {"L": {f"t{i}": t for i, t in enumerate(inputs)}}))
    except (IndexError, KeyError):  # another rank or number of inputs than compiled for
        return False


def freeze(graph: GraphModule, params: list[torch.Tensor]) -> GraphModule:
    """The graph with its first ``len(params)`` inputs turned into attributes holding
    ``params``: it takes only the model inputs, and inductor sees the weights as constants."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"][: len(params)]
    for i, (node, value) in enumerate(zip(placeholders, params, strict=True)):
        attr = f"_weight_{i}"
        graph.register_buffer(attr, value)
        with graph.graph.inserting_before(node):
            constant = graph.graph.get_attr(attr)
        node.replace_all_uses_with(constant)
        graph.graph.erase_node(node)
    graph.graph.lint()
    graph.recompile()
    return graph


def compile_library(
    graph: GraphModule,
    example_inputs: Sequence[Any],
    library: Path,
    named: Mapping[str, torch.Tensor],
) -> None:
    """Compile ``graph`` (weights frozen in as attributes) into the shared library ``library``,
    for the sizes of ``example_inputs`` (fake tensors with symbolic sizes, or real ones).

    ``named`` are the model's tensors by name: the constants the library reads that are
    among them (or their transposes) are read from the model when it is loaded, the others
    saved beside it (:mod:`~sonnx.runtime.library_constants`).

    inductor's pattern rewrites (attention fusion) can reject a graph whose constants are
    tensors (a softmax scale computed from a shape); without them the graph still compiles.
    Constant operations after a transposed convolution are folded into it first, as inductor's
    own folding would get them wrong (:mod:`~sonnx.runtime.transposed_convs`).
    """
    from torch._inductor import config as inductor_config  # loads inductor (~2 s) on first use
    from torch._inductor.compile_fx import compile_fx_aot

    fold_into_transposed_convolutions(graph)
    for pattern_matcher in (True, False):
        recorder = ConstantRecorder()
        options = {
            "freezing": True,
            "pattern_matcher": pattern_matcher,
            "fx_graph_cache": False,
            "aot_inductor.output_path": str(library),
            "aot_inductor.package_constants_in_so": False,
            "post_grad_custom_pre_pass": _weight_passes,
            "post_grad_custom_post_pass": recorder,
        }
        if hasattr(inductor_config.aot_inductor, "embed_kernel_binary"):
            # GPU kernels inside the library, not in cubin files beside it: the store moves
            # the library out of the folder it was compiled in ("CUDA driver error: file not
            # found" at the first run, seen on an H200).
            options["aot_inductor.embed_kernel_binary"] = True
        try:
            with recorder:
                compile_fx_aot(graph, list(example_inputs), config_patches=options)
        except Exception:
            if not pattern_matcher:
                raise
            continue
        if not recorder.inside:
            save_sources(recorder.values, named, library.with_name(SOURCES_FILE))
        _keep_extern_calls(library)
        return


def _keep_extern_calls(library: Path) -> None:
    """The description of the graph's calls to custom ops (onnxruntime's kernels,
    :mod:`sonnx.operators.quantize.ort_kernels`) where the runner looks for it, beside the
    library under its name: inductor writes it beside its generated C++."""
    written = sorted(library.parent.glob("*wrapper.json"), key=lambda p: p.stat().st_mtime)
    if written:
        shutil.copyfile(written[-1], library.with_suffix(".json"))


def _weight_passes(graph: torch.fx.Graph) -> None:
    """How the frozen weights are laid out: convolutions packed for oneDNN where that pays
    (:mod:`~sonnx.runtime.conv_prepack`), matrix products on plain weights
    (:mod:`~sonnx.runtime.plain_linears`)."""
    prepack_convolution_weights(graph)
    keep_linears_plain(graph)


def load_library(
    library: Path, device: torch.device, weights: LibraryWeights | None = None
) -> Callable[..., list[torch.Tensor]]:
    """A callable running the compiled library ``library`` on ``device``'s tensors, reading
    its constants from ``weights`` where they are outside it (see
    :mod:`~sonnx.runtime.library_constants`; :class:`StaleLibraryError` where ``weights``
    lack one)."""
    aoti = torch._C._aoti
    if device.type == "cpu":
        runner = aoti.AOTIModelContainerRunnerCpu(str(library), 1)
    elif device.type == "cuda":
        runner = aoti.AOTIModelContainerRunnerCuda(str(library), 1, str(device))
    else:
        raise NotImplementedError(f"graph mode cannot load a compiled graph on {device}")
    sources = library.with_name(SOURCES_FILE)
    reads: dict[str, torch.Tensor] = {}
    if sources.exists():
        names = runner.get_constant_names_to_original_fqns()
        reads = load_constants(sources, names, device, weights or LibraryWeights())
        # The runner reads these tensors themselves (user-managed: no copy).
        runner.update_constant_buffer(reads, False, True, True)

    def run(*inputs: torch.Tensor) -> list[torch.Tensor]:
        # The library's OpenMP loops and oneDNN calls use the calling thread's OpenMP thread
        # count, which in a thread that has not yet run a parallel torch op is OpenMP's
        # default (every core), not torch's: asking torch for its count sets it (the
        # thread's results then equal, bit for bit, those of the thread that compiled).
        torch.get_num_threads()
        return runner.run(list(inputs))

    run.constants = reads  # type: ignore[attr-defined]  # the tensors the runner reads
    return run
