"""Graph mode for imported models: ``prepare(model, use_graph=True)``.

An inference run (``sonnx.autograd.training`` off, the whole graph, its declared outputs) is
traced into an FX graph of torch operations (``make_fx``, with symbolic sizes: see
:mod:`sonnx.runtime.symbolic_graphs`) and compiled ahead of time by inductor into a shared
library (:mod:`sonnx.runtime.compiled_graphs`), the weights frozen in as constants so that, for
instance, convolution weights are packed once for oneDNN. All of sonnx's per-node Python runs
at trace time only. Compiled libraries are kept on disk (:mod:`sonnx.runtime.store`): a new
process running a model seen before loads them instead of tracing and compiling.

Shape arithmetic (``Shape -> Gather -> Concat -> Reshape``, as in every exported BERT) depends
only on the input shapes: :class:`ValueFlow` follows which tensors carry input or weight values
and runs every operation that touches none of them *outside* the trace, on plain tensors or
symbolic sizes.

A step whose control flow or output shapes depend on input values (NonZero, Unique, an ``If``
on a computed condition, a host read of a computed value), or that draws random numbers, cannot
be part of a static graph. Such a step runs eagerly, *there*: the steps between such steps form
segments, each traced and compiled on its own, so the rest of the model stays compiled. A
segment that inductor fails to compile is split in halves, and the halves compiled, until the
step it fails on is found: that step runs eagerly, and the steps before and after it are
compiled again as the segments around it. Each case is warned about once, with the node's
name; the steps found to run eagerly are stored with the model's compiled graphs.
:meth:`GraphRunner.parts` lists what ran compiled and what eagerly.
An ``If`` whose condition comes from a one-value integer input (Silero-VAD's sample rate) is
no such step: that input is baked into the graph like a shape value, and each of its values
gets a graph holding the branch it takes.

Graph mode is never silently wrong and never ends a run in the compiler's own error:

* each newly compiled graph's first run is compared with the eager steps on the same inputs
  (:mod:`sonnx.runtime.graph_checks`; ``prepare(..., verify=False)`` skips it); a graph that
  differs is dropped, deleted from the store, and its steps run eagerly from then on;
* a compiled graph that raises while running is dropped the same way, once the eager steps
  have computed the same inputs without error (an error of the inputs themselves is raised
  as the eager steps raise it, and the graph is kept);
* a segment inductor fails on is split in halves once; a half that fails too runs eagerly
  (a search down to the one failing step cost a full compile per halving: minutes on a large
  model);
* compiling stops when the model's compile budget is spent
  (:mod:`sonnx.runtime.compile_budget`): what is not compiled yet runs eagerly.

Each case is warned about once (:class:`~sonnx.errors.GraphModeWarning`), naming the steps and
why; :meth:`GraphRunner.parts` and ``SingaRep.explain`` list them.
"""

from __future__ import annotations

import operator
import shutil
import warnings
from collections.abc import Callable
from functools import cached_property
from typing import Any

import torch

from sonnx.engine.tracing import NotTraceableError
from sonnx.errors import BadInputError, GraphModeWarning
from sonnx.runtime.compile_budget import DEFAULT_COMPILE_BUDGET, CompileBudget, CompileProgress
from sonnx.runtime.compiled_graphs import CompiledGraph, CompiledRunError, first_line
from sonnx.runtime.graph_checks import first_difference, rounds_values
from sonnx.runtime.graph_keys import (
    RECENT_SIGNATURES,
    bake_tests,
    baked_values,
    compiled_key,
    signature,
)
from sonnx.runtime.library_constants import LibraryWeights
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.segment_build import segment_builder
from sonnx.runtime.segments import (
    Choice,
    RunPart,
    Segment,
    eager_by_design,
    plan_segments,
    segment_reads,
    whole_graph,
)
from sonnx.runtime.store import GraphStore, WeightDigests, digest
from sonnx.tensor import Tensor, computed_tensor

_DATA = operator.attrgetter("data")
_VERSION = operator.attrgetter("_version")


class _ReplanError(Exception):
    """The segments changed (a step turned out not to be traceable, or inductor failed on a
    segment, which is split): the run starts over."""


class _BudgetSpentError(Exception):
    """A segment needs a graph compiled, and the compile budget is spent."""


class GraphRunner:
    """Compiled inference runs of one :class:`GraphProgram`.

    The steps are split into compiled segments around the steps that must run eagerly (found
    while tracing, or random draws, known up front). Each segment is compiled for the input
    shapes its guards admit; trainable weights (``stores_grad``) are frozen into it as
    constants, and every constant's identity and version counter are part of the in-memory
    key (its bytes, of the on-disk one), so after a training step or ``load_states`` the next
    run compiles afresh.

    ``identity`` names the model's graph (:func:`~sonnx.runtime.store.graph_digest`); with
    it, compiled graphs are stored on disk and loaded from there (see
    :mod:`sonnx.runtime.store`), without it they are kept in memory only.

    ``verify`` compares each new graph's first run with the eager steps; ``compile_budget``
    bounds the seconds spent compiling (None: no bound). See the module docstring.
    """

    def __init__(
        self,
        program: GraphProgram,
        declared_shapes: dict[str, Any] | None = None,
        identity: str | None = None,
        verify: bool = True,
        compile_budget: float | None = DEFAULT_COMPILE_BUDGET,
    ) -> None:
        self.program = program
        #: The graph inputs' shapes as the model declares them (see ``compile_symbolic``).
        self.declared_shapes = declared_shapes or {}
        # The program's own (the SingaRep's tensor_map is the same dict), so weights a user
        # changes or trains are the ones compiled in.
        self.constants = program.constants
        self.input_names = program.input_names
        self.output_names = program.output_names
        self.identity = identity
        self.verify = verify
        self.budget = CompileBudget(compile_budget)
        self._progress = CompileProgress()
        self.store = GraphStore.from_environment() if identity else GraphStore(None)
        self._weight_digests = WeightDigests()
        #: The constants as loaded: graphs of these are stored; graphs of weights changed
        #: in this process (a training step, ``load_states``) are kept in memory only, so a
        #: training loop that evaluates in graph mode does not fill the disk.
        self._loaded_versions = self._versions()
        #: The versions the segments' ``recent`` choices were made under.
        self._recent_versions = self._loaded_versions
        #: Trace segments with symbolic sizes: one graph for every shape its guards admit
        #: (see :mod:`sonnx.runtime.symbolic_graphs`); a segment torch cannot trace or compile
        #: that way is compiled for each input shape. False compiles every segment per shape.
        self.dynamic = True
        #: Why the steps that run eagerly do, by step index.
        self.eager_steps: dict[int, str] = eager_by_design(program)
        self._segments: list[Segment | int] | None = None
        #: Where segments inductor failed on were split (the first step of each second half)
        #: while the step it fails on is searched for, in this process.
        self._splits: set[int] = set()
        #: The halves of the splits made: one that fails too runs eagerly, unsplit.
        self._halves: set[tuple[int, int]] = set()
        #: The segments (by their steps) left eager because the compile budget was spent.
        self._over_budget: set[tuple[int, int]] = set()
        #: The segments of the plan before the last change, kept by their steps: a new plan
        #: takes over the ones it still has, with their graphs.
        self._previous: dict[tuple[int, int], Segment] = {}
        #: The segment computing the whole graph when it is the only part (no step runs
        #: eagerly), with the positions of the graph's outputs among the segment's.
        self._whole: tuple[Segment, list[int]] | None = None
        self._warned: set[str] = set()
        if identity:
            for index, why in self.store.load_plan(identity).items():
                if index < len(program.steps) and index not in self.eager_steps:
                    self.eager_steps[index] = why
                    self._warn(f"node {program.steps[index].info.name!r} ({why})")

    @cached_property
    def _bake_tests(self) -> Callable[[str], Callable[[torch.Tensor], bool] | None]:
        return bake_tests(self.program)

    @property
    def fallback(self) -> str | None:
        """What runs eagerly and why (None: the whole graph is compiled)."""
        found = [p for p in self.parts() if not p.compiled and p.steps.start in self.eager_steps]
        parts = [
            f"node {p.nodes[0]!r} runs eagerly: {p.why_eager}"
            if len(p.steps) == 1
            else f"steps {p.steps.start}-{p.steps.stop - 1} ({p.nodes[0]!r} .. "
            f"{p.nodes[-1]!r}) run eagerly: {p.why_eager}"
            for p in found
        ]
        return "; ".join(parts) or None

    def parts(self) -> list[RunPart]:
        """What a run does, part by part: each compiled segment and each step run eagerly,
        as of the runs so far (before the first, no segment is compiled yet)."""
        names = [step.info.name for step in self.program.steps]
        found: list[RunPart] = []
        for part in self.segments:
            if isinstance(part, int):
                why = self.eager_steps[part]
                last = found[-1] if found else None
                if last is not None and last.why_eager == why and last.steps.stop == part:
                    # The steps of one dropped segment: one part, as they were.
                    steps = range(last.steps.start, part + 1)
                    found[-1] = RunPart(steps, (*last.nodes, names[part]), False, why)
                else:
                    found.append(RunPart(range(part, part + 1), (names[part],), False, why))
                continue
            steps = range(part.start, part.stop)
            compiled = any(part.compiled.values())
            why = None
            if (part.start, part.stop) in self._over_budget:
                why = self.budget.describe()
            elif not compiled:
                constant = any(not c.traced for c in part.recent.values())
                why = "it reads only constants and shape values" if constant else "not run yet"
            found.append(RunPart(steps, tuple(names[i] for i in steps), compiled, why))
        return found

    @property
    def compile_count(self) -> int:
        """How many graphs this runner compiled (for each segment, one per set of shapes its
        guards cannot cover with one graph)."""
        return sum(not g.loaded for g in self._graphs())

    @property
    def loaded_count(self) -> int:
        """How many graphs this runner loaded from the store instead of compiling them."""
        return sum(g.loaded for g in self._graphs())

    def _graphs(self) -> list[CompiledGraph]:
        return [
            g
            for s in self.segments
            if isinstance(s, Segment)
            for graphs in s.compiled.values()
            for g in graphs
        ]

    @property
    def segments(self) -> list[Segment | int]:
        """Compiled segments, and the indices of the steps run eagerly between them."""
        if self._segments is None:
            parts = plan_segments(self.program, set(self.eager_steps), self._splits)
            self._segments = [
                self._previous.get((p.start, p.stop), p) if isinstance(p, Segment) else p
                for p in parts
            ]
            self._previous = {}
            self._whole = whole_graph(self._segments, self.output_names)
        return self._segments

    def _replan(self) -> None:
        """The segments change at the next run (a step runs eagerly, a segment is split);
        those that stay keep their graphs."""
        if self._segments is not None:
            self._previous = {
                (s.start, s.stop): s for s in self._segments if isinstance(s, Segment)
            }
        self._segments = None
        self._whole = None

    def run(self, inputs: dict[str, Tensor]) -> list[torch.Tensor] | None:
        """The outputs' values of a compiled run, or None when an input or an output is not a
        tensor."""
        if not all(isinstance(inputs.get(n), Tensor) for n in self.input_names):
            return None
        versions = self.current_versions()
        if self._whole is not None:  # the common case, without the general path's bookkeeping
            whole, positions = self._whole
            try:
                outs = self._chosen_outputs(whole, [inputs[n].data for n in whole.inputs])
            except CompiledRunError:  # the general path runs it again, and eagerly
                outs = None
            if outs is not None:
                return [outs[i] for i in positions]
        # Each new plan runs another step eagerly, or splits a segment further while the
        # search for one goes on: a bounded number of plans.
        for _ in range((len(self.program.steps) + 1) ** 2):
            values: dict[str, Any] = dict(self.constants)
            values.update(inputs)
            try:
                for part in self.segments:
                    if isinstance(part, int):
                        self._execute(values, part, part + 1)
                    else:
                        self._run_segment(part, values, versions)
            except _ReplanError:
                continue
            outs = [values[n] for n in self.output_names]
            return [o.data for o in outs] if all(isinstance(o, Tensor) for o in outs) else None
        raise RuntimeError("graph mode could not settle which steps run eagerly")

    def current_versions(self) -> tuple[Any, ...]:
        """The constants' identities and versions now; the choices made under others (a
        weight changed) are dropped."""
        versions = self._versions()
        if versions != self._recent_versions:
            self._recent_versions = versions
            for part in self.segments:
                if isinstance(part, Segment):
                    for choice in part.recent.values():  # others may hold on to a choice
                        choice.graphs.clear()
                    part.recent.clear()
        return versions

    @property
    def whole(self) -> tuple[Segment, list[int]] | None:
        """The segment computing the whole graph when it is the only part (no step runs
        eagerly), with the positions of the graph's outputs among its outputs; None before
        the first run."""
        return self._whole

    def whole_graph_for(
        self, inputs: dict[str, torch.Tensor]
    ) -> tuple[CompiledGraph, list[str], list[str], list[int]] | None:
        """The graph an earlier run of ``inputs`` (values by name) computed the whole model
        with: the graph, the names of its traced inputs (in its order) and of the inputs baked
        into it, and the positions of the model's outputs among the graph's. None when no such
        run was made or some step runs eagerly."""
        if self._whole is None:
            return None
        segment, positions = self._whole
        datas = [inputs[n] for n in segment.inputs]
        choice = segment.recent.get(signature(datas))
        entry = None if choice is None else choice.graphs.get(baked_values(datas, choice.baked))
        if entry is None:
            return None
        names = [[segment.inputs[i] for i in which] for which in (choice.traced, choice.baked)]
        return entry, names[0], names[1], positions

    @staticmethod
    def _chosen_outputs(segment: Segment, datas: list[torch.Tensor]) -> list[Any] | None:
        """The segment's outputs from the graph chosen before for inputs of these layouts and
        baked values; None if none was (the general path then chooses one)."""
        choice = segment.recent.get(signature(datas))
        if choice is None or not choice.traced:
            return None
        entry = choice.graphs.get(baked_values(datas, choice.baked))
        if entry is None:
            return None
        return entry.compute(*[datas[i] for i in choice.traced])

    def _run_segment(
        self, segment: Segment, values: dict[str, Any], versions: tuple[Any, ...]
    ) -> None:
        args = [values.get(n) for n in segment.inputs]
        bounds = (segment.start, segment.stop)
        if bounds in self._over_budget or not all(isinstance(a, Tensor) for a in args):
            self._execute(values, segment.start, segment.stop)
            return
        datas = [a.data for a in args]
        try:
            outs = self._chosen_outputs(segment, datas)
            if outs is None:
                outs = self._choose(segment, args, datas, versions, values)
        except CompiledRunError as e:
            # The eager steps raise sonnx's own error where the inputs are at fault (and the
            # graph stays); where they compute, the graph is at fault.
            self._execute(values, segment.start, segment.stop)
            self._drop(segment, f"its compiled graph raised: {e}")
            return
        except _BudgetSpentError:
            self._over_budget.add(bounds)
            self._warn(
                f"steps {segment.start}-{segment.stop - 1} and every other part not compiled "
                f"yet ({self.budget.describe()}; prepare(..., compile_budget=None) lifts it)"
            )
            outs = None
        if outs is None:
            self._execute(values, segment.start, segment.stop)
            return
        values.update(
            (n, computed_tensor(t, n)) for n, t in zip(segment.outputs, outs, strict=True)
        )

    def _choose(
        self,
        segment: Segment,
        args: list[Tensor],
        datas: list[torch.Tensor],
        versions: tuple[Any, ...],
        values: dict[str, Any],
    ) -> list[Any] | None:
        """The segment's outputs from the graph for these inputs, chosen now (and remembered);
        None when the segment has nothing to compile (its steps read only constants and shape
        values). A graph's first run is checked against the eager steps' on ``values``."""
        # A shape value (fixed by the input shapes) computed outside the segment is baked in,
        # and so is a one-value graph input an If's condition is computed from (a sample rate):
        # the graph then holds the branch taken, one graph per value. Other graph inputs (token
        # ids are small host integers too) or value-dependent results (NonZero's indices) never
        # are: a graph per value would compile at every new input.
        if segment.bake_tests is None:
            segment.bake_tests = [self._bake_tests(n) for n in segment.inputs]
        layouts = signature(datas)
        choice = segment.recent.get(layouts)
        if choice is None:
            tests = zip(segment.bake_tests, datas, strict=True)
            bake = [test is not None and test(d) for test, d in tests]
            choice = Choice(
                tuple(i for i, b in enumerate(bake) if b),
                tuple(i for i, b in enumerate(bake) if not b),
            )
            if len(segment.recent) >= RECENT_SIGNATURES:
                segment.recent.clear()
            segment.recent[layouts] = choice
        if not choice.traced:  # the steps read only constants and shape values
            return None
        baked = [i in choice.baked for i in range(len(datas))]
        traced = [datas[i] for i in choice.traced]
        with torch.no_grad():
            entry = self._graph_for(segment, args, baked, traced, versions)
        key = baked_values(datas, choice.baked)
        if len(choice.graphs) >= RECENT_SIGNATURES:
            choice.graphs.clear()
        choice.graphs[key] = entry
        # The compiled library records no autograd graph, so it needs no no_grad around it.
        outs = entry.compute(*traced)
        if entry.checked or not self.verify:
            return outs
        entry.checked = True
        expected = dict(values)
        self._execute(expected, segment.start, segment.stop, set(segment.outputs))
        eager = [expected[n].data for n in segment.outputs]
        steps = self.program.steps[segment.start : segment.stop]
        rounded = rounds_values(step.info.op_type for step in steps)
        difference = first_difference(segment.outputs, outs, eager, rounded)
        if difference is None:
            return outs
        self._drop(segment, f"its compiled graph's first run differed from the eager steps: "
                            f"{difference}")
        return eager

    def _execute(
        self, values: dict[str, Any], start: int, stop: int, keep: set[str] | None = None
    ) -> None:
        """Steps ``[start, stop)`` run eagerly, recording no autograd graph (with ``keep``,
        freeing each other value after its last use)."""
        with torch.no_grad():
            self.program.execute(values, start=start, stop=stop, keep=keep)

    def _graph_for(
        self,
        segment: Segment,
        args: list[Tensor],
        baked: list[bool],
        traced: list[torch.Tensor],
        versions: tuple[Any, ...],
    ) -> CompiledGraph:
        """The segment's graph whose guards admit ``traced``: compiled before, loaded from the
        store or compiled now. When inductor cannot compile the segment, it is split (see
        :meth:`_split`) and the run starts over."""
        key = compiled_key([a.data for a in args], baked)
        graphs = segment.compiled.setdefault(key, [])
        graphs[:] = [g for g in graphs if g.versions == versions]
        entry = next((g for g in graphs if g.fits(traced)), None)
        if entry is not None:
            return entry
        try:
            stored = self._store_key(segment, key)
            entry = self.store.find(stored, traced, versions, self._device, self.library_weights())
            if entry is None:
                if self.budget.exhausted:
                    raise _BudgetSpentError
                with self.budget.counting():
                    entry = self._compile(segment, args, baked, versions, stored)
        except NotTraceableError as e:
            index = e.step_index
            if index is None or index in self.eager_steps:  # not one step's: the segment's
                self._run_eagerly(range(segment.start, segment.stop), str(e))
            else:
                self._run_eagerly(range(index, index + 1), str(e))
            raise _ReplanError from e
        except (BadInputError, _BudgetSpentError):  # the caller's inputs, or no budget left
            raise
        except Exception as e:  # inductor's own failure
            self._split(segment, e)
            raise _ReplanError from e
        finally:
            self._show_progress()
        graphs.append(entry)
        return entry

    def _show_progress(self) -> None:
        """The segments compiled so far, of those planned, and the budget spent."""
        planned = [s for s in self.segments if isinstance(s, Segment)]
        done = sum(1 for s in planned if any(s.compiled.values()))
        self._progress.show(done, len(planned), self.budget)

    def _versions(self) -> tuple[Any, ...]:
        """Each constant's identity, then each one's version counter."""
        datas = list(map(_DATA, self.constants.values()))
        return (*map(id, datas), *map(_VERSION, datas))

    def library_weights(self) -> LibraryWeights:
        """What a compiled graph loaded now reads: the constants by name, and what the graphs
        loaded before read (two graphs of one model, as a prompt's and a decode step's, fold
        the same weights alike: a dequantized 4-bit weight is then held once)."""
        named = {
            n: d
            for n, d in zip(self.constants, map(_DATA, self.constants.values()), strict=True)
            if isinstance(d, torch.Tensor)
        }
        shared = [t for g in self._graphs() for t in getattr(g.run, "constants", {}).values()]
        return LibraryWeights(named, shared)

    @property
    def _device(self) -> torch.device:
        return self.program.device.torch_device

    def _store_key(self, segment: Segment, key: tuple[Any, ...]) -> str:
        """The on-disk key of a segment's graphs for inputs of ``key`` (see
        :mod:`sonnx.runtime.store`)."""
        reads = segment_reads(self.program, segment.start, segment.stop)
        weights = [
            (n, self._weight_digests.of(self.constants[n].data))
            for n in reads
            if n in self.constants
        ]
        declared = [self.declared_shapes.get(n) for n in segment.inputs]
        return digest(
            [self.identity, segment.start, segment.stop, self.dynamic, key, declared, weights]
        )

    def _split(self, segment: Segment, error: Exception) -> None:
        """After inductor failed on ``segment``: it is split in halves, each compiled on its
        own; a half that fails too (or a one-step segment) runs eagerly. Then the split's
        other halves go: the steps before and after the eager ones are segments again."""
        bounds = (segment.start, segment.stop)
        if segment.stop - segment.start > 1 and bounds not in self._halves:
            middle = (segment.start + segment.stop) // 2
            self._splits.add(middle)
            self._halves.update({(segment.start, middle), (middle, segment.stop)})
            self._replan()
            return
        eager = [i for i in self.eager_steps if not segment.start <= i < segment.stop]
        before = max((i for i in eager if i < segment.start), default=-1)
        after = min((i for i in eager if i >= segment.stop), default=len(self.program.steps))
        self._splits = {i for i in self._splits if not before < i <= after}
        reason = f"inductor could not compile it: {first_line(error)}"
        self._run_eagerly(range(segment.start, segment.stop), reason)

    def _drop(self, segment: Segment, reason: str) -> None:
        """``segment``'s graphs are wrong: they go (from the store too), and its steps run
        eagerly from now on."""
        for graph in (g for graphs in segment.compiled.values() for g in graphs):
            if graph.library is not None:
                shutil.rmtree(graph.library.parent, ignore_errors=True)
        segment.compiled.clear()
        segment.recent.clear()
        self._run_eagerly(range(segment.start, segment.stop), reason)

    def _run_eagerly(self, indices: range, reason: str) -> None:
        """Steps ``indices`` run eagerly from now on, for ``reason``; remembered in the store."""
        for index in indices:
            self.eager_steps[index] = reason
        self._replan()
        steps = self.program.steps
        first, last = steps[indices.start].info.name, steps[indices.stop - 1].info.name
        if len(indices) == 1:
            self._warn(f"node {first!r} ({reason})")
        else:
            span = f"steps {indices.start}-{indices.stop - 1} ({first!r} .. {last!r}"
            self._warn(f"{span}; {reason})")
        if self.identity:
            self.store.save_plan(self.identity, self.eager_steps)

    def _warn(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(
                f"graph mode runs {what} eagerly; the rest stays compiled, with the same results",
                GraphModeWarning,
                stacklevel=4,
            )

    def _compile(
        self,
        segment: Segment,
        args: list[Tensor],
        baked: list[bool],
        versions: tuple[Any, ...],
        stored: str,
    ) -> CompiledGraph:
        weights = self.library_weights()
        traced = [n for n, bake in zip(segment.inputs, baked, strict=True) if not bake]
        build = segment_builder(
            self.program,
            segment,
            dict(zip(segment.inputs, args, strict=True)),
            traced,
            [self.declared_shapes.get(n) for n in traced],
            self.dynamic,
            weights.named,
        )
        keep = versions == self._loaded_versions
        return self.store.compile(stored, build, versions, self._device, keep, weights)
