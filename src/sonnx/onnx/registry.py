"""The importer's operator registry, keyed by (domain, op type, since-version).

Lookup takes the newest registered since-version not above the model's opset for that domain,
so a converter registered for Relu-14 serves opsets 14, 15, … until a newer one is registered.
Attribute defaults come from the ``onnx.defs`` schema of the matched version, never retyped.

A converter is called as ``convert(node, inputs, attrs)`` where ``node`` is a
:class:`NodeInfo`, ``inputs`` the node's input tensors (``None`` for absent optional inputs) and
``attrs`` the node's attributes with schema defaults filled in; it returns the output tensor(s).
Most operators register their :class:`~sonnx.autograd.operator.Operator` class directly with
:func:`register_operator`; version adapters (an attribute that later became an input, …) are
written as functions with :func:`converter`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import onnx

from sonnx.autograd.operator import Operator
from sonnx.errors import SonnxError
from sonnx.onnx.attributes import decode_attribute, schema_defaults
from sonnx.tensor import Tensor

DEFAULT_DOMAINS = ("", "ai.onnx")
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


Converter = Callable[[NodeInfo, list[Tensor | None], dict[str, Any]], Any]


def _domain_key(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


class Registry:
    """Converters by (domain, op type), each with its sorted since-versions."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], list[int]] = {}
        self._converters: dict[tuple[str, str, int], Converter] = {}

    def register(self, op_type: str, since_version: int, fn: Converter, domain: str = "") -> None:
        key = (_domain_key(domain), op_type, since_version)
        if key in self._converters:
            raise SonnxError(
                f"converter for {op_type}-{since_version} (domain {domain!r}) is registered twice"
            )
        self._converters[key] = fn
        bisect.insort(self._versions.setdefault(key[:2], []), since_version)

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

    def op_types(self, domain: str = "") -> list[str]:
        d = _domain_key(domain)
        return sorted(op for dom, op in self._versions if dom == d)


REGISTRY = Registry()


def converter(
    op_type: str, *since_versions: int, domain: str = ""
) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter for the given since-versions."""

    def decorate(fn: Converter) -> Converter:
        for v in since_versions:
            REGISTRY.register(op_type, v, fn, domain)
        return fn

    return decorate


def bind_node(op: OperatorT, node: NodeInfo) -> OperatorT:
    """Give an operator built for ``node`` the node's name and requested output count."""
    op.name = node.name
    op.requested_outputs = node.num_outputs
    return op


class OperatorConverter:
    """The converter of an Operator class registered with :func:`register_operator`: builds
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


def register_operator(cls: type[Operator], *since_versions: int, domain: str = "") -> None:
    """Register an Operator class as its own converter: ``cls(version=v, **attrs)(*inputs)``."""
    convert = OperatorConverter(cls)
    for v in since_versions:
        REGISTRY.register(cls.op_type, v, convert, domain or cls.domain)


def node_attributes(node: onnx.NodeProto, since_version: int) -> dict[str, Any]:
    """The node's attributes by name, with the schema's defaults for those it omits."""
    attrs = dict(schema_defaults(node.op_type, since_version, _domain_key(node.domain)))
    for a in node.attribute:
        attrs[a.name] = decode_attribute(a)
    return attrs


def supported_ops(domain: str = "") -> Sequence[str]:
    return REGISTRY.op_types(domain)
