"""A graph compiled into steps: the program the importer's executors run.

:func:`compile_graph` turns a ``GraphProto`` into a :class:`GraphProgram`: initializers and
``Constant`` values as tensors, and every other node as a :class:`~sonnx.runtime.steps.Step`
(converter, decoded attributes, wiring) in execution order; the passes
(:mod:`sonnx.runtime.passes`) then rewrite it, and its runner (:mod:`sonnx.runtime.runner`)
runs it. The same machinery compiles the subgraphs of ``If``,
``Loop`` and ``Scan``: their graph attributes become :class:`Subgraph` objects, bound to the
enclosing scope's values when the node runs, so operators only call ``branch.run(inputs)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from sonnx.device import Device
from sonnx.errors import BadModelError, SonnxError
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
from sonnx.runtime.fusions import Fusion
from sonnx.runtime.passes import run_passes
from sonnx.runtime.program_index import ProgramIndex
from sonnx.runtime.runner import ProgramRunner
from sonnx.runtime.step_errors import free_inputs, node_error
from sonnx.runtime.steps import FusedStep, Step, StepKind
from sonnx.runtime.string_steps import typed_strings
from sonnx.runtime.subgraphs import Subgraph
from sonnx.tensor import Tensor

CPU = Device("cpu")


@dataclass
class GraphProgram:
    """A compiled graph: constant tensors by name, the steps that compute the rest, their
    order as the passes rewrote it, and the device everything lives on. Its
    :attr:`runner` runs it (:mod:`sonnx.runtime.runner`)."""

    constants: dict[str, Tensor]
    input_names: list[str]
    output_names: list[str]
    #: One step per node, in execution order: what cuts, export and ``SONNX_DEBUG`` see.
    steps: list[Step]
    device: Device
    #: The values ONNX types as strings (see :mod:`sonnx.runtime.string_steps`): graph mode
    #: runs the steps that read or make them eagerly.
    string_values: frozenset[str] = frozenset()
    #: The values of the graph's Constant nodes that may hold weights (``value`` or
    #: ``value_floats``, which an export writes back; see :mod:`sonnx.runtime.graph_weights`).
    constant_nodes: frozenset[str] = frozenset()
    #: The program as the passes left it: the index of each step, and a fused step in place
    #: of each fused group (at its final step; see :meth:`fuse`). None: the steps as they are.
    order: tuple[int | FusedStep, ...] | None = None
    _index: ProgramIndex | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.order is None:
            self.order = tuple(range(len(self.steps)))
        #: What runs the program and keeps its plans and caches.
        self.runner = ProgramRunner(self)

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

    def fuse(self, fusions: Iterable[Fusion]) -> None:
        """Rewrite the order: each group of ``fusions`` becomes one fused step in place of its
        steps, which it keeps as its fallback (a pass's or QAT's groups; none may share a step
        with a group fused already).

        :param fusions: the groups.
        """
        self._reorder([*self.fused_steps, *map(FusedStep.of, fusions)])

    def unfuse(self, which: Callable[[Fusion], bool] | None = None) -> None:
        """Put the steps of the fused groups ``which`` selects (all by default) back in the
        order, each run as itself.

        :param which: whether to undo a group.
        """
        self._reorder([f for f in self.fused_steps if which is not None and not which(f.fusion)])

    def _reorder(self, fused: list[FusedStep]) -> None:
        at = {f.index: f for f in fused}
        members = {i for f in fused for i in f.fallback}
        count = len(self.steps)
        self.order = tuple(at.get(i, i) for i in range(count) if i in at or i not in members)
        self.runner.forget_plans()

    @property
    def fused_steps(self) -> tuple[FusedStep, ...]:
        """The fused steps of the order, in order."""
        return tuple(f for f in self.order or () if type(f) is FusedStep)

    @property
    def fusions(self) -> dict[int, Fusion]:
        """The fused groups, by the index of their final step (read-only: :meth:`fuse` and
        :meth:`unfuse` rewrite them)."""
        return {f.index: f.fusion for f in self.fused_steps}

    @property
    def shape_value_steps(self) -> frozenset[int]:
        """The steps the shape-value pass made shape values (see
        :mod:`sonnx.runtime.shape_values`)."""
        shape = StepKind.SHAPE_VALUE
        return frozenset(i for i, step in enumerate(self.steps) if step.kind is shape)

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
