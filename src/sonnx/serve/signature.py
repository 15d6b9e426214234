"""What a served model accepts and returns, in KServe terms, and the checks on each request.

The signature is read from the ONNX graph (not from a prepared model), so a model whose inputs
or outputs have no KServe datatype is reported by name before any loading work. ONNX STRING
is KServe BYTES (object arrays of ``str`` on both sides, see :mod:`sonnx.serve.codec`).
``config.json`` may narrow the declared shapes. Dims are ints, ``-1`` for any size, as in the
KServe model metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from sonnx.serve.codec import RequestedOutput, RequestTensor
from sonnx.serve.config import ModelConfig
from sonnx.serve.datatypes import datatype_of_onnx
from sonnx.serve.errors import ConfigError, InvalidRequestError, UnsupportedError

Dims = tuple[int, ...]


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: KServe datatype and shape (None: the model gives no shape)."""

    name: str
    datatype: str
    shape: Dims | None

    def metadata(self) -> dict[str, object]:
        # KServe metadata needs a shape; an unknown rank is shown as one dynamic dim.
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape or [-1])}

    def accepts(self, shape: Sequence[int]) -> bool:
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(
            want in (-1, got) for want, got in zip(self.shape, shape, strict=True)
        )


@dataclass(frozen=True)
class ModelSignature:
    """The inputs and outputs of one model version, and whether requests may be batched."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int

    @classmethod
    def from_model(cls, model: onnx.ModelProto, config: ModelConfig) -> ModelSignature:
        """Read the graph's inputs (not initializers) and outputs; apply the config's shapes.

        Raises :class:`UnsupportedError` for a value that is not a tensor or whose element
        type has no KServe datatype, and :class:`ConfigError` when the config's shapes or
        ``max_batch_size`` do not fit the model.
        """
        graph = model.graph
        initializers = {i.name for i in graph.initializer}
        inputs = [_spec(v, "input") for v in graph.input if v.name not in initializers]
        outputs = [_spec(v, "output") for v in graph.output]
        inputs = _override(inputs, config.inputs, "inputs")
        outputs = _override(outputs, config.outputs, "outputs")
        if config.batching:
            fixed = [s for s in [*inputs, *outputs] if not s.shape or s.shape[0] != -1]
            if fixed:
                raise ConfigError(
                    f"max_batch_size {config.max_batch_size} needs every input and output to "
                    f"have a dynamic first dim; {fixed[0].name!r} has shape "
                    f"{list(fixed[0].shape) if fixed[0].shape else 'unknown'}"
                )
        return cls(tuple(inputs), tuple(outputs), config.max_batch_size)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    def metadata(self) -> dict[str, object]:
        return {
            "inputs": [s.metadata() for s in self.inputs],
            "outputs": [s.metadata() for s in self.outputs],
        }

    def check_inputs(self, tensors: list[RequestTensor]) -> dict[str, np.ndarray]:
        """The request's arrays by input name, in the model's order, once every name,
        datatype and shape matches (and, when batching, the batch sizes agree)."""
        given = {t.name: t for t in tensors}
        expected = [s.name for s in self.inputs]
        unknown = sorted(set(given) - set(expected))
        if unknown:
            raise InvalidRequestError(
                f"unknown input(s) {unknown}; the model's inputs are {expected}"
            )
        missing = [n for n in expected if n not in given]
        if missing:
            raise InvalidRequestError(
                f"missing input(s) {missing}; the model's inputs are {expected}"
            )
        for spec in self.inputs:
            t = given[spec.name]
            if t.datatype != spec.datatype:
                raise InvalidRequestError(
                    f"input {spec.name!r} expects datatype {spec.datatype}, received {t.datatype}"
                )
            if not spec.accepts(t.shape):
                raise InvalidRequestError(
                    f"input {spec.name!r} expects shape {list(spec.shape or [])} (-1: any "
                    f"size), received {list(t.shape)}"
                )
        if self.batching:
            self._check_batch(given)
        return {s.name: given[s.name].array for s in self.inputs}

    def _check_batch(self, given: dict[str, RequestTensor]) -> None:
        sizes = {name: t.shape[0] for name, t in given.items()}
        if len(set(sizes.values())) > 1:
            raise InvalidRequestError(
                f"every input must have the same batch size (first dim), received {sizes}"
            )
        rows = next(iter(sizes.values()))
        if rows > self.max_batch_size:
            raise InvalidRequestError(
                f"the batch size (first dim) must be at most max_batch_size "
                f"{self.max_batch_size}, received {rows}"
            )

    def check_outputs(
        self, requested: list[RequestedOutput] | None, binary_default: bool
    ) -> list[RequestedOutput]:
        """The outputs to return: the requested ones, or all of them."""
        names = [s.name for s in self.outputs]
        if requested is None:
            return [RequestedOutput(n, binary_default) for n in names]
        asked = [r.name for r in requested]
        unknown = [n for n in asked if n not in names]
        if unknown:
            raise InvalidRequestError(
                f"unknown output(s) {unknown}; the model's outputs are {names}"
            )
        if len(set(asked)) != len(asked):
            raise InvalidRequestError(f"each output may be requested once, received {asked}")
        return requested

    def datatype_of_output(self, name: str) -> str:
        return next(s.datatype for s in self.outputs if s.name == name)


def _spec(value: onnx.ValueInfoProto, role: str) -> TensorSpec:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedError(
            f"{role} {value.name!r} is of ONNX kind {kind}; only tensors can be served"
        )
    tt = value.type.tensor_type
    datatype = datatype_of_onnx(tt.elem_type, f"{role} {value.name!r}")
    if not tt.HasField("shape"):
        return TensorSpec(value.name, datatype, None)
    dims = tuple(
        d.dim_value if d.WhichOneof("value") == "dim_value" and d.dim_value > 0 else -1
        for d in tt.shape.dim
    )
    return TensorSpec(value.name, datatype, dims)


def _override(specs: list[TensorSpec], shapes: dict[str, Dims], key: str) -> list[TensorSpec]:
    """``specs`` with the config's shapes applied; a shape may only fix dynamic dims."""
    names = [s.name for s in specs]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ConfigError(f"config {key}: unknown name(s) {unknown}; the model has {names}")
    result = []
    for spec in specs:
        shape = shapes.get(spec.name)
        if shape is not None and spec.shape is not None:
            fits = len(shape) == len(spec.shape) and all(
                old in (-1, new) for old, new in zip(spec.shape, shape, strict=True)
            )
            if not fits:
                raise ConfigError(
                    f"config {key}.{spec.name}: shape {list(shape)} does not fit the model's "
                    f"{list(spec.shape)} (only dynamic dims, -1, may be fixed)"
                )
        result.append(spec if shape is None else TensorSpec(spec.name, spec.datatype, shape))
    return result
