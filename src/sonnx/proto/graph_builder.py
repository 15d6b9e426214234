"""``GraphBuilder``: what an :class:`~sonnx.engine.operator.Operator` writes its ONNX into.

The exporter creates one builder per export; each operator's ``export`` adds nodes (and, for
decompositions, constants and fresh intermediate names) through it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from sonnx import dtypes
from sonnx.errors import ExportError
from sonnx.strings import StringArray


def _attribute_value(value: Any) -> Any:
    """NumPy/torch tensors become TensorProto; everything else goes to onnx.helper as is."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return tensor_proto(value, "")
    if isinstance(value, tuple):
        return list(value)
    return value


def tensor_proto(value: np.ndarray | torch.Tensor, name: str) -> onnx.TensorProto:
    """An ONNX tensor holding ``value`` exactly, bfloat16 and float8 included."""
    if isinstance(value, torch.Tensor):
        value = dtypes.torch_to_array(value.detach().cpu())
    elif isinstance(value, StringArray):
        value = value.array
    return numpy_helper.from_array(np.asarray(value), name=name)


def _domain_opset(op_type: str, domain: str) -> int:
    """The opset of ``domain`` to import for ``op_type``: the op's newest since-version there
    (TreeEnsemble needs ai.onnx.ml 5), or the last opset before it was deprecated
    (TreeEnsembleRegressor: ai.onnx.ml 3); 1 for an op onnx does not know."""
    try:
        schema = onnx.defs.get_schema(op_type, domain)
        if schema.deprecated:
            schema = onnx.defs.get_schema(op_type, schema.since_version - 1, domain)
        return schema.since_version
    except onnx.defs.SchemaError:
        return 1


def first_opset(op_type: str, domain: str = "") -> int:
    """The first opset of ``domain`` that has ``op_type`` (0 if none does)."""
    newest = onnx.defs.onnx_opset_version() if domain in ("", "ai.onnx") else 100
    for opset in range(1, newest + 1):
        try:
            onnx.defs.get_schema(op_type, opset, domain)
            return opset
        except onnx.defs.SchemaError:
            continue
    return 0


class GraphBuilder:
    """Collects nodes, initializers and names for one exported graph at one opset."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.sparse_initializers: list[onnx.SparseTensorProto] = []
        # Declared types of intermediate tensors (an imported graph's own value_info).
        self.value_infos: list[onnx.ValueInfoProto] = []
        self.extra_opsets: dict[str, int] = {}
        self._used_names: set[str] = set()
        self._counter = 0

    def reserve(self, name: str) -> str:
        """Claim ``name`` (made unique with a suffix if taken) and return the claimed name."""
        candidate, k = name, 1
        while candidate in self._used_names:
            candidate = f"{name}_{k}"
            k += 1
        self._used_names.add(candidate)
        return candidate

    def fresh_name(self, hint: str) -> str:
        """A new, unused tensor name starting with ``hint``."""
        self._counter += 1
        return self.reserve(f"{hint}_{self._counter}")

    def add_node(
        self,
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        domain: str = "",
        name: str | None = None,
        **attrs: Any,
    ) -> onnx.NodeProto:
        """Append one node; trailing absent inputs (``""``) are dropped."""
        ins = list(inputs)
        while ins and ins[-1] == "":
            ins.pop()
        node_name = name or self.reserve(f"{op_type}_{len(self.nodes)}")
        try:
            node = helper.make_node(
                op_type,
                ins,
                list(outputs),
                name=node_name,
                domain=domain or None,
                **{k: _attribute_value(v) for k, v in attrs.items()},
            )
        except (ValueError, TypeError) as e:
            raise ExportError(f"cannot write node {op_type} ({node_name}): {e}") from e
        self.nodes.append(node)
        if domain and domain not in ("", "ai.onnx"):
            version = max(self.extra_opsets.get(domain, 1), _domain_opset(op_type, domain))
            self.extra_opsets[domain] = version
        return node

    def add_initializer(self, value: np.ndarray | torch.Tensor, name: str) -> str:
        """Store ``value`` as an initializer under (a unique form of) ``name``."""
        claimed = self.reserve(name)
        self.initializers.append(tensor_proto(value, claimed))
        return claimed

    def constant(self, value: Any, hint: str = "const", dtype: Any = None) -> str:
        """A constant initializer for a small value (shape lists, scalars); returns its name."""
        array = np.asarray(value, dtype=dtype)
        return self.add_initializer(array, self.fresh_name(hint))
