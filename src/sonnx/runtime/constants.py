"""What an imported graph's constants are: initializers decoded onto the device, float ones
made trainable weights, except those that parameterise an operation (an exponent, a
quantization scale, a Resize's scales: the inputs its operator class declares
``parameterising_inputs``) and BatchNorm running statistics, which are constants and buffers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from sonnx import dtypes
from sonnx.device import Device
from sonnx.engine.host_values import constant_device
from sonnx.errors import BadModelError, SonnxError
from sonnx.onnx.model_file import StoredWeight, read_stored_weight
from sonnx.onnx.registry import check_constant_types, operator_class
from sonnx.proto.attributes import densify
from sonnx.runtime.step_errors import node_error
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program_index import ProgramIndex
    from sonnx.runtime.steps import Step

CPU = Device("cpu")


def initializer_tensors(
    graph: onnx.GraphProto,
    dev: Device,
    stored: Mapping[str, StoredWeight] | None = None,
    held: Mapping[str, Tensor] | None = None,
) -> dict[str, Tensor]:
    """Initializers as tensors: float ones are trainable parameters, the rest constants.

    :param stored: where the initializers that are headers only lie (see
        :func:`~sonnx.onnx.model_loading.load_model` of a path): each is read straight into its
        tensor, one at a time, so a weight's bytes are never held twice.
    :param held: tensors already holding initializers' values, by name (a prepared graph's
        own, when its model is prepared again after a rewrite): each initializer named here
        gets a new tensor over the same storage, never a copy, whatever its proto holds.
    """
    stored = stored or {}
    held = held or {}
    tensors: dict[str, Tensor] = {}
    for init in graph.initializer:
        if init.name in held:
            # detach: a new tensor over the held storage (on its device), flagged afresh below
            t = Tensor(data=held[init.name].data.detach(), requires_grad=False, name=init.name)
        else:
            t = _decoded(init, stored.get(init.name), dev)
        # A 0-d float is a constant that parameterises an operation (an epsilon, an exponent,
        # a quantization scale), not a weight.
        if dtypes.is_float(t.dtype) and t.data.dim() > 0:
            t.requires_grad = True
            t.stores_grad = True
        tensors[init.name] = t
    for sparse in graph.sparse_initializer:
        name = sparse.values.name
        tensors[name] = Tensor(data=densify(sparse), device=CPU, requires_grad=False, name=name)
        place_constant(tensors[name], dev)
    return tensors


def _decoded(init: onnx.TensorProto, where: StoredWeight | None, dev: Device) -> Tensor:
    """The initializer's values read from where they are stored, or from its proto, on the
    graph's device."""
    try:
        # np.array: the array over the proto's bytes is read-only; a stored one is not
        array = (
            read_stored_weight(init, where)
            if where is not None
            else np.array(numpy_helper.to_array(init))
        )
    except BadModelError:
        raise
    except Exception as e:  # malformed or unreadable initializer data
        raise BadModelError(f"initializer {init.name!r} cannot be decoded: {e}") from e
    t = Tensor(data=array, device=CPU, requires_grad=False, name=init.name)
    place_constant(t, dev)
    return t


def place_constant(t: Tensor, dev: Device) -> None:
    """Move a constant to the graph's device, except small integer ones (shape arithmetic's
    indices and axes), which stay on the host: see :mod:`sonnx.engine.host_values`."""
    t.to_device(Device(constant_device(t.data, dev.torch_device)))


#: What the importer appends to a shared statistics input's name for its own buffer.
STATISTICS_SUFFIX = "/statistics"
# Inputs that hold running statistics rather than weights: (op type, input positions).
_STATISTICS_INPUTS = {"BatchNormalization": (3, 4)}


def mark_parameterising_constants(
    steps: list[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> None:
    """Float initializers read only where they parameterise an operation (exponents, bounds,
    quantization parameters, a Resize's scales) are constants: training them is never meant (a
    trained exponent's gradient is NaN for negative bases), and graph mode may read a
    constant on the host where it could not read a weight.

    :param steps: the program's steps.
    :param constants: the program's constants by name.
    :param index: the steps' readers of each value; what a subgraph body reads from this
        scope is an ordinary operand there.
    """

    def parameterising(step: int) -> frozenset[int]:
        return operator_class(steps[step].info).parameterising_inputs

    for name, t in constants.items():
        if index.read_only_at(name, parameterising):
            t.stores_grad = False
            t.requires_grad = False


def mark_statistics_as_buffers(
    steps: list[Step], constants: dict[str, Tensor], index: ProgramIndex
) -> None:
    """Float initializers used as running statistics are states, not trainable weights.

    torch's exporter stores equal initializers once and hands out copies through Identity
    nodes, so a fresh network's running variance (all ones) can be its scale's tensor. Such a
    statistic gets a buffer of its own, so updating it in training never writes the weight:
    the BatchNormalization step then reads the buffer's name (the steps' wiring changes).

    :param steps: the program's steps.
    :param constants: the program's constants by name; the buffers made are added.
    :param index: the producer of each value, as the steps were before this pass.
    """
    for step in steps:
        for position in _STATISTICS_INPUTS.get(step.info.op_type, ()):
            name = step.inputs[position] if position < len(step.inputs) else ""
            found = index.producer.get(name)
            source = None if found is None else steps[found]
            if (
                source is not None
                and source.info.op_type == "Identity"
                and source.inputs[0] in constants
            ):
                own = name + STATISTICS_SUFFIX
                if own not in constants:
                    constants[own] = constants[source.inputs[0]].clone()
                    constants[own].name = own
                step.inputs[position] = name = own
            if name in constants:
                constants[name].stores_grad = False
                constants[name].requires_grad = False


def check_step_constants(node: onnx.NodeProto, step: Step, constants: dict[str, Tensor]) -> None:
    """Hold the inputs known before any run (initializers, earlier Constant values) to the
    element types the schema allows, so a mistyped weight is reported as such, not as whatever
    torch raises when it meets it.

    :param node: the node as the model holds it.
    :param step: its step.
    :param constants: the graph's constants so far.
    """
    known = {}
    for position, name in enumerate(step.inputs):
        if name in constants:
            try:
                known[position] = dtypes.torch_to_onnx(constants[name].dtype)
            except SonnxError:
                continue  # a dtype with no ONNX code: the operator reports it
    check_constant_types(node, step.info, known)


def constant_node_value(step: Step, dev: Device, held: Mapping[str, Tensor] | None) -> Tensor:
    """A Constant node's value on the graph's device: a new tensor over the storage of the
    tensor ``held`` has for it (a trained weight, when the model is prepared again), else the
    node's own.

    :param step: the Constant node's step.
    :param dev: the graph's device.
    :param held: tensors holding initializers' values already, by name (or None).
    :returns: the value, named as the node's output.
    """
    name = step.outputs[0]
    if held is not None and name in held:
        return Tensor(data=held[name].data.detach(), requires_grad=False, name=name)
    value = _evaluate_constant(step)
    place_constant(value, dev)
    value.name = name
    value.creator = None
    return value


def _evaluate_constant(step: Step) -> Tensor:
    """The value of a Constant node, computed once when the graph is compiled."""
    try:
        return step.convert(step.info, [], step.attrs)
    except Exception as e:
        failure = node_error(step.info, [], [], e, blames_input=False)
        if failure is e:
            raise
        raise failure from e
