"""What runs a program, and what it keeps between runs: the interpreter, the plans and caches.

A :class:`~sonnx.runtime.program.GraphProgram` is the IR: its steps, their order as the passes
rewrote it, and one index. Its :class:`ProgramRunner` runs it and holds what runs keep:
the schedules of each kind of run (:mod:`sonnx.runtime.schedule`), the generated plans of
whole runs and of graph mode's eager ranges (:mod:`sonnx.runtime.plan`), the results of
folded steps (:mod:`sonnx.runtime.folding`) and the shape values found per input signature
(:mod:`sonnx.runtime.shape_values`).

Both executors run a node through :meth:`ProgramRunner.run_node` and a fused step through
:meth:`ProgramRunner.run_fused`: the step loop here (the interpreter: first runs, cuts,
``all_outputs``, ``SONNX_DEBUG``), and the generated plan, whose lines call them for every step
that is not a plain operator call on tensors. What a step is comes from its kind
(:class:`~sonnx.runtime.steps.StepKind`), never from a table beside the program.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

from sonnx.device import default_device_for_run
from sonnx.engine.operator import is_training
from sonnx.engine.tracing import NotTraceableError, deferred_checks, value_checks
from sonnx.errors import BadInputError
from sonnx.runtime.folding import FoldedResults
from sonnx.runtime.plan import Plan, build_plan
from sonnx.runtime.run_paths import debugging, step_loop_reason, trace_step
from sonnx.runtime.schedule import Schedule, build_schedule
from sonnx.runtime.shape_values import (
    RangeShapeValues,
    ShapeValueCache,
    input_signature,
    shape_value_sources,
)
from sonnx.runtime.steps import (
    FusedStep,
    Step,
    StepKind,
    named,
    output_values,
    plain,
    plain_all,
)
from sonnx.runtime.subgraphs import Subgraph
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = ["ProgramRunner"]

#: Graph mode's eager range of steps: (start, stop).
Bounds = tuple[int, int]


class ProgramRunner:
    """Runs one program, keeping its schedules, plans, folded results and shape values.

    :param program: the program it runs.
    """

    def __init__(self, program: GraphProgram) -> None:
        self.program = program
        #: The plans of whole runs, by the names they keep.
        self.plans: dict[frozenset[str], Plan] = {}
        #: The plans of graph mode's eager ranges, by (start, stop, keep).
        self.range_plans: dict[tuple[int, int, frozenset[str]], Plan] = {}
        #: False once a plan failed where the step loop did not (a bug in the plan; the step
        #: loop then runs every time).
        self.runs_plans = True
        self._schedules: dict[tuple[Any, ...], Schedule] = {}
        self._folded = FoldedResults()
        self._shape_values = ShapeValueCache()
        self._range_shape_values = RangeShapeValues()

    def forget_plans(self) -> None:
        """Drop the schedules and plans: a pass rewrote the program's order (QAT's pairs)."""
        self._schedules = {}
        self.plans = {}
        self.range_plans = {}

    # ---- running -------------------------------------------------------------------------
    def _running(self) -> tuple[AbstractContextManager[Any], ...]:
        """What every run of steps runs in: gradients as training says, deferred value checks,
        and the graph's device as the default (a node with no tensor input, RandomUniform or a
        Loop without trip count and condition, creates its output there). Plain context
        managers, not a generator's: this runs at every run of every (sub)graph."""
        grad = torch.set_grad_enabled(is_training())
        return default_device_for_run(self.program.device), deferred_checks(), grad

    def execute(
        self,
        values: dict[str, Tensor],
        stop: int | None = None,
        computed: dict[str, Tensor] | None = None,
        keep: set[str] | frozenset[str] | None = None,
        start: int = 0,
    ) -> dict[str, Tensor]:
        """Run steps ``[start:stop]``, adding each named output to ``values`` (and
        ``computed``); ``values`` must hold what those steps read.

        With ``keep``, a value is dropped from ``values`` once no later step reads it unless its
        name is in ``keep``: an activation then lives no longer than torch needs it (for
        backward, torch holds what it saved), not until the end of the run.

        :param values: the run's values so far.
        :param stop: the step after the last (None: to the end).
        :param computed: where to add every value computed too (every value is then kept).
        :param keep: the names to keep (None: every value).
        :param start: the first step.
        :returns: ``values``.
        """
        device, checks, grad = self._running()
        with device, checks, grad:
            why = self.step_loop_reason(start, stop, computed, keep)
            if why is None and self._run_plan(values, frozenset(keep or ())):
                return values
            return self._step_loop(values, start, stop, computed, keep)

    def execute_range(self, values: dict[str, Tensor], start: int, stop: int) -> None:
        """Run steps ``[start:stop)`` of a graph-mode run eagerly (outside a trace), adding
        to ``values`` what later steps or the graph's outputs read: by the range's generated
        plan once the range's first run of this input signature found its shape values, else
        (and with ``SONNX_DEBUG``) by the step loop, which keeps every value.

        :param values: the run's values so far, those the steps read among them.
        :param start: the first step.
        :param stop: the step after the last.
        """
        device, checks, grad = self._running()
        with device, checks, grad:
            if self.step_loop_reason(start, stop, ranged=True) is None:
                keep = self.program.index.read_from(stop)
                if self._run_plan(values, keep, (start, stop)):
                    return
            self._step_loop(values, start, stop, None, None, (start, stop))

    def step_loop_reason(
        self,
        start: int = 0,
        stop: int | None = None,
        computed: dict[str, Tensor] | None = None,
        keep: set[str] | frozenset[str] | None = None,
        ranged: bool = False,
    ) -> str | None:
        """Why a run of steps ``[start:stop]`` goes through the step loop (None: through the
        generated plan, once the input signature's shape values are known); ``ranged``: an
        eager range of a graph-mode run (:meth:`execute_range`), which keeps what it must.

        :param start: the first step.
        :param stop: the step after the last (None: to the end).
        :param computed: where the run adds every value (None: it does not).
        :param keep: the names the run keeps (None: every value).
        :param ranged: whether it is graph mode's eager range.
        :returns: the reason, or None.
        """
        return step_loop_reason(
            whole=ranged or (start == 0 and (stop is None or stop >= len(self.program.steps))),
            every_value=computed is not None,
            keeps=ranged or keep is not None,
            value_checks=value_checks(),
            plans_work=self.runs_plans,
        )

    def knows_shape_values(self, values: dict[str, Any]) -> bool:
        """Whether an earlier run found the shape values of ``values``' input signature (then
        the generated plan can run).

        :param values: a run's inputs by name.
        :returns: whether they are known.
        """
        signature = input_signature(values, self.program.input_names)
        return self._known_shape_values(signature) is not None

    def schedule(
        self,
        start: int = 0,
        stop: int | None = None,
        keep: set[str] | frozenset[str] | None = None,
        every_value: bool = False,
        prune: bool = False,
    ) -> Schedule:
        """The schedule of a run of steps ``[start:stop)`` keeping ``keep`` (see
        :mod:`sonnx.runtime.schedule`), built once for each kind of run and kept.

        :param start: the first step.
        :param stop: the step after the last (None: to the end).
        :param keep: the names kept (None: every value).
        :param every_value: whether the run wants every value (no group fused).
        :param prune: whether dead pure steps are left out (a plan's runs).
        :returns: the schedule.
        """
        steps = len(self.program.steps)
        stop = steps if stop is None else min(stop, steps)
        frozen = None if keep is None else frozenset(keep)
        key = (start, stop, frozen, every_value, prune)
        found = self._schedules.get(key)
        if found is None:
            found = build_schedule(self.program, start, stop, frozen, every_value, prune)
            self._schedules[key] = found
        return found

    # ---- shape values --------------------------------------------------------------------
    @cached_property
    def _shape_value_sources(self) -> tuple[str, ...]:
        program = self.program
        shape_steps = program.shape_value_steps
        producer = program.index.producer
        return shape_value_sources(program.steps, shape_steps, program.constants, producer)

    def _known_shape_values(
        self, signature: tuple[Any, ...] | None, bounds: Bounds | None = None
    ) -> dict[str, Any] | None:
        """The shape values kept for ``signature`` (of the eager range ``bounds``, if given:
        none to find in a range without shape-value steps)."""
        if signature is None:
            return None
        found = self._shape_cache(bounds)
        if found is None:
            return {}
        return found.get(signature, self.program.constants, self._shape_value_sources)

    def _shape_cache(self, bounds: Bounds | None) -> ShapeValueCache | None:
        if bounds is None:
            return self._shape_values
        return self._range_shape_values.cache(bounds, self.program.shape_value_steps)

    # ---- the two executors ---------------------------------------------------------------
    def _run_plan(
        self, values: dict[str, Tensor], keep: frozenset[str], bounds: Bounds | None = None
    ) -> bool:
        """Run the whole graph (or graph mode's eager range ``bounds``) by its plan, if the
        input signature's shape values are known (False: the step loop must run). When the
        plan raises, the step loop runs the steps again: it names the node that fails, and if
        it does not fail, plans are not used again for this graph."""
        signature = input_signature(values, self.program.input_names)
        known = self._known_shape_values(signature, bounds)
        if not self.runs_plans or known is None:
            return False
        table: dict[Any, Plan] = self.plans if bounds is None else self.range_plans
        key = keep if bounds is None else (*bounds, keep)
        plan = table.get(key)
        if plan is None:
            plan = table[key] = build_plan(self.program, keep, values, bounds)
        try:
            plan(values, known)
            return True
        except Exception:
            pass  # the step loop reports it, naming the node
        if bounds is None:
            self._step_loop(values, 0, None, None, set(keep))
        else:  # as an eager range runs without a plan: keeping every value
            self._step_loop(values, *bounds, None, None, bounds)
        self.runs_plans = False
        self.forget_plans()
        return True

    def _step_loop(
        self,
        values: dict[str, Tensor],
        start: int,
        stop: int | None,
        computed: dict[str, Tensor] | None,
        keep: set[str] | frozenset[str] | None,
        bounds: Bounds | None = None,
    ) -> dict[str, Tensor]:
        """The interpreter; ``bounds``: graph mode's eager range (its own shape values)."""
        program, debug = self.program, debugging()
        signature = input_signature(values, program.input_names) if value_checks() else None
        known = None if debug else self._known_shape_values(signature, bounds)  # trace all
        whole = bounds is not None or (start == 0 and (stop is None or stop >= len(program.steps)))
        fresh: dict[str, Any] | None = {} if signature is not None and known is None else None
        # SONNX_DEBUG traces every node, so fused groups run node by node
        schedule = self.schedule(start, stop, keep, every_value=computed is not None or debug)
        for entry in schedule.steps:
            step = entry.step
            if known is not None and step.kind is StepKind.SHAPE_VALUE:
                # Shape values of this input signature, computed by an earlier run.
                for name in step.outputs:
                    if name in known:
                        values[name] = known[name]
                        if computed is not None:
                            computed[name] = known[name]
                for name in entry.frees:
                    values.pop(name, None)
                continue
            started = time.perf_counter() if debug else 0.0
            if type(step) is FusedStep:
                args = [values[n] for n in step.inputs]
                result = plain_all(self.run_fused(step, args))
                _store(step.made(program.steps), result, values, computed)
                step = program.steps[step.index]  # what the trace names
            else:
                args = _arguments(step, values)
                result = self.run_node(entry.index, step, args, values)
                _store(step.outputs, result, values, computed)
                if fresh is not None and step.kind is StepKind.SHAPE_VALUE:
                    fresh.update((n, values[n]) for n in step.outputs if n in values)
            if debug:
                trace_step(step, args, values, time.perf_counter() - started)
            for name in entry.frees:
                values.pop(name, None)
        cache = self._shape_cache(bounds)
        if fresh is not None and whole and cache is not None:
            cache.store(signature, fresh)
        return values

    # ---- one node, one fused step --------------------------------------------------------
    def run_node(self, index: int, step: Step, args: list[Any], scope: dict[str, Any]) -> Any:
        """Step ``index``'s result on ``args``: the one way both executors run a node that is
        not a plain operator call (subgraphs bound to ``scope``, a folded step's kept result,
        a failure raised as the sonnx error naming the node).

        :param index: the step's index.
        :param step: the step.
        :param args: its input values.
        :param scope: the values its subgraphs read from the enclosing scope.
        :returns: its result: one value or a tuple of them.
        """
        try:
            attrs = step.attrs
            if step.has_subgraphs:
                attrs = {k: _bound(v, scope) for k, v in attrs.items()}
            if step.kind is not StepKind.FOLDED:
                return step.run(args, attrs)
            result = self._folded.result(index, args)
            if result is None:
                result = step.run(args, attrs)
                self._folded.keep(index, args, result)
            return result
        except NotTraceableError as e:
            e.step_index = index  # the outermost program's index wins (subgraphs)
            raise
        except Exception as e:
            failure = step.failure(args, e)
            if failure is e:
                raise
            raise failure from e

    def run_fused(self, fused: FusedStep, args: list[Any]) -> Any:
        """A fused step's result on ``args`` (Tensors, or a plan's raw torch tensors): its
        call's raw result, or where the call declines (training, tracing, another device or
        dtype, a shape it does not take) its fallback's Tensors (:meth:`run_fallback`).

        :param fused: the fused step.
        :param args: the values of its inputs.
        :returns: one value or a tuple, one per name the group makes.
        """
        raw = [a.data if isinstance(a, Tensor) else a for a in args]  # subclasses too
        try:
            made = fused.fusion.compute(*raw)
        except Exception as e:
            failure = self.program.steps[fused.index].failure(args, e, fused.inputs)
            if failure is e:
                raise
            raise failure from e
        if made is not None:
            return made
        return self.run_fallback(fused, [a if isinstance(a, Tensor) else plain(a) for a in args])

    def run_fallback(self, fused: FusedStep, args: list[Tensor]) -> Any:
        """A fused step's group, step by step, on the tensors of its inputs; a failing step
        names itself. Returns the final step's output, or the tuple of the group's
        ``outputs`` where it names them.

        :param fused: the fused step.
        :param args: the tensors of its inputs.
        :returns: the result.
        """
        steps = self.program.steps
        env: dict[str, Any] = dict(zip(fused.inputs, args, strict=True))
        for index in fused.fallback:
            step = steps[index]
            _store(step.outputs, self.run_node(index, step, _arguments(step, env), env), env, None)
        if fused.fusion.outputs:
            return tuple(env[name] for name in fused.fusion.outputs)
        return env[steps[fused.index].outputs[0]]


def _bound(attribute: Any, scope: dict[str, Any]) -> Any:
    """An attribute for one run of its node: a subgraph bound to the enclosing scope."""
    return attribute.bind(scope) if isinstance(attribute, Subgraph) else attribute


def _store(
    names: Any, result: Any, values: dict[str, Any], computed: dict[str, Tensor] | None
) -> None:
    """Name a step's (or a group's) result(s) ``names`` and add them to ``values`` (and
    ``computed``)."""
    for name, t in zip(names, output_values(result), strict=False):
        if name and t is not None:
            values[name] = named(t, name)
            if computed is not None:
                computed[name] = t


def _arguments(step: Step, values: dict[str, Any]) -> list[Any]:
    """The step's input values (None for absent optional inputs)."""
    try:
        return [values[n] if n else None for n in step.inputs]
    except KeyError as e:
        raise BadInputError(
            f"node {step.info.name!r} ({step.info.op_type}) needs tensor {e.args[0]!r}, "
            "which was not computed (an optional input left out, or a cut too early?)"
        ) from None
