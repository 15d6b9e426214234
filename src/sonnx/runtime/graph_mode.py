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
segment between eager steps that only moves elements, or whose light steps run in under a
millisecond eagerly (timed at its first run), is not compiled: its graph would hardly repay the
compile (:mod:`sonnx.runtime.segment_costs`); nor is a graph compiled for an empty input
computed before a segment (a count of 0). Each step found to run eagerly is warned about once,
with the node's name, and stored with the model's compiled graphs.
An ``If`` whose condition comes from a one-value integer input (Silero-VAD's sample rate) is
no such step: that input is baked into the graph like a shape value, and each of its values
gets a graph holding the branch it takes.

Graph mode is never silently wrong and never ends a run in the compiler's own error:

* each compiled graph's first run, and its first run at other input sizes, is compared with
  the eager steps on the same inputs (:mod:`sonnx.runtime.graph_checks`;
  :class:`~sonnx.runtime.compiled_graphs.Checks`; ``prepare(..., verify=False)`` skips it); a
  graph that differs is dropped, deleted from the store, and its steps run eagerly from then
  on;
* a compiled graph that raises while running is dropped the same way, once the eager steps
  have computed the same inputs without error (an error of the inputs themselves is raised
  as the eager steps raise it, and the graph is kept);
* a segment inductor fails on is split in halves once; a half that fails too runs eagerly
  (a search down to the one failing step cost a full compile per halving: minutes on a large
  model);
* compiling stops when the model's compile budget is spent
  (:mod:`sonnx.runtime.compile_budget`): what is not compiled yet runs eagerly.

Each case is warned about once (:class:`~sonnx.errors.GraphModeWarning`), naming the steps and
why; :meth:`GraphRunner.parts` and ``SingaRep.explain`` list them, and each run reports the path
it took (:class:`~sonnx.runtime.run_paths.RunTaken`).

Runs from many threads share one runner: what it decided is one immutable
:class:`~sonnx.runtime.graph_plan_state.GraphPlan`, read once per run and replaced whole, under
a lock, on a replan (see :mod:`sonnx.runtime.graph_plan_state`); one thread compiles a graph
while the others run its steps eagerly (:mod:`sonnx.runtime.compile_claims`).
"""

from __future__ import annotations

import operator
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from functools import cached_property
from typing import Any

import torch

from sonnx.caller_warnings import warn_at_caller
from sonnx.engine.tracing import NotTraceableError
from sonnx.errors import BadInputError, GraphModeWarning
from sonnx.runtime import segment_costs as costs
from sonnx.runtime.compile_budget import DEFAULT_COMPILE_BUDGET, CompileBudget, CompileProgress
from sonnx.runtime.compile_claims import CompileClaims
from sonnx.runtime.compiled_graphs import CompiledGraph, CompiledRunError, first_line
from sonnx.runtime.graph_checks import segment_difference
from sonnx.runtime.graph_keys import (
    bake_tests,
    baked_values,
    compiled_key,
    signature,
)
from sonnx.runtime.graph_plan_state import Bounds, Choice, GraphPlan, bounds_of
from sonnx.runtime.library_constants import LibraryWeights
from sonnx.runtime.program import GraphProgram
from sonnx.runtime.run_paths import WHOLE_GRAPH_RUN, Path, RunTaken
from sonnx.runtime.segment_build import segment_builder
from sonnx.runtime.segment_identity import SharedGraphs, segment_identity
from sonnx.runtime.segments import RunPart, Segment, describe_fallback, eager_by_design, stops_alike
from sonnx.runtime.store import GraphStore, WeightDigests, digest, record_checks
from sonnx.tensor import Tensor, computed_tensor

_DATA = operator.attrgetter("data")
_VERSION = operator.attrgetter("_version")


class _ReplanError(Exception):
    """The segments changed (a step turned out not to be traceable, or inductor failed on a
    segment, which is split): the run starts over."""


class _BudgetSpentError(Exception):
    """A segment needs a graph compiled, and the compile budget is spent."""


class _CompilingElsewhereError(Exception):
    """Another thread is compiling the segment's graph: it runs eagerly this time."""


class _EmptyInputError(Exception):
    """A segment needs a graph compiled for an empty computed input (see
    :func:`~sonnx.runtime.segment_costs.empty_computed_input`)."""


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

    ``verify`` compares each graph's first run, and its first at other input sizes, with the
    eager steps; ``compile_budget`` bounds the seconds spent compiling (None: no bound).
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
        #: Graphs by store key: a segment of the same steps as another shares its graph.
        self._shared = SharedGraphs()
        self._claims = CompileClaims()
        #: The constants as loaded: graphs of these are stored; graphs of weights changed
        #: in this process (a training step, ``load_states``) are kept in memory only, so a
        #: training loop that evaluates in graph mode does not fill the disk.
        self._loaded_versions = self._versions()
        #: Trace segments with symbolic sizes: one graph for every shape its guards admit
        #: (see :mod:`sonnx.runtime.symbolic_graphs`); a segment torch cannot trace or compile
        #: that way is compiled for each input shape. False compiles every segment per shape.
        self.dynamic = True
        self._warned: set[str] = set()
        eager = eager_by_design(program)
        if identity:
            for index, why in self.store.load_plan(identity).items():
                if index < len(program.steps) and index not in eager:
                    eager[index] = why
                    self._warn(f"node {program.steps[index].info.name!r} ({why})")
        #: Held only to swap :attr:`plan` (see :mod:`sonnx.runtime.graph_plan_state`).
        self._lock = threading.Lock()
        self._plan = GraphPlan.first(program, eager, self._loaded_versions)

    @cached_property
    def _bake_tests(self) -> Callable[[str], Callable[[torch.Tensor], bool] | None]:
        return bake_tests(self.program)

    @property
    def plan(self) -> GraphPlan:
        """What this runner has decided so far, as one immutable snapshot: a run reads it
        once; a replan replaces it."""
        return self._plan

    def _update(self, change: Callable[[GraphPlan], GraphPlan]) -> GraphPlan:
        """Swap in ``change`` of the current plan (not of a run's snapshot, so that changes
        made by other threads meanwhile are kept); the new plan."""
        with self._lock:
            self._plan = change(self._plan)
            return self._plan

    @property
    def eager_steps(self) -> dict[int, str]:
        """Why the steps that run eagerly do, by step index (a copy)."""
        return dict(self._plan.eager_steps)

    @property
    def fallback(self) -> str | None:
        """What runs eagerly and why (None: the whole graph is compiled)."""
        plan = self._plan
        return describe_fallback(self._parts(plan), plan.eager_steps)

    def parts(self) -> list[RunPart]:
        """What a run does, part by part: each compiled segment and each step run eagerly,
        as of the runs so far (before the first, no segment is compiled yet).

        :returns: the parts, in the order they run.
        """
        return self._parts(self._plan)

    def _parts(self, plan: GraphPlan) -> list[RunPart]:
        names = [step.info.name for step in self.program.steps]
        return plan.parts(names, self.budget.describe())

    @property
    def compile_count(self) -> int:
        """How many graphs this runner compiled (for each segment, one per set of shapes its
        guards cannot cover with one graph)."""
        return sum(not g.loaded for g in self._plan.all_graphs())

    @property
    def loaded_count(self) -> int:
        """How many graphs this runner loaded from the store instead of compiling them."""
        return sum(g.loaded for g in self._plan.all_graphs())

    @property
    def segments(self) -> list[Segment | int]:
        """Compiled segments, and the indices of the steps run eagerly between them."""
        return list(self._plan.segments)

    def run(self, inputs: dict[str, Tensor]) -> tuple[list[torch.Tensor] | None, RunTaken]:
        """The outputs' values of a compiled run, with the path it took; None (and why, as a
        path of the program) when an input or an output is not a tensor.

        :param inputs: the graph inputs by name, bound.
        :returns: the outputs' values or None, and the path the run took.
        """
        if not all(isinstance(inputs.get(n), Tensor) for n in self.input_names):
            why = "graph mode runs tensors only, and an input is not one (a sequence, map or None)"
            return None, RunTaken(Path.PROGRAM, why=why)
        versions = self.current_versions()
        plan = self._plan
        if plan.whole is not None:  # the common case, without the general path's bookkeeping
            whole, positions = plan.whole
            try:
                datas = [inputs[n].data for n in whole.inputs]
                outs = self._chosen_outputs(plan, whole, datas)
            except CompiledRunError:  # the general path runs it again, and eagerly
                outs = None
            if outs is not None:
                return [outs[i] for i in positions], WHOLE_GRAPH_RUN
        # Each new plan runs another step eagerly, or splits a segment further while the
        # search for one goes on: a bounded number of plans.
        for _ in range((len(self.program.steps) + 1) ** 2):
            plan = self._plan  # this attempt's one snapshot
            values: dict[str, Any] = dict(self.constants)
            values.update(inputs)
            compiled, eager = 0, Counter[str]()  # segments compiled, eager steps by why
            try:
                for part in plan.segments:
                    if isinstance(part, int):
                        self._execute(values, part, part + 1)
                        eager[plan.eager_steps[part]] += 1
                        continue
                    why = self._run_segment(plan, part, values, versions)
                    if why is None:
                        compiled += 1
                    else:
                        eager[why] += part.stop - part.start
            except _ReplanError:
                continue
            outs = [values[n] for n in self.output_names]
            if not all(isinstance(o, Tensor) for o in outs):
                why = "graph mode returns tensors only, and an output is not one"
                return None, RunTaken(Path.PROGRAM, why=why)
            taken = RunTaken(Path.COMPILED, compiled, tuple(eager.items()))
            return [o.data for o in outs], taken
        raise RuntimeError("graph mode could not settle which steps run eagerly")

    def current_versions(self) -> tuple[Any, ...]:
        """The constants' identities and versions now; the choices made under others (a
        weight changed) are dropped.

        :returns: the versions.
        """
        versions = self._versions()
        if versions != self._plan.versions:
            self._update(lambda plan: plan.for_versions(versions))
        return versions

    @property
    def whole(self) -> tuple[Segment, tuple[int, ...]] | None:
        """The segment computing the whole graph when it is the only part (no step runs
        eagerly), with the positions of the graph's outputs among its outputs; None before
        the first run."""
        return self._plan.whole

    def _chosen_outputs(
        self, plan: GraphPlan, segment: Segment, datas: list[torch.Tensor]
    ) -> list[Any] | None:
        """The segment's outputs from the graph chosen before for inputs of these layouts and
        baked values; None if none was, or if this run is to be checked (the general path
        then chooses one, and checks it)."""
        found = plan.chosen_graph(segment, datas)
        if found is None or not found[0].traced:
            return None
        traced = [datas[i] for i in found[0].traced]
        if self.verify and found[1].checks.wanted(traced):
            return None
        return found[1].compute(*traced)

    def _run_segment(
        self, plan: GraphPlan, segment: Segment, values: dict[str, Any], versions: tuple[Any, ...]
    ) -> str | None:
        """Run ``segment`` of ``plan`` into ``values``, compiled where it can be; why it ran
        eagerly instead (None: a compiled graph computed it)."""
        if segment.runs_eagerly is not None:
            self._execute(values, segment.start, segment.stop)
            return segment.runs_eagerly
        args = [values.get(n) for n in segment.inputs]
        bounds = bounds_of(segment)
        if bounds in plan.over_budget:
            self._execute(values, segment.start, segment.stop)
            return self.budget.describe()
        if not all(isinstance(a, Tensor) for a in args):
            self._execute(values, segment.start, segment.stop)
            return "an input of the segment is no tensor"
        datas = [a.data for a in args]
        cheap = plan.cheap.get(bounds)
        if cheap is not None and cheap.covers(datas):
            self._execute(values, segment.start, segment.stop)
            return cheap.reason
        try:
            outs = self._chosen_outputs(plan, segment, datas)
            why = None
            if outs is None:
                outs, why = self._choose(plan, segment, args, datas, versions, values)
        except CompiledRunError as e:
            # The eager steps raise sonnx's own error where the inputs are at fault (and the
            # graph stays); where they compute, the graph is at fault.
            self._execute(values, segment.start, segment.stop)
            why = f"its compiled graph raised: {e}"
            self._drop(segment, why)
            return why
        except _EmptyInputError:
            self._execute(values, segment.start, segment.stop)
            return costs.EMPTY_INPUT
        except _CompilingElsewhereError:
            self._execute(values, segment.start, segment.stop)
            return "its graph is being compiled by another thread"
        except _BudgetSpentError:
            self._update(lambda current: current.with_over_budget(bounds))
            self._warn(
                f"steps {segment.start}-{segment.stop - 1} and every other part not compiled "
                f"yet ({self.budget.describe()}; prepare(..., compile_budget=None) lifts it)"
            )
            self._execute(values, segment.start, segment.stop)
            return self.budget.describe()
        if outs is None:
            self._execute(values, segment.start, segment.stop)
            return why
        values.update(
            (n, computed_tensor(t, n)) for n, t in zip(segment.outputs, outs, strict=True)
        )
        return why

    def _choose(
        self,
        plan: GraphPlan,
        segment: Segment,
        args: list[Tensor],
        datas: list[torch.Tensor],
        versions: tuple[Any, ...],
        values: dict[str, Any],
    ) -> tuple[list[Any] | None, str | None]:
        """The segment's outputs from the graph for these inputs, chosen now (and remembered),
        with why they were computed eagerly (None: by the graph). No outputs when the segment
        has nothing to compile (its steps read only constants and shape values). A segment
        timed cheap eagerly is not compiled (see :mod:`sonnx.runtime.segment_costs`). A graph's
        run is checked against the eager steps' on ``values`` where its ``checks`` want it."""
        # A shape value (fixed by the input shapes) computed outside the segment is baked in,
        # and so is a one-value graph input an If's condition is computed from (a sample rate):
        # the graph then holds the branch taken, one graph per value. Other graph inputs (token
        # ids are small host integers too) or value-dependent results (NonZero's indices) never
        # are: a graph per value would compile at every new input.
        bounds = bounds_of(segment)
        layouts = signature(datas)
        choice = plan.choice(bounds, layouts)
        if choice is None:
            tests = [self._bake_tests(n) for n in segment.inputs]
            bake = [test is not None and test(d) for test, d in zip(tests, datas, strict=True)]
            choice = Choice(
                tuple(i for i, b in enumerate(bake) if b),
                tuple(i for i, b in enumerate(bake) if not b),
            )
        if not choice.traced:  # the steps read only constants and shape values
            self._update(lambda current: current.with_choice(bounds, layouts, choice, versions))
            return None, "it reads only constants and shape values"
        trial = None
        if segment.timed and not any(plan.graphs.get(bounds, {}).values()):
            trial = costs.timed_eager_run(self._execute, segment, values)
            if trial.cheap:
                cheap = costs.CheapSegment(trial.seconds, costs.elements(datas))
                self._update(lambda current: current.with_cheap(bounds, cheap))
                return [trial.values[n].data for n in segment.outputs], cheap.reason
        baked = [i in choice.baked for i in range(len(datas))]
        traced = [datas[i] for i in choice.traced]
        with torch.no_grad():
            entry = self._graph_for(plan, segment, args, baked, traced, versions)
        chosen = choice.with_graph(baked_values(datas, choice.baked), entry)
        self._update(lambda current: current.with_choice(bounds, layouts, chosen, versions))
        # The compiled library records no autograd graph, so it needs no no_grad around it.
        outs = entry.compute(*traced)
        if not self.verify or not entry.checks.wanted(traced):
            return outs, None
        if trial is None:  # the eager steps' run it is checked against
            trial = costs.EagerTrial(0.0, dict(values))
            self._execute(trial.values, segment.start, segment.stop, set(segment.outputs))
        eager = [trial.values[n].data for n in segment.outputs]
        difference = segment_difference(self.program, segment, outs, eager)
        if difference is None:
            entry.checks.passed(traced)
            record_checks(entry)
            return outs, None
        run = "first run" if entry.checks.first is None else "first run at other input sizes"
        why = f"its compiled graph's {run} differed from the eager steps: {difference}"
        self._drop(segment, why)
        return eager, why

    def _execute(
        self, values: dict[str, Any], start: int, stop: int, keep: set[str] | None = None
    ) -> None:
        """Steps ``[start, stop)`` run eagerly, recording no autograd graph (with ``keep``,
        freeing each other value after its last use; without, by the range's plan)."""
        with torch.no_grad():
            if keep is None:
                self.program.runner.execute_range(values, start, stop)
            else:
                self.program.runner.execute(values, start=start, stop=stop, keep=keep)

    def _graph_for(
        self,
        plan: GraphPlan,
        segment: Segment,
        args: list[Tensor],
        baked: list[bool],
        traced: list[torch.Tensor],
        versions: tuple[Any, ...],
    ) -> CompiledGraph:
        """The segment's graph whose guards admit ``traced``: compiled before, loaded from the
        store or compiled now (outside the lock: only the new plan's swap holds it). When
        inductor cannot compile the segment, it is split (see :meth:`_split`) and the run
        starts over."""
        bounds = bounds_of(segment)
        key = compiled_key([a.data for a in args], baked)
        graphs = [g for g in plan.graphs_of(bounds, key) if g.versions == versions]
        entry = next((g for g in graphs if g.fits(traced)), None)
        if entry is not None:
            return entry
        names = [n for n, bake in zip(segment.inputs, baked, strict=True) if not bake]
        if costs.empty_computed_input(names, traced, self.input_names):
            raise _EmptyInputError
        try:
            stored = self._store_key(segment, key)
            entry = self._shared.find(stored, traced, versions)
            if entry is None:
                weights = self.library_weights()
                entry = self.store.find(stored, traced, versions, self._device, weights)
                if entry is None:
                    entry = self._compile(segment, args, baked, traced, versions, stored)
                else:
                    self._shared.add(stored, entry)
        except NotTraceableError as e:
            index = e.step_index
            if index is None or index in plan.eager_steps:  # not one step's: the segment's
                self._run_eagerly(range(*bounds), str(e))
            else:  # and the steps a trace would stop at alike (NonZero's count)
                for i in stops_alike(self.program, index, plan.eager_steps):
                    self._run_eagerly(range(i, i + 1), str(e))
            raise _ReplanError from e
        except (BadInputError, _BudgetSpentError, _CompilingElsewhereError):
            raise  # the caller's inputs, no budget left, or another thread compiling
        except Exception as e:  # inductor's own failure
            self._split(bounds, e)
            raise _ReplanError from e
        finally:
            # The segments compiled so far, of those planned, and the budget spent.
            self._progress.show(*self._plan.compiled_of_planned(), self.budget)
        self._update(lambda current: current.with_graph(bounds, key, entry))
        return entry

    def _versions(self) -> tuple[Any, ...]:
        """Each constant's identity, then each one's version counter."""
        datas = list(map(_DATA, self.constants.values()))
        return (*map(id, datas), *map(_VERSION, datas))

    def library_weights(self) -> LibraryWeights:
        """What a compiled graph loaded now reads (see :meth:`LibraryWeights.of
        <sonnx.runtime.library_constants.LibraryWeights.of>`).

        :returns: the weights.
        """
        datas = dict(zip(self.constants, map(_DATA, self.constants.values()), strict=True))
        return LibraryWeights.of(datas, self._plan.all_graphs())

    @property
    def _device(self) -> torch.device:
        return self.program.device.torch_device

    def _store_key(self, segment: Segment, key: tuple[Any, ...]) -> str:
        """The key of a segment's graphs for inputs of ``key``, on disk (see
        :mod:`sonnx.runtime.store`) and among :attr:`_shared`."""
        steps = segment_identity(self.program, segment, self._weight_digests.of)
        declared = [self.declared_shapes.get(n) for n in segment.inputs]
        return digest([self.identity, steps, self.dynamic, key, declared])

    def _split(self, bounds: Bounds, error: Exception) -> None:
        """After inductor failed on the segment ``bounds``: it is split in halves, each
        compiled on its own; a half that fails too (or a one-step segment) runs eagerly (see
        :meth:`GraphPlan.split <sonnx.runtime.graph_plan_state.GraphPlan.split>`)."""
        reason = f"inductor could not compile it: {first_line(error)}"
        plan = self._update(lambda current: current.split(self.program, bounds, reason))
        if plan.eager_steps.get(bounds[0]) == reason:
            self._ran_eagerly(plan, range(*bounds), reason)

    def _drop(self, segment: Segment, reason: str) -> None:
        """``segment``'s graphs are wrong: they go (from the store too), and its steps run
        eagerly from now on."""
        bounds = bounds_of(segment)
        with self._lock:
            gone = list(self._plan.all_graphs_of(bounds))
            self._plan = new = self._plan.dropped(self.program, bounds, reason)
        for graph in gone:
            if graph.library is not None:
                shutil.rmtree(graph.library.parent, ignore_errors=True)
        self._ran_eagerly(new, range(*bounds), reason)

    def _run_eagerly(self, indices: range, reason: str) -> None:
        """Steps ``indices`` run eagerly from now on, for ``reason``."""
        plan = self._update(lambda current: current.with_eager(self.program, indices, reason))
        self._ran_eagerly(plan, indices, reason)

    def _ran_eagerly(self, plan: GraphPlan, indices: range, reason: str) -> None:
        """Steps ``indices`` run eagerly in ``plan``, for ``reason``: warned about once, and
        remembered in the store."""
        steps = self.program.steps
        first, last = steps[indices.start].info.name, steps[indices.stop - 1].info.name
        if len(indices) == 1:
            self._warn(f"node {first!r} ({reason})")
        else:
            span = f"steps {indices.start}-{indices.stop - 1} ({first!r} .. {last!r}"
            self._warn(f"{span}; {reason})")
        if self.identity:  # outside the lock: a plan saved stale is found again by tracing
            self.store.save_plan(self.identity, dict(self._plan.eager_steps))

    def _warn(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warn_at_caller(
                f"graph mode runs {what} eagerly; the rest stays compiled, with the same results",
                GraphModeWarning,
            )

    def _compile(
        self,
        segment: Segment,
        args: list[Tensor],
        baked: list[bool],
        traced: list[torch.Tensor],
        versions: tuple[Any, ...],
        stored: str,
    ) -> CompiledGraph:
        """The segment's graph compiled now, by one thread: another thread finding it being
        compiled runs the segment eagerly (see :mod:`sonnx.runtime.compile_claims`)."""
        with self._claims.claim(stored) as mine:
            if not mine:
                raise _CompilingElsewhereError
            entry = self._shared.find(stored, traced, versions)  # compiled meanwhile
            if entry is not None:
                return entry
            if self.budget.exhausted:
                raise _BudgetSpentError
            weights = self.library_weights()
            names = [n for n, bake in zip(segment.inputs, baked, strict=True) if not bake]
            build = segment_builder(
                self.program,
                segment,
                dict(zip(segment.inputs, args, strict=True)),
                names,
                [self.declared_shapes.get(n) for n in names],
                self.dynamic,
                weights.named,
            )
            keep = versions == self._loaded_versions
            with self.budget.counting():
                entry = self.store.compile(stored, build, versions, self._device, keep, weights)
            self._shared.add(stored, entry)  # before the claim goes
            return entry
