"""A run of an imported graph, recorded as one operator that exports the original graph.

A model that came from ONNX already has the best ONNX form it can have: its own graph, with its
symbolic dims, node names, control flow and opset imports. :meth:`SingaRep.run` therefore
records each run as one :class:`ImportedGraph` operator. Its inputs are the graph inputs it was
fed and the trainable weights the requested outputs depend on (so ``backward`` finds them); its
export writes the original nodes that compute the outputs an export uses — the graph pruned at
a cut — with the weights' current values. Layers a user appends are recorded as usual and join
at the cut tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import onnx
import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, next_call_number, recorded_input
from sonnx.errors import ExportError
from sonnx.onnx.model_loading import (
    check_graph_order,
    needed_inputs,
    node_producers,
    opset_versions,
)
from sonnx.proto.graph_builder import GraphBuilder, tensor_proto
from sonnx.runtime.constants import STATISTICS_SUFFIX
from sonnx.runtime.graph_weights import graph_weights, write_constant_value
from sonnx.runtime.kept_model import with_current_values
from sonnx.runtime.program import GraphProgram, Subgraph
from sonnx.tensor import Tensor


@dataclass(frozen=True)
class GraphSlice:
    """What computing some tensors of a graph needs: node indices in the graph's own order,
    and the initializers and graph inputs those nodes read."""

    nodes: tuple[int, ...]
    initializers: tuple[str, ...]
    inputs: tuple[str, ...]


class GraphSource:
    """An imported model as its export needs it: the kept proto and the prepared program.

    The proto is the model without the bytes of its large initializers (see
    :mod:`sonnx.runtime.kept_model`): every initializer the program holds is written from
    ``constants``, the program's own dict, so the values an export writes are the current
    ones (trained weights, updated BatchNorm statistics); the program's subgraphs hold the
    weights of branches and loop bodies.
    """

    def __init__(self, model: onnx.ModelProto, program: GraphProgram) -> None:
        self.model = model
        self.program = program
        self.constants = program.constants
        graph = model.graph
        self.producer = node_producers(graph.node)
        self.initializers = {t.name for t in graph.initializer}
        self.sparse_initializers = {s.values.name: s for s in graph.sparse_initializer}
        self.graph_inputs = {v.name: v for v in graph.input}
        self.graph_outputs = {v.name: v for v in graph.output}
        self.value_info = {v.name: v for v in graph.value_info}
        self._slices: dict[tuple[str, ...], GraphSlice] = {}
        self._inner: dict[GraphSlice, dict[str, Tensor]] = {}
        self._initializer_tensors: dict[GraphSlice, list[tuple[str, Tensor]]] = {}

    def current_model(self) -> onnx.ModelProto:
        """The whole model with every initializer's current value (see
        :func:`~sonnx.runtime.kept_model.with_current_values`), its nodes in
        :attr:`node_order`."""
        full = with_current_values(self.model, self.constants)
        if self.node_order != tuple(range(len(self.node_order))):
            del full.graph.node[:]
            full.graph.node.extend(self.model.graph.node[i] for i in self.node_order)
        for node in full.graph.node:
            _refresh_weights(self.program, node)
        return full

    @cached_property
    def node_order(self) -> tuple[int, ...]:
        """The graph's node indices in an order where each node reads only what the graph's
        inputs, initializers and earlier nodes define, as ONNX requires: the graph's own order
        when it is one. onnxruntime and ``prepare`` run nodes in any order, so a model whose
        string front end was appended after the nodes reading its output runs; written in its
        own order, its export would be a file the ONNX checker rejects. Found when first
        needed (an export, :meth:`current_model`), not by ``prepare``: most models are never
        exported."""
        known = {*self.graph_inputs, *self.initializers, *self.sparse_initializers, ""}
        return tuple(check_graph_order(self.model.graph, known))

    def in_order(self, nodes: tuple[int, ...]) -> list[int]:
        """Node indices ``nodes`` in :attr:`node_order`."""
        wanted = set(nodes)
        return [i for i in self.node_order if i in wanted]

    @property
    def opset(self) -> int:
        return opset_versions(self.model)[""]

    def initializer_tensors(self, part: GraphSlice) -> list[tuple[str, Tensor]]:
        """The part's initializers by name, as the program holds them (cached per part)."""
        found = self._initializer_tensors.get(part)
        if found is None:
            found = [(n, self.constants[n]) for n in part.initializers]
            self._initializer_tensors[part] = found
        return found

    def inner_weights(self, part: GraphSlice) -> dict[str, Tensor]:
        """The trainable weights the part's nodes hold themselves, by name: the values of its
        Constant nodes and the weights inside its nodes' subgraphs (see
        :mod:`sonnx.runtime.graph_weights`)."""
        floats = self._inner.get(part)
        if floats is None:
            floats = self._inner[part] = {}
            for index in part.nodes:
                node = self.model.graph.node[index]
                name = node.output[0] if node.op_type == "Constant" and node.output else ""
                if name in self.program.constant_nodes and self.constants[name].stores_grad:
                    floats[name] = self.constants[name]
                for _, sub in subprograms(self.program, node):
                    _collect_floats(sub, floats)
        return {n: t for n, t in floats.items() if t.is_param}

    def slice(self, outputs: tuple[str, ...]) -> GraphSlice:
        """The part of the graph that computes ``outputs`` (cached per output tuple)."""
        found = self._slices.get(outputs)
        if found is None:
            found = self._slices[outputs] = self._walk(outputs)
        return found

    def _walk(self, outputs: tuple[str, ...]) -> GraphSlice:
        nodes: set[int] = set()
        initializers: set[str] = set()
        inputs: set[str] = set()
        seen: set[str] = set()
        stack = list(outputs)
        while stack:
            name = stack.pop()
            if not name or name in seen:
                continue
            seen.add(name)
            if name in self.producer:
                index = self.producer[name]
                if index not in nodes:
                    nodes.add(index)
                    stack.extend(needed_inputs(self.model.graph.node[index]))
            elif name in self.initializers or name in self.sparse_initializers:
                initializers.add(name)
            elif name in self.graph_inputs:
                inputs.add(name)
        order = [t.name for t in self.model.graph.initializer]
        order += [s.values.name for s in self.model.graph.sparse_initializer]
        return GraphSlice(
            tuple(sorted(nodes)),
            tuple(n for n in order if n in initializers),
            tuple(v.name for v in self.model.graph.input if v.name in inputs),
        )


class ImportedGraph(Operator):
    """One run of an imported graph: ``inputs`` are the graph inputs fed (in the model's input
    order) followed by the trainable weights the outputs depend on; ``input_names`` and
    ``output_names`` are their names in the original graph."""

    op_type = "ImportedGraph"
    exports_kept_graph = True

    def __init__(
        self,
        source: GraphSource,
        fed: list[str],
        weights: list[str],
        inner: list[str],
        outputs: list[str],
    ) -> None:
        super().__init__()
        self.source = source
        self.input_names = fed + weights + inner
        self._weights = weights
        #: Weights of subgraphs: inputs here so that ``backward`` finds them, written by the
        #: export inside their subgraph.
        self.inner_weight_names = frozenset(inner)
        self.output_names = outputs

    @cached_property
    def weight_names(self) -> frozenset[str]:
        """The graph's own weights among the inputs (an export reads it; a run need not)."""
        return frozenset(self._weights)

    def forward(self, *xs: torch.Tensor | None) -> Any:
        raise ExportError("ImportedGraph records a run of SingaRep; it is not called itself")

    @classmethod
    def record(
        cls, source: GraphSource, fed: dict[str, Tensor], results: dict[str, Any]
    ) -> dict[str, Any]:
        """Wrap a run's tensor results as outputs of one recorded ImportedGraph.

        ``fed`` holds the graph inputs given, ``results`` the computed values to return; values
        that are not tensors (sequences, optionals) are returned as they are.
        """
        names = [n for n, v in results.items() if isinstance(v, Tensor)]
        outs = cls.record_values(
            source,
            fed,
            names,
            [results[n].data for n in names],
            [results[n]._requires_grad for n in names],
        )
        wrapped = dict(results)
        wrapped.update(zip(names, outs, strict=True))
        return wrapped

    @classmethod
    def record_values(
        cls,
        source: GraphSource,
        fed: dict[str, Tensor],
        names: list[str],
        datas: list[torch.Tensor],
        requires_grad: list[bool] | None = None,
    ) -> list[Tensor]:
        """Tensors ``names`` of a run, computed as ``datas`` (whose gradients are recorded
        where ``requires_grad`` says; None: nowhere), as the outputs of one recorded
        ImportedGraph. ``fed`` holds the graph inputs given, in the graph's input order."""
        part = source.slice(tuple(names))
        # ``is_param`` spelled out: a property call per initializer costs more than the rest.
        initializers = source.initializer_tensors(part)
        weights = [(n, t) for n, t in initializers if t._requires_grad and t._stores_grad]
        inner = source.inner_weights(part)
        given = [n for n, v in fed.items() if isinstance(v, Tensor)]
        op = cls(source, given, [n for n, _ in weights], list(inner), names)
        # Weights are leaves, which an operator keeps as they are.
        args = [recorded_input(fed[n]) for n in given] + [t for _, t in weights]
        op.inputs = (*args, *inner.values())
        op.sequence = next_call_number()
        op.num_outputs = len(names)
        outs = []
        for index, (name, data) in enumerate(zip(names, datas, strict=True)):
            out = object.__new__(Tensor)
            out.data = data
            out.creator = op
            out.output_index = index
            out.name = name
            out._requires_grad = requires_grad[index] if requires_grad else False
            out._stores_grad = False
            outs.append(out)
        return outs

    def untrained_reason(self) -> str | None:
        """Why this run trains nothing (the model holds no weight, the part run reads none,
        or every weight is frozen).

        :returns: the reason, one line; None when some weight the run read trains.
        """
        if self._weights or self.inner_weight_names:
            return None
        weights = graph_weights(self.source.program)
        if not weights:
            return (
                "the imported model holds no trainable weight (no float initializer or "
                "Constant node that a node reads as a weight, in its graph or its subgraphs)"
            )
        if any(t.requires_grad for t in weights.values()):
            return (
                f"the part of the imported model that computes {self.output_names[:3]} reads "
                "none of its trainable weights"
            )
        return (
            f"all {len(weights)} weights of the imported model are frozen (requires_grad is "
            "False): unfreeze some (SONNXModel.unfreeze) or append layers to train"
        )

    def node_descriptions(self, domain: str) -> list[str]:
        """``op 'name'`` of the original nodes of ``domain`` this run computed its outputs with."""
        graph = self.source.model.graph
        part = self.source.slice(tuple(self.output_names))
        nodes = [graph.node[i] for i in part.nodes]
        return [f"{n.op_type} {n.name!r}" for n in nodes if n.domain == domain]

    def plan_export(self, g: GraphBuilder, used: list[int]) -> ImportedExport:
        """Claim the names of the part of the graph that computes outputs ``used``."""
        return ImportedExport(self, g, tuple(self.output_names[i] for i in used))


class ImportedExport:
    """The writing of one :class:`ImportedGraph` into one export.

    Every name the written part uses (tensors, initializers, node names, subgraph names) is
    claimed in the builder first, so the original names survive whenever they are free; a name
    already taken (two runs of one model in one export) is renamed throughout.
    """

    def __init__(self, op: ImportedGraph, g: GraphBuilder, outputs: tuple[str, ...]) -> None:
        self.op = op
        self.source = op.source
        self.part = self.source.slice(outputs)
        self.rename: dict[str, str] = {}
        graph = self.source.model.graph
        names = list(op.input_names) + list(self.part.initializers)
        for index in self.part.nodes:
            names.extend(_node_names(graph.node[index]))
        for name in dict.fromkeys(n for n in names if n):
            self.rename[name] = g.reserve(name)
        self.renamed = any(k != v for k, v in self.rename.items())

    def name(self, original: str) -> str:
        return self.rename.get(original, original)

    def input_name(self, position: int) -> str:
        """The claimed name of the op's input ``position`` (a graph input or a weight)."""
        return self.name(self.op.input_names[position])

    def output_name(self, index: int) -> str:
        return self.name(self.op.output_names[index])

    def writes_input(self, position: int) -> bool:
        """Whether input ``position`` is a subgraph weight, which this export writes itself."""
        return self.op.input_names[position] in self.op.inner_weight_names

    def input_info(self, position: int) -> onnx.ValueInfoProto | None:
        """The original declaration (type, symbolic dims) of a graph input, renamed."""
        return self._declared(self.op.input_names[position], self.source.graph_inputs)

    def output_info(self, index: int) -> onnx.ValueInfoProto | None:
        """The original declaration of an output: a graph output's, or a cut tensor's
        ``value_info`` when the model has one."""
        name = self.op.output_names[index]
        return self._declared(name, self.source.graph_outputs) or self._declared(
            name, self.source.value_info
        )

    def _declared(
        self, name: str, table: dict[str, onnx.ValueInfoProto]
    ) -> onnx.ValueInfoProto | None:
        found = table.get(name)
        if found is None:
            return None
        info = onnx.ValueInfoProto()
        info.CopyFrom(found)
        info.name = self.name(name)
        return info

    def write(self, g: GraphBuilder, given: list[str]) -> None:
        """Add the nodes, the constant initializers and the value infos of the part.

        ``given`` names the tensors the exporter wired to the op's inputs; where one differs
        from the claimed name (an input computed by sonnx layers, a weight shared with one),
        an Identity joins them.
        """
        for position, name in enumerate(given):
            target = self.input_name(position)
            if name != target:
                g.add_node("Identity", [name], [target], name=g.reserve(f"{target}_join"))
        for name in self.part.initializers:
            if name not in self.op.weight_names:
                self._write_constant(g, name)
        graph = self.source.model.graph
        for index in self.source.in_order(self.part.nodes):
            node = onnx.NodeProto()
            node.CopyFrom(graph.node[index])
            self._rewire_statistics(g, node)
            _refresh_weights(self.source.program, node)
            if self.renamed:
                _rename_node(node, self.rename)
            g.nodes.append(node)
        for name in self.source.value_info:
            if name in self.rename and name not in self.source.graph_outputs:
                g.value_infos.append(self._declared(name, self.source.value_info))

    def _write_constant(self, g: GraphBuilder, name: str) -> None:
        """A non-trainable initializer, from the tensor the program holds: its current value
        (BatchNorm statistics change in training), and the kept proto has no bytes of a large
        one. Sparse initializers are written as the original proto."""
        target = self.name(name)
        if name in self.source.sparse_initializers:
            sparse = onnx.SparseTensorProto()
            sparse.CopyFrom(self.source.sparse_initializers[name])
            sparse.values.name = target
            g.sparse_initializers.append(sparse)
            return
        g.initializers.append(tensor_proto(self.source.constants[name].data, target))

    def _rewire_statistics(self, g: GraphBuilder, node: onnx.NodeProto) -> None:
        """A BatchNormalization whose statistics the importer gave buffers of their own
        (they were shared with a weight) reads those buffers once training changed them."""
        if node.op_type != "BatchNormalization":
            return
        for position in (3, 4):
            if position >= len(node.input):
                continue
            own = node.input[position] + STATISTICS_SUFFIX
            buffer = self.source.constants.get(own)
            if buffer is None or torch.equal(buffer.data, self._shared_value(node.input[position])):
                continue
            node.input[position] = g.add_initializer(buffer.data, own)

    def _shared_value(self, name: str) -> torch.Tensor:
        """The value a statistics input has in the graph: an initializer read via Identity."""
        producer = self.source.model.graph.node[self.source.producer[name]]
        return self.source.constants[producer.input[0]].data


def subprograms(program: GraphProgram, node: onnx.NodeProto) -> list[tuple[str, GraphProgram]]:
    """The compiled subgraphs of ``node`` by attribute name (found through its outputs)."""
    if not any(a.HasField("g") or a.graphs for a in node.attribute):
        return []
    step = program.step_producing(node.output[0]) if node.output else None
    if step is None:
        return []
    return [(k, v.program) for k, v in step.attrs.items() if isinstance(v, Subgraph)]


def _collect_floats(program: GraphProgram, found: dict[str, Tensor]) -> None:
    """Every float constant of ``program`` and of the subgraphs inside it."""
    found.update((n, t) for n, t in program.constants.items() if dtypes.is_float(t.dtype))
    for step in program.steps:
        for value in step.attrs.values():
            if isinstance(value, Subgraph):
                _collect_floats(value.program, found)


def _refresh_weights(program: GraphProgram, node: onnx.NodeProto) -> None:
    """Write the current values of the weights ``node`` holds: its own, for a Constant node,
    and the float initializers and Constant weights of its subgraphs."""
    write_constant_value(node, program.constants)
    programs = dict(subprograms(program, node))
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            inner = programs.get(attr.name)
            if inner is None:
                continue
            for k, init in enumerate(sub.initializer):
                current = inner.constants.get(init.name)
                if current is not None and dtypes.is_float(current.dtype):
                    sub.initializer[k].CopyFrom(tensor_proto(current.data, init.name))
            for inner_node in sub.node:
                _refresh_weights(inner, inner_node)


def _node_names(node: onnx.NodeProto) -> list[str]:
    """The names a node defines: its name, its outputs and everything inside its subgraphs."""
    names = [node.name, *node.output]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            names.extend(_graph_names(sub))
    return names


def _graph_names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    for node in graph.node:
        names.extend(_node_names(node))
    return names


def _rename_node(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Apply ``rename`` to a node's name, inputs, outputs and subgraphs (ONNX forbids a
    subgraph to shadow an outer name, so one mapping serves every scope)."""
    node.name = rename.get(node.name, node.name)
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[:] = [rename.get(n, n) for n in node.output]
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for v in [*sub.input, *sub.output, *sub.value_info]:
                v.name = rename.get(v.name, v.name)
            for t in sub.initializer:
                t.name = rename.get(t.name, t.name)
            for inner in sub.node:
                _rename_node(inner, rename)
