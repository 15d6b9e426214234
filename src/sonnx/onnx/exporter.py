"""``to_onnx``: write the recorded creator graph between some inputs and outputs as ONNX.

The walk starts at every output and follows ``creator.inputs`` back to leaves. A leaf that is
one of the given ``inputs`` becomes a graph input; a parameter (``stores_grad``) or a constant
(``requires_grad=False``) becomes an initializer, stored once however often it is used; any
other leaf is an error, because silently baking user data into the model as a constant is never
what was meant. Each operator writes its own node(s) through :meth:`Operator.export`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import onnx.defs
from onnx import helper

from sonnx import dtypes
from sonnx.engine.operator import Operator
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.onnx.export_checks import (
    PROTOBUF_LIMIT,
    check_connected,
    check_nodes_exist,
    check_with_onnx,
    outside_onnx,
)
from sonnx.onnx.export_names import DynamicAxes, GraphNames
from sonnx.onnx.float16 import to_float16
from sonnx.onnx.model_loading import opset_versions
from sonnx.proto.graph_builder import GraphBuilder, tensor_proto
from sonnx.tensor import Tensor

if TYPE_CHECKING:  # an imported run (sonnx.runtime) exports its kept graph
    from sonnx.runtime.imported_graph import GraphSource, ImportedExport

_EXPORT_DTYPES = ("float32", "float16")
#: ``save`` writes the weights to a ``<name>.data`` file beside the model when the model's
#: serialized size reaches this many bytes (a module constant so tests can lower it).
EXTERNAL_DATA_THRESHOLD = PROTOBUF_LIMIT
#: Initializers smaller than this stay inside the model file even when saving externally.
EXTERNAL_TENSOR_MIN_BYTES = 1024
OLDEST_EXPORT_OPSET = 11


#: The opset ``to_onnx`` targets unless asked for another: torch.onnx's default, which every
#: maintained runtime runs (onnxruntime since 1.14, TensorRT 10, OpenVINO 2023). A fixed number,
#: so an exported file never depends on which onnxruntime the exporting machine has.
DEFAULT_EXPORT_OPSET = 18


def default_opset() -> int:
    """The opset :func:`to_onnx` targets when none is given (:data:`DEFAULT_EXPORT_OPSET`).

    :returns: the default-domain opset version.
    """
    return DEFAULT_EXPORT_OPSET


def needed_opset(graph: onnx.GraphProto, target: int) -> int:
    """The lowest default-domain opset under which every node of ``graph`` (subgraphs included)
    keeps the schema it has at ``target``: the newest since-version among them. Given no opset,
    :func:`to_onnx` writes this one (not below :data:`OLDEST_EXPORT_OPSET`), so a model of old
    operators loads in older runtimes too.

    :param graph: the graph to look at; nodes of other domains, and the default-domain
        operators onnx has no schema for (:func:`~sonnx.onnx.export_checks.outside_onnx`), are
        skipped.
    :param target: the opset whose schemas the nodes follow.
    :returns: the opset version, at least 1.
    :raises onnx.defs.SchemaError: a default-domain node's operator has no schema at ``target``.
    """
    needed = 1
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and not outside_onnx(node.op_type):
            needed = max(needed, onnx.defs.get_schema(node.op_type, target, "").since_version)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                needed = max(needed, needed_opset(sub, target))
    return needed


def _topological_ops(outputs: Sequence[Tensor]) -> list[Operator]:
    """Every operator the outputs depend on, in the order they ran (which puts each after the
    operators it reads from), so an imported graph exports in its own node order."""
    order: list[Operator] = []
    done: set[int] = set()
    for out in outputs:
        if out.creator is None or id(out.creator) in done:
            continue
        stack: list[tuple[Operator, int]] = [(out.creator, 0)]
        on_stack = {id(out.creator)}
        while stack:
            op, k = stack.pop()
            if k < len(op.inputs):
                stack.append((op, k + 1))
                x = op.inputs[k]
                parent = None if x is None else x.creator
                if parent is not None and id(parent) not in done and id(parent) not in on_stack:
                    on_stack.add(id(parent))
                    stack.append((parent, 0))
                continue
            on_stack.discard(id(op))
            done.add(id(op))
            order.append(op)
    order.sort(key=lambda op: op.sequence)
    return order


def _value_info(name: str, t: Tensor, dynamic_batch: bool) -> onnx.ValueInfoProto:
    shape: list[int | str] = list(t.shape)
    if dynamic_batch and shape:
        shape[0] = "batch"
    return helper.make_tensor_value_info(name, dtypes.torch_to_onnx(t.dtype), shape)


class _Namer:
    """Names for tensors: an imported graph's own names, else the user's name where given and
    free, else a generated one."""

    def __init__(
        self, g: GraphBuilder, plans: dict[int, ImportedExport], ops: list[Operator]
    ) -> None:
        self.g = g
        self.plans = plans
        self.by_leaf: dict[int, str] = {}
        self.by_output: dict[tuple[int, int], str] = {}
        # Leaves read by an imported graph: its first reader and the input position there.
        self.imported_reads: dict[int, tuple[ImportedExport, int]] = {}
        for op in ops:
            if id(op) in plans:
                for position, x in enumerate(op.inputs):
                    self.imported_reads.setdefault(id(x), (plans[id(op)], position))

    def of(self, t: Tensor) -> str:
        if t.creator is None:
            return self.by_leaf[id(t)]
        key = (id(t.creator), t.output_index)
        if key not in self.by_output:
            plan = self.plans.get(id(t.creator))
            if plan is not None:
                self.by_output[key] = plan.output_name(t.output_index)
            elif t.name:
                self.by_output[key] = self.g.reserve(t.name)
            else:
                self.by_output[key] = self.g.fresh_name(t.creator.op_type.lower())
        return self.by_output[key]

    def outputs_of(self, op: Operator, known: dict[tuple[int, int], Tensor]) -> list[str]:
        names = []
        for i in range(op.num_outputs):
            t = known.get((id(op), i))
            names.append(
                self.of(t) if t is not None else self.g.fresh_name(f"{op.op_type.lower()}_unused")
            )
        return names

    def imported_consumer(self, t: Tensor) -> tuple[ImportedExport | None, int]:
        """The first imported graph that reads leaf ``t``, and at which input position."""
        return self.imported_reads.get(id(t), (None, -1))


def to_onnx(
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    model_name: str | None = None,
    opset: int | None = None,
    dynamic_batch: bool = True,
    doc_string: str | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_axes: DynamicAxes | None = None,
    dtype: str = "float32",
) -> onnx.ModelProto:
    """An ONNX model computing ``outputs`` from ``inputs``.

    Operations built with sonnx are written as recorded when they ran; a run of an imported
    model (``SingaRep.run``, ``SONNXModel``) writes that model's own graph, pruned to what the
    outputs need, with its current weights, names, symbolic dims and opset.

    ``input_names``/``output_names`` name the graph's inputs and outputs; ``dynamic_axes``
    (``{name: {axis: "dim_name"}}`` or ``{name: [axis, ...]}``, torch.onnx.export's meaning)
    declares which dims of which inputs and outputs are symbolic: all others are fixed. Without
    it, the batch dim (axis 0) of inputs built with sonnx is symbolic when ``dynamic_batch``.

    ``dtype="float16"`` writes the model to compute in float16, keeping float32 where
    onnxruntime's own float16 converter does plus normalizations, Softmax and reductions, with
    Casts between (see :mod:`sonnx.onnx.float16`); its float inputs and outputs are float16.

    :param inputs: the tensors that become the graph's inputs.
    :param outputs: the tensors that become the graph's outputs (at least one).
    :param model_name: the graph's name (None: an imported graph's own name, else ``"sonnx"``).
    :param opset: the default-domain opset to write (None: :data:`DEFAULT_EXPORT_OPSET`, or
        an imported graph's own opset, raised as far as an operator needs).
    :param dynamic_batch: make axis 0 of sonnx-built inputs symbolic (``"batch"``) when no
        ``dynamic_axes`` are given.
    :param doc_string: the model's doc string.
    :param input_names: names for the graph inputs, one per input.
    :param output_names: names for the graph outputs, one per output.
    :param dynamic_axes: symbolic dims by input or output name, as torch.onnx.export takes them.
    :param dtype: ``"float32"`` or ``"float16"``, the float type the model computes in.
    :returns: the model (write it with :func:`save`).
    :raises ExportError: an unknown ``dtype``, no outputs, an input or output that is not a
        Tensor, names or
        ``dynamic_axes`` that do not match the inputs and outputs, or a graph that cannot be
        written (float16 with control flow, for one).
    :raises OpsetTooOldError: an operator cannot be written at the ``opset`` asked for; the
        error names the first opset that can.
    """
    if dtype not in _EXPORT_DTYPES:
        raise ExportError(f"to_onnx: dtype must be one of {_EXPORT_DTYPES}, received {dtype!r}")
    inputs, outputs = list(inputs), list(outputs)
    if not outputs:
        raise ExportError("to_onnx: no outputs given")
    for kind, seq in (("inputs", inputs), ("outputs", outputs)):
        for i, t in enumerate(seq):
            if not isinstance(t, Tensor):
                raise ExportError(
                    f"to_onnx: {kind}[{i}] must be a sonnx Tensor, received {type(t).__name__}"
                )
    names = GraphNames.check(inputs, outputs, input_names, output_names, dynamic_axes)
    ops = _topological_ops(outputs)
    sources = _imported_sources(ops)
    target = _target_opset(opset, sources)
    while True:
        try:
            model = _export(
                inputs, outputs, ops, model_name, target, dynamic_batch, doc_string, names
            )
            break
        except OpsetTooOldError as e:
            # The default target rises to the first opset that has every node; an explicit
            # opset (or an imported graph's) stays an error.
            if opset is not None or sources or e.needed <= target:
                raise
            target = e.needed
    if opset is None and not sources:
        _lower_opset(model, target)
    check_with_onnx(model)
    return to_float16(model) if dtype == "float16" else model


def _reserve_input_names(
    g: GraphBuilder, ops: list[Operator], inputs: list[Tensor], wanted: Sequence[str] | None
) -> dict[int, str]:
    """Claim the graph input names asked for before an imported graph claims its own, so that
    the names given are the names written (an imported tensor of the same name is renamed
    instead). A name that is already the imported graph's own name for that very input is
    left for the graph to claim: the input then feeds it directly, with no Identity."""
    if wanted is None:
        return {}
    own: dict[int, str] = {}
    for op in ops:
        if op.exports_kept_graph:
            for position, x in enumerate(op.inputs):
                own.setdefault(id(x), op.input_names[position])
    return {
        i: g.reserve(name)
        for i, (t, name) in enumerate(zip(inputs, wanted, strict=True))
        if own.get(id(t)) != name
    }


def _imported_sources(ops: list[Operator]) -> list[GraphSource]:
    found: dict[int, GraphSource] = {}
    for op in ops:
        if op.exports_kept_graph:
            found.setdefault(id(op.source), op.source)
    return list(found.values())


def _target_opset(opset: int | None, sources: list[GraphSource]) -> int:
    """The opset to write: an imported graph's own (its nodes mean what they mean there), else
    the one asked for, else :data:`DEFAULT_EXPORT_OPSET`."""
    own = sorted({s.opset for s in sources})
    if len(own) > 1:
        raise ExportError(
            f"to_onnx: the outputs come from imported models of opsets {own}; "
            "one export can hold graphs of one opset"
        )
    if own and opset is not None and int(opset) != own[0]:
        raise ExportError(
            f"to_onnx: the outputs come from an imported model of opset {own[0]}; writing it at "
            f"opset {opset} would change what its nodes mean: leave opset unset"
        )
    if own:
        return own[0]
    target = default_opset() if opset is None else int(opset)
    if not OLDEST_EXPORT_OPSET <= target <= onnx.defs.onnx_opset_version():
        raise ExportError(
            f"to_onnx: opset must be in [{OLDEST_EXPORT_OPSET}, "
            f"{onnx.defs.onnx_opset_version()}], received {target}"
        )
    return target


def _lower_opset(model: onnx.ModelProto, target: int) -> None:
    """Import the lowest default-domain opset that keeps every node's schema (a model of old
    operators then loads in older runtimes too), but not below :data:`OLDEST_EXPORT_OPSET`
    (IR versions before 4, which older opsets imply, want initializers listed as inputs)."""
    version = max(needed_opset(model.graph, target), OLDEST_EXPORT_OPSET)
    for opset_id in model.opset_import:
        if opset_id.domain in ("", "ai.onnx"):
            opset_id.version = version
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)


def _export(
    inputs: list[Tensor],
    outputs: list[Tensor],
    ops: list[Operator],
    model_name: str | None,
    target: int,
    dynamic_batch: bool,
    doc_string: str | None,
    names: GraphNames,
) -> onnx.ModelProto:
    g = GraphBuilder(target)
    requested = _reserve_input_names(g, ops, inputs, names.inputs)
    produced = _reachable_tensors(ops, outputs)
    plans = {
        id(op): op.plan_export(g, sorted(i for (o, i) in produced if o == id(op)))
        for op in ops
        if op.exports_kept_graph
    }
    namer = _Namer(g, plans, ops)
    graph_inputs = []
    for i, t in enumerate(inputs):
        if t.creator is not None:
            raise ExportError(
                f"to_onnx: inputs[{i}] was computed by {t.creator.op_type}; "
                "graph inputs must be leaf tensors"
            )
        plan, position = namer.imported_consumer(t)
        declared = plan.input_info(position) if plan is not None else None
        if names.inputs is not None:
            wanted = names.inputs[i]
            own = plan.input_name(position) if plan is not None else None
            name = requested[i] if i in requested else own if own == wanted else g.reserve(wanted)
        elif plan is not None:
            name = plan.input_name(position)
        else:
            name = g.reserve(t.name or f"input_{i}")
        namer.by_leaf[id(t)] = name
        graph_inputs.append(names.input_info(name, t, declared, dynamic_batch))
    _name_leaves(ops, outputs, namer, g)
    check_connected(outputs, inputs)
    for op in ops:
        ins = ["" if x is None else namer.of(x) for x in op.inputs]
        first = len(g.nodes)
        if id(op) in plans:
            plans[id(op)].write(g, ins)
        else:
            op.export(g, ins, namer.outputs_of(op, produced))
        check_nodes_exist(g, first, op)
    graph_outputs, declared_outputs = [], []
    for i, t in enumerate(outputs):
        name = namer.of(t) if t.creator is not None else namer.by_leaf[id(t)]
        wanted = names.outputs[i] if names.outputs is not None else None
        if wanted != name and (
            wanted or name in {o.name for o in graph_outputs} or t.creator is None
        ):
            alias = g.reserve(wanted or f"output_{i}")
            g.add_node("Identity", [name], [alias])
            name = alias
        plan = plans.get(id(t.creator)) if t.creator is not None else None
        declared = plan.output_info(t.output_index) if plan is not None else None
        if declared is not None:
            declared.name = name
        declared_outputs.append(declared is not None)
        graph_outputs.append(
            declared
            or (
                _value_info(name, t, dynamic_batch=False)
                if not dynamic_batch
                else helper.make_tensor_value_info(name, dtypes.torch_to_onnx(t.dtype), None)
            )
        )
    first_source = next(iter(plans.values())).source.model if plans else None
    graph = helper.make_graph(
        g.nodes,
        model_name or (first_source.graph.name if first_source is not None else "sonnx"),
        graph_inputs,
        graph_outputs,
        g.initializers,
        doc_string=first_source.graph.doc_string if first_source is not None else None,
        value_info=g.value_infos,
        sparse_initializer=g.sparse_initializers,
    )
    opsets = {"": target, **g.extra_opsets}
    if first_source is not None:
        # With the domains the source used without importing them (IMPLIED_OPSETS).
        for domain, version in opset_versions(first_source).items():
            if domain:
                opsets[domain] = max(opsets.get(domain, 1), version)
    opset_ids = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    model = helper.make_model(
        graph,
        opset_imports=opset_ids,
        producer_name="sonnx",
        ir_version=helper.find_min_ir_version_for(opset_ids, ignore_unknown=True),
        doc_string=doc_string
        if doc_string is not None
        else (first_source.doc_string if first_source is not None else ""),
    )
    if first_source is not None:
        # IR 4 at least: before it, initializers had to be listed as graph inputs too
        model.ir_version = max(model.ir_version, first_source.ir_version, 4)
        model.functions.extend(first_source.functions)
        model.metadata_props.extend(first_source.metadata_props)
    if dynamic_batch or names.axes:
        _type_outputs(model, outputs, declared_outputs)
    names.name_output_dims(model, outputs)
    return model


def _type_outputs(
    model: onnx.ModelProto, outputs: Sequence[Tensor], declared: Sequence[bool]
) -> None:
    """Give the outputs the shapes ONNX shape inference derives from the symbolic batch.

    An output's traced shape may depend on the batch size on any axis (or on none: a loss), so
    it is not copied; dims that inference cannot tell stay unnamed (any size), rank is kept.
    """
    inferred: dict[str, onnx.ValueInfoProto] = {}
    if model.ByteSize() < PROTOBUF_LIMIT:
        try:
            done = onnx.shape_inference.infer_shapes(model)
            inferred = {o.name: o for o in done.graph.output}
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
            inferred = {}
    for out, t, keep in zip(model.graph.output, outputs, declared, strict=True):
        if keep:
            continue
        tensor_type = out.type.tensor_type
        tensor_type.shape.SetInParent()
        found = inferred.get(out.name)
        shape = found.type.tensor_type.shape if found is not None else None
        if shape is None or len(shape.dim) != len(t.shape):
            tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in t.shape)
            continue
        for dim in shape.dim:
            kept = tensor_type.shape.dim.add()
            if dim.HasField("dim_value"):
                kept.dim_value = dim.dim_value
            elif dim.dim_param and not dim.dim_param.startswith("unk__"):
                kept.dim_param = dim.dim_param


def _reachable_tensors(
    ops: list[Operator], outputs: Sequence[Tensor]
) -> dict[tuple[int, int], Tensor]:
    """Non-leaf tensors the export needs, by (creator id, output index)."""
    found: dict[tuple[int, int], Tensor] = {}
    for t in [*outputs, *(x for op in ops for x in op.inputs if x is not None)]:
        if t.creator is not None:
            found.setdefault((id(t.creator), t.output_index), t)
    return found


def _name_leaves(ops, outputs, namer: _Namer, g: GraphBuilder) -> None:
    """Give every leaf a name: graph inputs already have one; others become initializers (an
    imported graph's weights under their own names)."""
    leaves = [x for op in ops for x in op.inputs if x is not None and x.creator is None]
    leaves += [t for t in outputs if t.creator is None]
    for t in leaves:
        if id(t) in namer.by_leaf:
            continue
        plan, position = namer.imported_consumer(t)
        if plan is not None:
            namer.by_leaf[id(t)] = plan.input_name(position)
            if not plan.writes_input(position):
                g.initializers.append(tensor_proto(t.data, namer.by_leaf[id(t)]))
            continue
        if t.requires_grad and not t.stores_grad:
            raise ExportError(
                f"to_onnx: tensor {t.name or ''!r} of shape {t.shape} "
                f"({dtypes.dtype_name(t.dtype)}) is a leaf that "
                "is neither among the given inputs nor a parameter (stores_grad); pass it in "
                "`inputs`, or set requires_grad=False to embed it as a constant"
            )
        hint = t.name or ("param" if t.stores_grad else "const")
        namer.by_leaf[id(t)] = g.add_initializer(t.data, hint)


def save(model: onnx.ModelProto, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` atomically; returns the path.

    A model of :data:`EXTERNAL_DATA_THRESHOLD` bytes or more keeps its weights in
    ``<file name>.data`` beside it (ONNX external data, which protobuf's 2 GiB limit requires).
    Both files are written in a temporary directory next to the target and moved into place,
    so a reader never sees a half-written model, and ``model`` itself is left unchanged.

    :param model: the model to write (from :func:`to_onnx` or ``onnx.load``).
    :param path: the file to write; missing parent directories are created.
    :returns: the path written.
    :raises BadInputError: ``path`` is a directory, or one of its parents is a file.
    :raises OSError: the file or its directory cannot be written; the message names ``path``
        (never the temporary file).
    """
    target = Path(path)
    if target.is_dir():
        raise BadInputError(
            f"save: {path} is a directory; give the file to write, such as {target / 'model.onnx'}"
        )
    blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise BadInputError(f"save: cannot write {path}: {blocking} is a file, not a directory")
    try:
        _save_staged(model, target)
    except OSError as e:
        raise type(e)(e.errno, f"save: cannot write {path}: {e.strerror}") from e
    return target


def _save_staged(model: onnx.ModelProto, target: Path) -> None:
    """:func:`save`'s work: write in a temporary directory beside ``target``, then move."""
    target.parent.mkdir(parents=True, exist_ok=True)
    data_name = target.name + ".data"
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        staged = Path(tmp) / target.name
        if model.ByteSize() >= EXTERNAL_DATA_THRESHOLD:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            onnx.save_model(
                copy,
                staged,
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_name,
                size_threshold=EXTERNAL_TENSOR_MIN_BYTES,
            )
            os.replace(Path(tmp) / data_name, target.parent / data_name)
        else:
            onnx.save_model(model, staged)
        os.replace(staged, target)
