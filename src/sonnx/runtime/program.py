"""A graph compiled into steps: the part of the importer that runs nodes.

:func:`compile_graph` turns a ``GraphProto`` into a :class:`GraphProgram`: initializers and
``Constant`` values as tensors, and every other node as a :class:`Step` (converter, decoded
attributes, wiring) in execution order. The same machinery compiles the subgraphs of ``If``,
``Loop`` and ``Scan``: their graph attributes become :class:`Subgraph` objects, bound to the
enclosing scope's values when the node runs, so operators only call ``branch.run(inputs)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import onnx
import torch

from sonnx.device import Device, default_device_for_run
from sonnx.engine.host_values import forget, place_inputs
from sonnx.engine.operator import Operator, is_training
from sonnx.engine.tracing import NotTraceableError, deferred_checks, value_checks
from sonnx.engine.values import is_single_value
from sonnx.errors import BadInputError, BadModelError, SonnxError
from sonnx.onnx.gradient_graph import with_forward_graphs
from sonnx.onnx.model_file import StoredWeight
from sonnx.onnx.model_loading import (
    ResolvedNode,
    check_graph_order,
    needed_inputs,
    resolve_nodes,
)
from sonnx.onnx.registry import (
    NodeInfo,
    OperatorConverter,
    check_node,
    node_attributes,
)
from sonnx.operators.control import GraphValueOperator
from sonnx.runtime.constants import (
    check_step_constants,
    constant_node_value,
    initializer_tensors,
)
from sonnx.runtime.folding import FoldedResults
from sonnx.runtime.fusions import Fusion
from sonnx.runtime.passes import run_passes
from sonnx.runtime.plan import Plan, build_plan
from sonnx.runtime.program_index import ProgramIndex
from sonnx.runtime.run_paths import debugging, step_loop_reason, trace_step
from sonnx.runtime.schedule import Action, Schedule, build_schedule
from sonnx.runtime.shape_values import (
    RangeShapeValues,
    ShapeValueCache,
    input_signature,
    shape_value_sources,
    shape_value_steps,
)
from sonnx.runtime.step_errors import free_inputs, node_error
from sonnx.runtime.string_steps import typed_strings
from sonnx.runtime.subgraphs import Subgraph
from sonnx.strings import StringArray
from sonnx.symbolic_sizes import SymbolicInts
from sonnx.tensor import Tensor, computed_tensor, string_tensor, symbolic_tensor

CPU = Device("cpu")


@dataclass
class Step:
    """One node ready to run: converter, decoded attributes and wiring.

    ``op`` is the node's operator, built once, for nodes whose converter is an Operator class:
    a run calls its ``forward`` on the inputs' torch tensors directly. The run as a whole is
    recorded as one :class:`~sonnx.runtime.imported_graph.ImportedGraph` (export writes the
    original graph; ``backward`` needs only torch's graph and the weights), so nothing per
    node is recorded.
    """

    info: NodeInfo
    attrs: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    convert: Callable[..., Any]
    has_subgraphs: bool = False
    op: Operator | None = None
    #: Reads only constants (a Cast or DequantizeLinear of int8 weights, a Transpose of a
    #: weight): its result is kept between runs until an input changes.
    foldable: bool = False
    #: Depends on a graph input the run may feed freely: a failure here is a BadInputError
    #: (see :mod:`sonnx.runtime.step_errors`).
    blames_input: bool = False

    def reads(self) -> list[str]:
        """The names the step reads: its inputs, then :meth:`outer_reads`."""
        return [n for n in self.inputs if n] + self.outer_reads()

    def outer_reads(self) -> list[str]:
        """What the step's subgraph bodies read from the enclosing scope, branch by branch."""
        if not self.has_subgraphs:
            return []
        subgraphs = (v for v in self.attrs.values() if isinstance(v, Subgraph))
        return [n for subgraph in subgraphs for n in subgraph.program.outer_names()]

    def failure(
        self, args: list[Any], error: Exception, names: Sequence[str] | None = None
    ) -> Exception:
        """The sonnx error to raise for ``error`` raised while this step ran on ``args``
        (named ``names``, by default the step's inputs)."""
        if not value_checks():
            return error  # a graph tracer's own failure: graph mode runs the step eagerly
        return node_error(
            self.info,
            self.inputs if names is None else names,
            args,
            error,
            self.blames_input,
            self.has_subgraphs,
        )

    def run(self, args: list[Any], attrs: dict[str, Any]) -> Any:
        """The node's output value(s) for input values ``args``."""
        op = self.op
        if op is None:
            return self.convert(self.info, args, attrs)
        raw: list[Any] = []
        for a in args:  # a loop, not comprehensions: this runs once per node per run
            if a is None:
                raw.append(None)
            elif type(a) is Tensor:
                raw.append(a.data)
            else:  # a sequence, an optional, a string tensor: the converter's own handling
                return self.convert(self.info, args, attrs)
        placed = place_inputs(op.op_type, raw)
        try:
            result = op.forward(*placed)
        finally:
            if placed is not raw:
                forget(placed)
        if isinstance(result, (torch.Tensor, StringArray, SymbolicInts)):
            return _plain(result)
        return tuple(None if r is None else _plain(r) for r in result)


def _plain(data: torch.Tensor | StringArray | SymbolicInts) -> Tensor:
    """A tensor computed inside an imported run: values only, no creator."""
    if type(data) is StringArray:  # Cast to strings, a string-valued op on numbers
        return string_tensor(data)
    if type(data) is SymbolicInts:  # Shape in a symbolic trace
        return symbolic_tensor(data)
    return computed_tensor(data)


@dataclass
class GraphProgram:
    """A compiled graph: constant tensors by name, the steps that compute the rest, and the
    device everything lives on."""

    constants: dict[str, Tensor]
    input_names: list[str]
    output_names: list[str]
    steps: list[Step]
    device: Device
    #: The values ONNX types as strings (see :mod:`sonnx.runtime.string_steps`): graph mode
    #: runs the steps that read or make them eagerly.
    string_values: frozenset[str] = frozenset()
    #: The values of the graph's Constant nodes that may hold weights (``value`` or
    #: ``value_floats``, which an export writes back; see :mod:`sonnx.runtime.graph_weights`).
    constant_nodes: frozenset[str] = frozenset()
    # Results of foldable steps, kept while the tensors they read are unchanged.
    _folded: FoldedResults = field(default_factory=FoldedResults, repr=False)
    _shape_values: ShapeValueCache = field(default_factory=ShapeValueCache, repr=False)
    #: Groups of steps run as one torch call, by the index of their final step.
    fusions: dict[int, Fusion] = field(default_factory=dict, repr=False)
    #: Plans of whole runs by the names they keep, and of graph mode's eager ranges by
    #: (start, stop, keep) (see :mod:`sonnx.runtime.plan`); None once a plan failed where the
    #: step loop did not (the step loop then runs every time).
    _plans: dict[Any, Plan] | None = field(default_factory=dict, repr=False)
    _range_shape_values: RangeShapeValues = field(default_factory=RangeShapeValues, repr=False)
    _schedules: dict[tuple[Any, ...], Schedule] = field(default_factory=dict, repr=False)
    _index: ProgramIndex | None = field(default=None, repr=False)

    @property
    def index(self) -> ProgramIndex:
        """The producer and readers of each value (see :mod:`sonnx.runtime.program_index`),
        built at first use after the steps' wiring last changed."""
        if self._index is None:
            self._index = ProgramIndex(self.steps, self.output_names)
        return self._index

    def wiring_changed(self) -> None:
        """Say that a pass rewrote which names the steps read or write: the index is stale."""
        self._index = None

    @cached_property
    def shape_value_steps(self) -> set[int]:
        """The steps computing shape values (see :mod:`sonnx.runtime.shape_values`)."""
        return shape_value_steps(self.steps, self.constants, set(self.input_names))

    @cached_property
    def _shape_value_sources(self) -> tuple[str, ...]:
        steps, producer = self.steps, self.index.producer
        return shape_value_sources(steps, self.shape_value_steps, self.constants, producer)

    def _known_shape_values(
        self, signature: tuple[Any, ...] | None, bounds: tuple[int, int] | None = None
    ) -> dict[str, Any] | None:
        """The shape values kept for ``signature`` (of the eager range ``bounds``, if given:
        none to find in a range without shape-value steps)."""
        if signature is None:
            return None
        found = self._shape_cache(bounds)
        if found is None:
            return {}
        return found.get(signature, self.constants, self._shape_value_sources)

    def _shape_cache(self, bounds: tuple[int, int] | None) -> ShapeValueCache | None:
        if bounds is None:
            return self._shape_values
        return self._range_shape_values.cache(bounds, self.shape_value_steps)

    def execute(
        self,
        values: dict[str, Tensor],
        stop: int | None = None,
        computed: dict[str, Tensor] | None = None,
        keep: set[str] | None = None,
        start: int = 0,
    ) -> dict[str, Tensor]:
        """Run steps ``[start:stop]``, adding each named output to ``values`` (and
        ``computed``); ``values`` must hold what those steps read.

        With ``keep``, a value is dropped from ``values`` once no later step reads it unless its
        name is in ``keep``: an activation then lives no longer than torch needs it (for
        backward, torch holds what it saved), not until the end of the run.
        """
        grad = torch.set_grad_enabled(is_training())
        # A node with no tensor input (RandomUniform, SequenceLength of an empty sequence, a
        # Loop without trip count and condition) creates its output on the default device,
        # which while a graph runs must be the graph's.
        with default_device_for_run(self.device), deferred_checks(), grad:
            why = self.step_loop_reason(start, stop, computed, keep)
            if why is None and self._run_plan(values, frozenset(keep or ())):
                return values
            return self._execute(values, start, stop, computed, keep)

    def execute_range(self, values: dict[str, Tensor], start: int, stop: int) -> None:
        """Run steps ``[start:stop)`` of a graph-mode run eagerly (outside a trace), adding
        to ``values`` what later steps or the graph's outputs read: by the range's generated
        plan once the range's first run of this input signature found its shape values, else
        (and with ``SONNX_DEBUG``) by the step loop, which keeps every value.

        :param values: the run's values so far, those the steps read among them.
        :param start: the first step.
        :param stop: the step after the last.
        """
        grad = torch.set_grad_enabled(is_training())
        with default_device_for_run(self.device), deferred_checks(), grad:
            if self.step_loop_reason(start, stop, ranged=True) is None:
                keep = self.index.read_from(stop)
                if self._run_plan(values, keep, (start, stop)):
                    return
            self._execute(values, start, stop, None, None, (start, stop))

    def step_loop_reason(
        self,
        start: int = 0,
        stop: int | None = None,
        computed: dict[str, Tensor] | None = None,
        keep: set[str] | None = None,
        ranged: bool = False,
    ) -> str | None:
        """Why a run of steps ``[start:stop]`` goes through the step loop (None: through the
        generated plan, once the input signature's shape values are known); ``ranged``: an
        eager range of a graph-mode run (:meth:`execute_range`), which keeps what it must."""
        return step_loop_reason(
            whole=ranged or (start == 0 and (stop is None or stop >= len(self.steps))),
            every_value=computed is not None,
            keeps=ranged or keep is not None,
            value_checks=value_checks(),
            plans_work=self._plans is not None,
        )

    def knows_shape_values(self, values: dict[str, Any]) -> bool:
        """Whether an earlier run found the shape values of ``values``' input signature (then
        the generated plan can run)."""
        signature = input_signature(values, self.input_names)
        return self._known_shape_values(signature) is not None

    def _run_plan(
        self,
        values: dict[str, Tensor],
        keep: frozenset[str],
        bounds: tuple[int, int] | None = None,
    ) -> bool:
        """Run the whole graph (or graph mode's eager range ``bounds``) by its plan, if the
        input signature's shape values are known (False: the step loop must run). When the
        plan raises, the step loop runs the steps again: it names the node that fails, and if
        it does not fail, plans are not used again for this graph."""
        plans = self._plans
        signature = input_signature(values, self.input_names)
        known = self._known_shape_values(signature, bounds)
        if plans is None or known is None:
            return False
        key = keep if bounds is None else (*bounds, keep)
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = build_plan(self, keep, values, bounds)
        try:
            plan(values, known)
            return True
        except Exception:
            pass  # the step loop reports it, naming the node
        if bounds is None:
            self._execute(values, 0, None, None, set(keep))
        else:  # as an eager range runs without a plan: keeping every value
            self._execute(values, *bounds, None, None, bounds)
        self._plans = None
        return True

    @property
    def runs_plans(self) -> bool:
        """False once a plan failed where the step loop did not (a bug in the plan; the step
        loop then runs every time)."""
        return self._plans is not None

    @property
    def plans(self) -> dict[frozenset[str], Plan]:
        """The whole runs' plans built so far, by the names they keep (each has its
        ``source``)."""
        return {k: p for k, p in (self._plans or {}).items() if isinstance(k, frozenset)}

    @property
    def range_plans(self) -> dict[tuple[int, int, frozenset[str]], Plan]:
        """The plans of graph mode's eager ranges built so far, by (start, stop, keep)."""
        return {k: p for k, p in (self._plans or {}).items() if isinstance(k, tuple)}

    def run_step(self, index: int, args: list[Any], scope: dict[str, Any]) -> Any:
        """Step ``index``'s result on ``args`` (``scope``: what its subgraphs read)."""
        return self._run_step(index, self.steps[index], args, scope)

    def outer_names(self) -> list[str]:
        """Names this (sub)graph reads that it does not define (the enclosing scope's), in
        the order first read (store keys list them: no per-process hash order)."""
        index = self.index
        defined = {*self.input_names, *self.constants, *index.producer}
        return [n for n in index.uses if n not in defined]

    def step_producing(self, name: str) -> Step | None:
        """The step that computes tensor ``name``, or None."""
        found = self.index.producer.get(name)
        return None if found is None else self.steps[found]

    def schedule(
        self,
        start: int = 0,
        stop: int | None = None,
        keep: set[str] | frozenset[str] | None = None,
        every_value: bool = False,
        prune: bool = False,
    ) -> Schedule:
        """The schedule of a run of steps ``[start:stop)`` keeping ``keep`` (see
        :mod:`sonnx.runtime.schedule`), built once for each kind of run and kept."""
        stop = len(self.steps) if stop is None else min(stop, len(self.steps))
        frozen = None if keep is None else frozenset(keep)
        key = (start, stop, frozen, every_value, prune, tuple(self.fusions))
        found = self._schedules.get(key)
        if found is None:
            found = build_schedule(self, start, stop, frozen, every_value, prune)
            self._schedules[key] = found
        return found

    def _execute(
        self,
        values: dict[str, Tensor],
        start: int,
        stop: int | None,
        computed: dict[str, Tensor] | None,
        keep: set[str] | None,
        bounds: tuple[int, int] | None = None,
    ) -> dict[str, Tensor]:
        """The step loop; ``bounds``: graph mode's eager range (its own shape values)."""
        debug = debugging()
        signature = input_signature(values, self.input_names) if value_checks() else None
        known = None if debug else self._known_shape_values(signature, bounds)  # trace all
        whole = bounds is not None or (start == 0 and (stop is None or stop >= len(self.steps)))
        fresh: dict[str, Any] | None = {} if signature is not None and known is None else None
        # SONNX_DEBUG traces every node, so fused groups run node by node
        schedule = self.schedule(start, stop, keep, every_value=computed is not None or debug)
        for entry in schedule.steps:
            index = entry.index
            step = self.steps[index]
            if known is not None and entry.action is Action.SHAPE_VALUE:
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
            fusion = entry.fusion
            if fusion is not None:
                args = [values[n] for n in fusion.inputs]
                try:
                    raw = fusion.compute(*(a.data for a in args))
                except Exception as e:
                    failure = step.failure(args, e, fusion.inputs)
                    if failure is e:
                        raise
                    raise failure from e
                result = self.run_group(fusion, args) if raw is None else _plain_all(raw)
                _store(fusion.made(step.outputs), result, values, computed)
            else:
                args = _arguments(step, values)
                result = self._run_named(index, step, args, values)
                _store(step.outputs, result, values, computed)
            if fresh is not None and entry.action is Action.SHAPE_VALUE:
                fresh.update((n, values[n]) for n in step.outputs if n in values)
            if debug:
                trace_step(step, args, values, time.perf_counter() - started)
            for name in entry.frees:
                values.pop(name, None)
        cache = self._shape_cache(bounds)
        if fresh is not None and whole and cache is not None:
            cache.store(signature, fresh)
        return values

    def run_group(self, fusion: Fusion, args: list[Tensor]) -> Any:
        """A fused group's steps one by one, on the tensors of its inputs: what runs where its
        fused call declines (while training or tracing, on another device or dtype, for a
        shape the call does not take); a failing step names itself. Returns the final step's
        output, or the tuple of the group's ``outputs`` where it names them."""
        env: dict[str, Any] = dict(zip(fusion.inputs, args, strict=True))
        for index in sorted((*fusion.internal, fusion.final)):
            step = self.steps[index]
            step_args = _arguments(step, env)
            _store(step.outputs, self._run_named(index, step, step_args, env), env, None)
        if fusion.outputs:
            return tuple(env[name] for name in fusion.outputs)
        return env[self.steps[fusion.final].outputs[0]]

    def _run_named(self, index: int, step: Step, args: list[Any], values: dict[str, Any]) -> Any:
        """:meth:`_run_step`, with a failure raised as the sonnx error naming the node."""
        try:
            return self._run_step(index, step, args, values)
        except NotTraceableError as e:
            e.step_index = index  # the outermost program's index wins (subgraphs)
            raise
        except Exception as e:
            failure = step.failure(args, e)
            if failure is e:
                raise
            raise failure from e

    def _run_step(self, index: int, step: Step, args: list[Any], values: dict[str, Any]) -> Any:
        """A step's result: kept from an earlier run when it is folded, else computed."""
        attrs = step.attrs
        if step.has_subgraphs:
            attrs = {k: v.bind(values) if isinstance(v, Subgraph) else v for k, v in attrs.items()}
        result = self._folded.result(index, args) if step.foldable else None
        if result is None:
            result = step.run(args, attrs)
            if step.foldable:
                self._folded.keep(index, args, result)
        return result


def _plain_all(raw: Any) -> Tensor | tuple[Tensor, ...]:
    """A fused call's result as Tensors: one, or a tuple of them (a group naming several)."""
    return tuple(map(_plain, raw)) if isinstance(raw, (tuple, list)) else _plain(raw)


def _store(
    names: Sequence[str], result: Any, values: dict[str, Any], computed: dict[str, Tensor] | None
) -> None:
    """Name a step's (or a group's) result(s) ``names`` and add them to ``values`` (and
    ``computed``)."""
    outs = (result,) if type(result) is Tensor or is_single_value(result) else result
    for name, t in zip(names, outs, strict=False):
        if name and t is not None:
            if isinstance(t, Tensor):
                t.name = name
            values[name] = t
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


def compile_graph(
    graph: onnx.GraphProto,
    versions: dict[str, int],
    dev: Device,
    input_names: list[str],
    is_subgraph: bool = False,
    stored: Mapping[str, StoredWeight] | None = None,
    held: Mapping[str, Tensor] | None = None,
) -> GraphProgram:
    """Resolve, order and prepare every node of ``graph``; evaluate its Constant nodes.

    In a subgraph, names that nothing local defines are read from the enclosing scope at run
    time, so they count as known here. ``stored`` says where the initializers whose data the
    graph does not hold lie, and ``held`` the tensors that already hold initializers' values
    (see :func:`~sonnx.runtime.constants.initializer_tensors`).
    """
    constants = initializer_tensors(graph, dev, stored, held)
    known = set(constants) | set(input_names) | {""}
    if is_subgraph:
        local = known | {o for n in graph.node for o in n.output}
        known |= {i for n in graph.node for i in needed_inputs(n) if i not in local}
    order = check_graph_order(graph, known)
    resolved = with_forward_graphs(graph, resolve_nodes(graph, versions), known)
    by_index = {r.index: r for r in resolved}
    steps: list[Step] = []
    from_nodes: list[str] = []  # the dense values of Constant nodes, which may hold weights
    for i in order:
        step = _make_step(by_index[i], versions, dev, held)
        check_step_constants(by_index[i].node, step, constants)
        if step.info.op_type == "Constant" and step.info.domain == "":
            constants[step.outputs[0]] = constant_node_value(step, dev, held)
            if any(a.name in ("value", "value_floats") for a in by_index[i].node.attribute):
                from_nodes.append(step.outputs[0])
            continue
        steps.append(step)
    produced = known | {o for s in steps for o in s.outputs} | set(constants)
    for out in graph.output:
        if out.name not in produced:
            raise BadModelError(f"graph output {out.name!r} is not produced by any node")
    outputs = [o.name for o in graph.output]
    strings = frozenset() if is_subgraph else typed_strings(graph, versions)
    program = GraphProgram(
        constants, list(input_names), outputs, steps, dev, strings, frozenset(from_nodes)
    )
    free = free_inputs(graph, input_names, is_subgraph)
    if is_subgraph:
        free |= known - set(constants) - set(input_names)  # the enclosing scope's names
    run_passes(program, free)
    return program


def _make_step(
    r: ResolvedNode, versions: dict[str, int], dev: Device, held: Mapping[str, Tensor] | None
) -> Step:
    node = r.node
    info = NodeInfo(
        op_type=node.op_type,
        domain=node.domain if node.domain != "ai.onnx" else "",
        name=node.name or f"{node.op_type}_{r.index}",
        since_version=r.since_version,
        opset=r.opset,
        num_outputs=len(node.output),
    )
    check_node(node, info)
    try:
        attrs = node_attributes(node, r.since_version)
    except SonnxError as e:
        node_error(info, [], [], e, blames_input=False)  # names the node in the message
        raise
    except Exception as e:  # a malformed attribute in the protobuf
        raise BadModelError(f"node {info.label()}: bad attribute: {e}") from e
    has_subgraphs = False
    op = None
    for key, value in attrs.items():
        if isinstance(value, onnx.GraphProto):
            inputs = [i.name for i in value.input]
            # ``held`` reaches the subgraphs too: their weights keep their trained values
            program = compile_graph(value, versions, dev, inputs, is_subgraph=True, held=held)
            attrs[key] = Subgraph(program, f"{info.name}.{key}")
            has_subgraphs = True
    if _runs_forward(r.convert) and not has_subgraphs:
        try:
            op = r.convert.build(info, attrs)
        except Exception:
            op = None  # a bad attribute: running the node reports it, naming the node
    step = Step(info, attrs, list(node.input), list(node.output), r.convert, has_subgraphs)
    step.op = op
    return step


def _runs_forward(convert: Callable[..., Any]) -> bool:
    """Whether a step may call its operator's ``forward`` on torch tensors: a class registered
    as its own converter, unless it runs on graph values (If, the sequence operators)."""
    return isinstance(convert, OperatorConverter) and not issubclass(
        convert.operator_class, GraphValueOperator
    )
