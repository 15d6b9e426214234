"""Reading and validating an ONNX model before anything runs.

Everything here raises :class:`~sonnx.errors.BadModelError` (malformed model, among them one
whose names are not UTF-8 text),
:class:`~sonnx.errors.ResourceLimitError` (a tensor declaring more bytes than the memory
limit) or :class:`~sonnx.errors.UnsupportedOperatorError` (all unsupported nodes at once),
never a protobuf or KeyError traceback.

External data is read only for a model loaded from its path, and only from regular files
inside the model's directory: a location that is absolute, climbs out with ``..`` or leads
out through a symbolic link is refused before any file is opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from sonnx.engine.memory_guard import check_elements
from sonnx.errors import BadModelError, UnsupportedOperatorError
from sonnx.onnx.model_file import StoredWeight, defer_external_weights, read_model_file
from sonnx.onnx.registry import REGISTRY, Converter, _domain_key

ModelSource = onnx.ModelProto | str | os.PathLike | bytes


def load_model(source: ModelSource) -> tuple[onnx.ModelProto, dict[str, StoredWeight]]:
    """The checked model from a ModelProto, a file path or serialized bytes, and where the
    initializers it holds as headers only lie (by name).

    A model read from its path leaves its main graph's large initializers where they are
    stored (the model file or an external data file; see :mod:`sonnx.onnx.model_file`), for
    a caller that reads each weight once, into its tensor. A ModelProto or bytes hold all
    their data: no initializer is stored elsewhere, and a ModelProto is returned unchanged.
    """
    if isinstance(source, onnx.ModelProto):
        check_text(source)
        check_tensors(source)
        return source, {}
    if isinstance(source, (bytes, bytearray)):
        model = _parse(bytes(source), "the given bytes")
        check_text(model)
        check_tensors(model)
        return model, {}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise BadModelError(f"ONNX model path {path} is a directory, expected an .onnx file")
        if not path.is_file():
            raise BadModelError(f"ONNX model file not found: {path}")
        model, stored = read_model_file(path)
        check_text(model)
        check_tensors(model, external_base=path.parent)
        stored.update(defer_external_weights(model, path.parent))
        _load_external_data(model, path.parent)
        return model, stored
    raise BadModelError(
        f"expected an onnx.ModelProto, a path or bytes, received {type(source).__name__}"
    )


def check_text(model: onnx.ModelProto) -> None:
    """Raise :class:`BadModelError` naming the first string field of the model (node, op type,
    domain, attribute, input and output names, in subgraphs and functions too) that is not
    UTF-8 text.

    onnx.proto is proto2, whose parser does not validate strings: Python's protobuf hands a
    string field that does not decode to Python as ``bytes``, so a byte-flipped name would
    otherwise surface later as a ``TypeError`` wherever it is first compared with a str.
    """
    found = _undecodable_text(model)
    if found is not None:
        path, value = found
        field = ".".join(["model", *reversed(path)])
        raise BadModelError(f"{field} is not UTF-8 text; received the bytes {value!r}")


def _undecodable_text(message: Message) -> tuple[list[str], bytes] | None:
    """The first string field under ``message`` that came as bytes: its path from ``message``
    (innermost name first: the path is built only on the way back from a find) and its value.

    Every string of a model is walked at every load, so only the fields set are visited
    (``ListFields``), and the common case (all text) costs a type check per string."""
    for field, value in message.ListFields():
        if field.type == _STRING:
            if type(value) is str:
                continue
            if type(value) is bytes:
                return [field.name], value
            for i, item in enumerate(value):  # a repeated string field
                if type(item) is not str:
                    return [f"{field.name}[{i}]"], item
        elif field.type == _MESSAGE:
            items = [value] if isinstance(value, Message) else value
            for i, item in enumerate(items):
                found = _undecodable_text(item)
                if found is not None:
                    found[0].append(field.name if items is not value else f"{field.name}[{i}]")
                    return found
    return None


_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def check_tensors(model: onnx.ModelProto, external_base: Path | None = None) -> None:
    """Check every tensor the model holds (initializers, attribute values, in subgraphs and
    functions too) before any is decoded: non-negative dims, a declared size within the memory
    limit, and external data only where ``external_base`` says the model's directory is; and
    that the graph's inputs declare element types ONNX defines."""
    _check_input_types(model.graph)
    for tensor, dims, what in _model_tensors(model):
        if any(d < 0 for d in dims):
            raise BadModelError(f"{what} has negative dims, received {list(dims)}")
        if tensor is not None and tensor.data_location == onnx.TensorProto.EXTERNAL:
            if external_base is None:
                raise BadModelError(
                    f"{what} keeps its data in an external file, which sonnx reads only for a "
                    "model loaded from its path (the file must sit in the model's directory); "
                    "received the model as a ModelProto or bytes"
                )
            _check_external_location(tensor, external_base, what)
        itemsize = _itemsize(tensor.data_type if tensor is not None else 0)
        count = 1
        for d in dims:
            count *= d
        check_elements(what, count, itemsize, shape=str(tuple(dims)))


def _check_input_types(graph: onnx.GraphProto) -> None:
    known = set(onnx.TensorProto.DataType.values())
    for value in graph.input:
        t = value.type
        while t.WhichOneof("value") in ("sequence_type", "optional_type"):
            inner = t.sequence_type if t.HasField("sequence_type") else t.optional_type
            t = inner.elem_type
        kind = t.WhichOneof("value")
        code = getattr(t, kind).elem_type if kind in ("tensor_type", "sparse_tensor_type") else 0
        if code not in known:
            raise BadModelError(
                f"graph input {value.name!r} declares element type {code}, which ONNX does not "
                f"define; expected one of {sorted(known)}"
            )


def _itemsize(data_type: int) -> int:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize or 1
    except (KeyError, ValueError, TypeError):
        return 1  # unknown or string type: decoding reports it


def _model_tensors(
    model: onnx.ModelProto,
) -> Iterator[tuple[onnx.TensorProto | None, list[int], str]]:
    yield from _graph_tensors(model.graph, "graph")
    for function in model.functions:
        yield from _node_tensors(function.node, f"function {function.name!r}")


def _graph_tensors(
    graph: onnx.GraphProto, where: str
) -> Iterator[tuple[onnx.TensorProto | None, list[int], str]]:
    for t in graph.initializer:
        yield t, list(t.dims), f"{where}: initializer {t.name!r}"
    for s in graph.sparse_initializer:
        what = f"{where}: sparse initializer {s.values.name!r}"
        yield None, list(s.dims), what  # the dense tensor it becomes
        yield s.values, list(s.values.dims), what + " (values)"
        yield s.indices, list(s.indices.dims), what + " (indices)"
    yield from _node_tensors(graph.node, where)


def _node_tensors(
    nodes: Iterator[onnx.NodeProto], where: str
) -> Iterator[tuple[onnx.TensorProto | None, list[int], str]]:
    for node in nodes:
        for a in node.attribute:
            what = f"{where}: attribute {a.name!r} of node {node.name or node.op_type!r}"
            tensors = [a.t] if a.HasField("t") else []
            for t in [*tensors, *a.tensors]:
                yield t, list(t.dims), what
            sparse = [a.sparse_tensor] if a.HasField("sparse_tensor") else []
            for s in [*sparse, *a.sparse_tensors]:
                yield None, list(s.dims), what
                yield s.values, list(s.values.dims), what + " (values)"
                yield s.indices, list(s.indices.dims), what + " (indices)"
            graphs = [a.g] if a.HasField("g") else []
            for g in [*graphs, *a.graphs]:
                yield from _graph_tensors(g, f"{where}: subgraph {a.name!r} of node {node.name!r}")


def _check_external_location(tensor: onnx.TensorProto, base: Path, what: str) -> None:
    """Refuse an external-data reference that could read outside the model's directory, or
    past the end of its file."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")

    def refuse(why: str) -> BadModelError:
        return BadModelError(f"{what}: external data {why}; received location {location!r}")

    if not location or "\0" in location:
        raise refuse("needs a file name relative to the model's directory")
    posix = PurePosixPath(location.replace("\\", "/"))
    if posix.is_absolute() or PureWindowsPath(location).drive or os.path.isabs(location):
        raise refuse("must be a path relative to the model's directory, not an absolute one")
    if ".." in posix.parts:
        raise refuse("may not leave the model's directory ('..')")
    root = base.resolve()
    target = (root / posix).resolve()
    if not target.is_relative_to(root):
        raise refuse("leads out of the model's directory through a symbolic link")
    if not target.is_file():
        raise refuse(f"file not found in {root}")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise refuse(
            f"offset and length must be integers, received offset {info.get('offset')!r} "
            f"and length {info.get('length')!r}"
        ) from None
    size = target.stat().st_size
    end = size if length is None else offset + length
    if offset < 0 or end < offset or end > size:
        raise refuse(
            f"range must lie inside the file of {size} bytes, received offset {offset} "
            f"and length {length}"
        )


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    """Read the external data that :func:`check_tensors` accepted into the model."""
    try:
        onnx.load_external_data_for_model(model, str(base))
    except Exception as e:  # onnx's own checks raise several exception types
        raise BadModelError(f"external data of the model in {base} cannot be read: {e}") from e


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise BadModelError(
            f"{where} is not a valid ONNX model (protobuf decode failed: {e})"
        ) from None
    if not model.HasField("graph"):
        raise BadModelError(f"{where} is not an ONNX model: it has no graph")
    return model


#: Domains a model may use without importing them, at the version onnxruntime then assumes:
#: com.microsoft has one version, and onnxruntime's own transformer optimizer returns models
#: (``optimize_model(...).model``) whose fused nodes use it without an import.
IMPLIED_OPSETS = {"com.microsoft": 1}


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """Domain ('' for the default ONNX domain) → imported opset version (with
    :data:`IMPLIED_OPSETS` for the domains the model uses without importing)."""
    versions = {_domain_key(o.domain): o.version for o in model.opset_import}
    used = {_domain_key(node.domain) for node in model.graph.node}
    for domain, version in IMPLIED_OPSETS.items():
        if domain in used:
            versions.setdefault(domain, version)
    if "" not in versions:
        if model.ir_version >= 3 or model.opset_import:
            versions.setdefault("", 1)
        else:
            versions[""] = 1
    return versions


@dataclass(frozen=True)
class ResolvedNode:
    """One graph node with the converter that will run it."""

    node: onnx.NodeProto
    index: int
    since_version: int
    opset: int
    convert: Converter


def resolve_nodes(graph: onnx.GraphProto, versions: dict[str, int]) -> list[ResolvedNode]:
    """Find a converter for every node, or report every node that has none in one error."""
    resolved: list[ResolvedNode] = []
    missing: list[str] = []
    for i, node in enumerate(graph.node):
        domain = _domain_key(node.domain)
        if domain not in versions:
            missing.append(
                f"{node.op_type} (node {node.name or i!r}, domain {node.domain!r} not imported "
                "by the model's opset_import)"
            )
            continue
        opset = versions[domain]
        found = REGISTRY.lookup(domain, node.op_type, opset)
        if found is None:
            known = REGISTRY.versions(node.op_type, domain)
            why = f"registered since-versions {known}" if known else "no converter"
            missing.append(
                f"{node.op_type} (node {node.name or i!r}, domain {node.domain or 'ai.onnx'!r}, "
                f"opset {opset}: {why})"
            )
            continue
        resolved.append(ResolvedNode(node, i, found[0], opset, found[1]))
    if missing:
        raise UnsupportedOperatorError(
            f"{len(missing)} node(s) of this model are not supported by sonnx:\n  "
            + "\n  ".join(missing)
        )
    return resolved


def check_graph_order(graph: onnx.GraphProto, known: set[str]) -> list[int]:
    """Node indices in an order where every input is defined first.

    ONNX requires nodes to be topologically sorted; an unsorted graph is sorted here, while an
    undefined input name or a cycle is reported with the node involved.
    """
    producers = node_producers(graph.node)
    order: list[int] = []
    state = [0] * len(graph.node)  # 0 unvisited, 1 on the stack, 2 done
    for start in range(len(graph.node)):
        if state[start]:
            continue
        stack = [(start, iter(needed_inputs(graph.node[start])))]
        state[start] = 1
        while stack:
            i, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                state[i] = 2
                order.append(i)
                continue
            if name in known:
                continue
            if name not in producers:
                node = graph.node[i]
                raise BadModelError(
                    f"node {node.name or i!r} ({node.op_type}) reads tensor {name!r}, which no "
                    "graph input, initializer or earlier node defines"
                )
            j = producers[name]
            if state[j] == 1:
                raise BadModelError(
                    f"the graph has a cycle: node {graph.node[j].name or j!r} "
                    f"({graph.node[j].op_type}) depends on its own output {name!r}"
                )
            if state[j] == 0:
                state[j] = 1
                stack.append((j, iter(needed_inputs(graph.node[j]))))
    return order


def node_producers(nodes: Iterable[onnx.NodeProto]) -> dict[str, int]:
    """The position of the node computing each name, among ``nodes`` (a graph's, in its own
    order): what the loader, the Gradient nodes' forward graphs and export walk back through.
    The program's steps have their own index (:mod:`sonnx.runtime.program_index`): they leave
    out Constant nodes and come in execution order.

    :param nodes: the nodes.
    :returns: the positions by output name (a name two nodes compute: the later one's).
    """
    return {out: i for i, node in enumerate(nodes) for out in node.output if out}


def needed_inputs(node: onnx.NodeProto) -> list[str]:
    """Input names of a node, including the outer-scope names its subgraphs read."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in graphs:
            names.extend(_outer_names(sub))
    return names


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    outer = []
    for node in graph.node:
        outer.extend(n for n in needed_inputs(node) if n not in local)
    return outer
