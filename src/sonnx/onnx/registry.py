"""The importer's operator registry, keyed by (domain, op type, since-version).

Lookup takes the newest registered since-version not above the model's opset for that domain,
so a converter registered for Relu-14 serves opsets 14, 15, … until a newer one is registered.
Attribute defaults come from the ``onnx.defs`` schema of the matched version, never retyped.

A converter is called as ``convert(node, inputs, attrs)`` where ``node`` is a
:class:`NodeInfo`, ``inputs`` the node's input tensors (``None`` for absent optional inputs) and
``attrs`` the node's attributes with schema defaults filled in; it returns the output tensor(s).
Most operators are their own converters: each family package of :mod:`sonnx.operators` lists
its classes in ``OPERATORS``, and :mod:`sonnx.onnx.converters.families` passes every list to
:func:`register_operators`, which reads the since-versions and domain each class declares;
version adapters (an attribute that later became an input, …) are
written as functions with :func:`converter`.

An operator's traits (:class:`~sonnx.engine.operator.Operator`: output shape, parameterising
inputs, randomness, ...) are read from its class, which :func:`operator_class` finds for a node:
the class registered for any version of its operator, or the one a function converter names
(``converter(..., operator=Split)``), or :class:`~sonnx.engine.operator.Operator` itself,
whose defaults are the safe ones, for an operator no class stands for (ZipMap, FlexAttention).

Before a converter is ever called, :func:`check_node` holds the node to its ``onnx.defs``
schema: input and output counts (variadic included), required inputs present, attributes
known, of the declared type and present when required. Converters and operators may thus
rely on the wiring and the attributes' types and only check values.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import onnx
import onnx.defs

from sonnx.engine.operator import Operator
from sonnx.errors import BadModelError, SonnxError
from sonnx.proto.attributes import decode_attribute, schema_defaults
from sonnx.tensor import Tensor

DEFAULT_DOMAINS = ("", "ai.onnx")
#: Attributes sonnx adds to nodes for its own use carry this prefix; schemas never list them.
INTERNAL_ATTRIBUTE_PREFIX = "sonnx_"
OperatorT = TypeVar("OperatorT", bound=Operator)


@dataclass(frozen=True)
class NodeInfo:
    """What a converter may need to know about the node beyond inputs and attributes."""

    op_type: str
    domain: str
    name: str
    since_version: int
    opset: int
    num_outputs: int

    def label(self) -> str:
        """How errors name the node: ``'conv1' (Conv-11)``, with a non-default domain."""
        where = f", domain {self.domain}" if self.domain else ""
        return f"{self.name!r} ({self.op_type}-{self.since_version}{where})"


Converter = Callable[[NodeInfo, list[Tensor | None], dict[str, Any]], Any]


def _domain_key(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


class Registry:
    """Converters by (domain, op type), each with its sorted since-versions."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], list[int]] = {}
        self._converters: dict[tuple[str, str, int], Converter] = {}
        self._classes: dict[tuple[str, str], type[Operator]] = {}

    def register(
        self,
        op_type: str,
        since_version: int,
        fn: Converter,
        domain: str = "",
        operator: type[Operator] | None = None,
    ) -> None:
        """Register ``fn`` for ``op_type``-``since_version``; ``operator`` is the class whose
        traits the operator has (one class per operator, whatever its version)."""
        key = (_domain_key(domain), op_type, since_version)
        if key in self._converters:
            raise SonnxError(
                f"converter for {op_type}-{since_version} (domain {domain!r}) is registered twice"
            )
        if operator is not None:
            known = self._classes.setdefault(key[:2], operator)
            if known is not operator:
                raise SonnxError(
                    f"{op_type} (domain {domain!r}) is registered with two operator classes: "
                    f"{known.__qualname__} and {operator.__qualname__}"
                )
        self._converters[key] = fn
        bisect.insort(self._versions.setdefault(key[:2], []), since_version)

    def operator_class(self, domain: str, op_type: str) -> type[Operator]:
        """The class declaring ``op_type``'s traits; :class:`Operator` (the safe defaults) for
        an operator no class stands for."""
        return self._classes.get((_domain_key(domain), op_type), Operator)

    def lookup(self, domain: str, op_type: str, opset: int) -> tuple[int, Converter] | None:
        """The converter with the newest since-version ≤ ``opset``, or None."""
        d = _domain_key(domain)
        versions = self._versions.get((d, op_type))
        if not versions:
            return None
        i = bisect.bisect_right(versions, opset)
        if i == 0:
            return None
        v = versions[i - 1]
        return v, self._converters[(d, op_type, v)]

    def versions(self, op_type: str, domain: str = "") -> list[int]:
        return list(self._versions.get((_domain_key(domain), op_type), []))

    def operators(self) -> list[tuple[str, str]]:
        """Every registered (domain, op type), sorted (the default domain as ``""``)."""
        return sorted(self._versions)

    def op_types(self, domain: str = "") -> list[str]:
        d = _domain_key(domain)
        return sorted(op for dom, op in self._versions if dom == d)


REGISTRY = Registry()


def converter(
    op_type: str,
    *since_versions: int,
    domain: str = "",
    operator: type[Operator] | None = None,
) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter for the given since-versions;
    ``operator`` names the class it builds, whose traits the operator has."""

    def decorate(fn: Converter) -> Converter:
        for v in since_versions:
            REGISTRY.register(op_type, v, fn, domain, operator)
        return fn

    return decorate


def bind_node(op: OperatorT, node: NodeInfo) -> OperatorT:
    """Give an operator built for ``node`` the node's name and requested output count."""
    op.name = node.name
    op.requested_outputs = node.num_outputs
    return op


class OperatorConverter:
    """The converter of an Operator class registered with :func:`register_operators`: builds
    ``cls(version=v, **attrs)`` for the node. The importer builds it once per node
    (:meth:`build`) and calls its ``forward`` on every run; called as a converter, it builds
    and runs a recorded operator."""

    def __init__(self, cls: type[Operator]) -> None:
        self.operator_class = cls
        self.__name__ = self.__qualname__ = f"convert_{cls.__name__}"

    def build(self, node: NodeInfo, attrs: dict[str, Any]) -> Operator:
        return bind_node(self.operator_class(version=node.since_version, **attrs), node)

    def __call__(self, node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Any:
        return self.build(node, attrs)(*inputs)


def register_operators(*classes: type[Operator]) -> None:
    """Register each Operator class as its own converter, ``cls(version=v, **attrs)(*inputs)``,
    for every since-version ``v`` it declares, in its declared ``domain``.

    ``since_versions`` must be set on the class itself: one inherited from a base is the
    base's operator's (com.microsoft QuantizeLinear extends ONNX's, whose versions differ).
    """
    for cls in classes:
        if not cls.__dict__.get("since_versions"):
            raise SonnxError(
                f"operator class {cls.__module__}.{cls.__qualname__} ({cls.op_type}) is "
                "registered but declares no since_versions of its own; set e.g. "
                "`since_versions = (1,)` on the class"
            )
        convert = OperatorConverter(cls)
        for v in cls.since_versions:
            REGISTRY.register(cls.op_type, v, convert, cls.domain, cls)


def operator_class(node: NodeInfo) -> type[Operator]:
    """The class declaring the traits of ``node``'s operator (see
    :meth:`Registry.operator_class`)."""
    return REGISTRY.operator_class(node.domain, node.op_type)


def node_attributes(node: onnx.NodeProto, since_version: int) -> dict[str, Any]:
    """The node's attributes by name, with the schema's defaults for those it omits."""
    attrs = dict(schema_defaults(node.op_type, since_version, _domain_key(node.domain)))
    for a in node.attribute:
        attrs[a.name] = decode_attribute(a)
    return attrs


def supported_ops(domain: str = "") -> Sequence[str]:
    return REGISTRY.op_types(domain)


@cache
def node_schema(op_type: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    """The ``onnx.defs`` schema in force for ``op_type`` at ``opset``; None outside onnx."""
    try:
        return onnx.defs.get_schema(op_type, opset, _domain_key(domain))
    except onnx.defs.SchemaError:
        return None


_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic


def check_node(node: onnx.NodeProto, info: NodeInfo) -> None:
    """Raise :class:`BadModelError` if ``node`` breaks its operator's schema at the model's
    opset (operators outside onnx's domains, which have no schema, are not checked)."""
    schema = node_schema(node.op_type, info.opset, info.domain)
    if schema is None:
        return
    _check_inputs(node, info, schema)
    n = len(node.output)
    if not schema.min_output <= n <= schema.max_output:
        raise BadModelError(
            f"node {info.label()}: expected {_count(schema.min_output, schema.max_output)} "
            f"output(s) {_formal_names(schema.outputs)}, received {n}: {list(node.output)}"
        )
    _check_attributes(node, info, schema)


def _check_inputs(node: onnx.NodeProto, info: NodeInfo, schema: onnx.defs.OpSchema) -> None:
    names = list(node.input)
    expected = f"{_count(schema.min_input, schema.max_input)} input(s) "
    expected += _formal_names(schema.inputs)
    if not schema.min_input <= len(names) <= schema.max_input:
        raise BadModelError(
            f"node {info.label()}: expected {expected}, received {len(names)}: {names}"
        )
    formals = schema.inputs
    for position, name in enumerate(names):
        formal = formals[min(position, len(formals) - 1)]
        if not name and formal.option == _SINGLE:
            raise BadModelError(
                f"node {info.label()}: input {position} ({formal.name}) is required, "
                f"received an empty name in {names}"
            )


def _count(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return f"at least {low}" if high >= 2**31 - 1 else f"{low} to {high}"


def _formal_names(formals: Sequence[Any]) -> str:
    shown = []
    for f in formals:
        mark = "?" if f.option == onnx.defs.OpSchema.FormalParameterOption.Optional else ""
        shown.append(f"{f.name}{mark}{'...' if f.option == _VARIADIC else ''}")
    return "(" + ", ".join(shown) + ")"


def _check_attributes(node: onnx.NodeProto, info: NodeInfo, schema: onnx.defs.OpSchema) -> None:
    declared = schema.attributes
    given = set()
    for a in node.attribute:
        given.add(a.name)
        spec = declared.get(a.name)
        if spec is None and a.name.startswith(INTERNAL_ATTRIBUTE_PREFIX):
            continue  # added by sonnx itself (a Gradient node's forward graph)
        if spec is None:
            raise BadModelError(
                f"node {info.label()}: attribute {a.name!r} is not an attribute of "
                f"{node.op_type}-{schema.since_version}; expected one of {sorted(declared)}"
            )
        # An UNDEFINED type is what IR-1 writers left: decoding infers it from the value.
        if a.type != onnx.AttributeProto.UNDEFINED and a.type != int(spec.type):
            raise BadModelError(
                f"node {info.label()}: attribute {a.name!r} must be of type "
                f"{spec.type.name}, received {_type_name(a.type)}"
            )
    missing = sorted(n for n, spec in declared.items() if spec.required and n not in given)
    if missing:
        raise BadModelError(
            f"node {info.label()}: required attribute(s) {missing} missing, "
            f"received {sorted(given)}"
        )


def _type_name(code: int) -> str:
    try:
        return onnx.AttributeProto.AttributeType.Name(code)
    except ValueError:
        return f"type code {code}"


def check_constant_types(
    node: onnx.NodeProto, info: NodeInfo, dtypes_by_input: dict[int, int]
) -> None:
    """Raise :class:`BadModelError` if an input whose element type is known before the run
    (an initializer or a Constant value; ``dtypes_by_input`` maps input position to its ONNX
    element type) is not one its schema allows, or constants sharing a type parameter
    disagree."""
    schema = node_schema(node.op_type, info.opset, info.domain)
    if schema is None or not dtypes_by_input:
        return
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = schema.inputs
    bound: dict[str, tuple[int, str]] = {}
    for position, code in sorted(dtypes_by_input.items()):
        formal = formals[min(position, len(formals) - 1)]
        type_str = f"tensor({_element_name(code)})"
        choices = allowed.get(formal.type_str, {formal.type_str})
        if type_str not in choices:
            raise BadModelError(
                f"node {info.label()}: input {position} ({formal.name}) must be one of "
                f"{sorted(choices)}, received {type_str} ({node.input[position]!r})"
            )
        shared = formal.option != _VARIADIC or formal.is_homogeneous
        if formal.type_str in allowed and shared:
            first = bound.setdefault(formal.type_str, (position, type_str))
            if first[1] != type_str:
                raise BadModelError(
                    f"node {info.label()}: inputs {first[0]} and {position} share type "
                    f"{formal.type_str} and must have one element type, received {first[1]} "
                    f"and {type_str}"
                )


def _element_name(code: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(code).lower()
    except ValueError:
        return f"type code {code}"
