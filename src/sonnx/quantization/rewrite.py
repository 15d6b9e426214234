"""Writing the QDQ model: onnxruntime's QDQ quantizer's second pass (``QDQQuantizer``'s
``_quantize_normal_tensors``, ``_quantize_sharing_param_tensors`` and
``_quantize_bias_tensors``) over what :mod:`~sonnx.quantization.placement` marked.

- a weight becomes an integer initializer ``<name>_quantized`` read by a DequantizeLinear
  (with ``AddQDQPairToWeight``, the float weight stays and a QuantizeLinear goes before);
- an activation gets a QuantizeLinear/DequantizeLinear pair, its readers reading the
  DequantizeLinear's output (a graph output keeps its name: the pair goes before it);
- an output sharing its input's scale gets a pair with the input's scale and zero point;
- a bias becomes int32 with zero point 0 and scale ``input_scale * weight_scale * beta``;
  when that scale is too small for the bias to fit in int32, the symmetric int8/int16
  weight's scale grows first (onnxruntime's ``_adjust_weight_scale_for_int32_bias``).

Scales and zero points are initializers named ``<tensor>_scale`` and
``<tensor>_zero_point``, as onnxruntime names them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from sonnx.errors import BadModelError
from sonnx.quantization.options import QuantizeOptions
from sonnx.quantization.placement import Placement
from sonnx.quantization.qtypes import QType, compute_scale_zp, data_quant_params, quantize_array

__all__ = ["MS_DOMAIN", "rewrite"]

MS_DOMAIN = "com.microsoft"
_INT32 = np.iinfo(np.int32)


@dataclass
class _Params:
    """One tensor's zero point(s), scale(s) (float32 or float16) and type; ``axis`` when per
    channel."""

    zero_point: np.ndarray
    scale: np.ndarray
    qt: QType
    axis: int | None = None


class _Writer:
    def __init__(self, placement: Placement, options: QuantizeOptions, domain: str) -> None:
        self.p = placement
        self.options = options
        self.domain = domain
        self.graph = placement.model.graph
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.graph_outputs = {v.name for v in self.graph.output}
        #: tensor -> (scale name, zero point name) once written
        self.written: dict[str, tuple[str, str]] = {}
        #: scale initializer name -> its values
        self.scales: dict[str, np.ndarray] = {}

    # ---- parameters -----------------------------------------------------------------------
    def activation_params(self, name: str) -> _Params | None:
        if name not in self.p.ranges:
            return None
        rmin, rmax = self.p.ranges[name]
        qt = self.options.activation
        symmetric = self.options.activation_symmetric
        qmin, qmax = qt.qmin_qmax(False, symmetric)
        zp, scale = compute_scale_zp(
            np.asarray(rmin), np.asarray(rmax), qmin, qmax, symmetric, self.options.min_real_range
        )
        return _Params(np.array(zp), np.asarray(scale).squeeze(), qt)

    def initializer_params(self, name: str) -> _Params:
        mark = self.p.tensors[name]
        data = numpy_helper.to_array(self.initializers[name])
        qt = self.options.weight if mark.weight else self.options.activation
        symmetric = mark.axis is not None or (
            self.options.weight_is_symmetric(qt)
            if mark.weight
            else self.options.activation_symmetric
        )
        args = (qt, symmetric, self.options.reduce_range, self.options.min_real_range)
        if mark.axis is None:
            zp, scale = data_quant_params(data.flatten(), *args)
            return _Params(np.array(zp), np.asarray(scale), qt)
        pairs = [
            data_quant_params(data.take(i, mark.axis).ravel(), *args)
            for i in range(data.shape[mark.axis])
        ]
        zps = np.array([zp for zp, _ in pairs])
        scales = np.array([s for _, s in pairs], dtype=data.dtype)
        return _Params(zps, scales, qt, mark.axis)

    def adjust_for_biases(self, params: dict[str, _Params]) -> None:
        """Grow a symmetric int8/int16 weight's scale where ``input_scale * weight_scale``
        is too small to hold its bias in int32."""
        if self.options.disable_weight_adjust_for_int32_bias:
            return
        qrange = np.float64(_INT32.max) - np.float64(_INT32.min + 1)
        for bias_name, bias in self.p.biases.items():
            weight = params.get(bias.weight)
            x = self.activation_params(bias.input) if bias.input in self.p.tensors else None
            if weight is None or x is None or weight.qt.name not in ("int8", "int16"):
                continue
            if weight.zero_point.any():
                continue
            data = numpy_helper.to_array(self.initializers[bias_name])
            x_scale = np.float64(np.float32(x.scale).item())
            if weight.axis is None:
                absmax = max(abs(min(data.min(), 0.0)), abs(max(data.max(), 0.0)))
                smallest = np.array([1.0001 * (2.0 * absmax) / qrange])
                scales = weight.scale.reshape(1)
            else:
                smallest = 1.0001 * (2.0 * np.abs(data.astype(np.float64))) / qrange
                scales = weight.scale
            for i in range(scales.size):
                candidate = x_scale * np.float64(scales[i].item())
                if 0.0 < candidate < smallest[i]:
                    scales[i] = np.float64(scales[i].item()) * (smallest[i] / candidate)
            if weight.axis is None:
                weight.scale = scales.reshape(())

    # ---- nodes and initializers -----------------------------------------------------------
    def add_params(self, name: str, params: _Params) -> tuple[str, str]:
        scale_name, zp_name = f"{name}_scale", f"{name}_zero_point"
        self.scales[scale_name] = params.scale
        shape = list(params.scale.shape)
        scale_type = onnx.helper.np_dtype_to_tensor_dtype(params.scale.dtype)
        self.graph.initializer.append(
            onnx.helper.make_tensor(
                zp_name, params.qt.onnx_type, shape, params.zero_point.ravel().tolist()
            )
        )
        self.graph.initializer.append(
            onnx.helper.make_tensor(scale_name, scale_type, shape, params.scale.ravel().tolist())
        )
        return scale_name, zp_name

    def node(self, op: str, inputs: list[str], output: str, name: str, axis: int | None) -> None:
        attrs = {} if axis is None else {"axis": axis}
        self.graph.node.append(
            onnx.helper.make_node(op, inputs, [output], name, domain=self.domain, **attrs)
        )

    def rename_inputs(self, old: str, new: str) -> None:
        for n in self.graph.node:
            for i, name in enumerate(n.input):
                if name == old:
                    n.input[i] = new

    def write_weight(self, name: str, params: _Params) -> None:
        scale_name, zp_name = self.add_params(name, params)
        dq_output = f"{name}_DequantizeLinear_Output"
        self.rename_inputs(name, dq_output)
        if self.options.add_qdq_pair_to_weight:
            q_output = f"{name}_QuantizeLinear_Output"
            self.node(
                "QuantizeLinear",
                [name, scale_name, zp_name],
                q_output,
                f"{name}_QuantizeLinear",
                params.axis,
            )
            self.node(
                "DequantizeLinear",
                [q_output, scale_name, zp_name],
                dq_output,
                f"{name}_DequantizeLinear",
                params.axis,
            )
        else:
            init = self.initializers[name]
            q = _quantized(numpy_helper.to_array(init), params)
            self.graph.initializer.append(
                onnx.helper.make_tensor(
                    f"{name}_quantized", params.qt.onnx_type, list(init.dims), q.ravel().tolist()
                )
            )
            self.node(
                "DequantizeLinear",
                [f"{name}_quantized", scale_name, zp_name],
                dq_output,
                f"{name}_DequantizeLinear",
                params.axis,
            )
        self.written[name] = (scale_name, zp_name)

    def write_activation(self, name: str, scale_name: str, zp_name: str) -> None:
        q_input, dq_output = name, f"{name}_DequantizeLinear_Output"
        if name in self.graph_outputs:
            q_input, dq_output = f"{name}_QuantizeLinear_Input", name
            for n in self.graph.node:
                for i, out in enumerate(n.output):
                    if out == name:
                        n.output[i] = q_input
        else:
            self.rename_inputs(name, dq_output)
        q_output = f"{name}_QuantizeLinear_Output"
        self.node(
            "QuantizeLinear",
            [q_input, scale_name, zp_name],
            q_output,
            f"{name}_QuantizeLinear",
            None,
        )
        self.node(
            "DequantizeLinear",
            [q_output, scale_name, zp_name],
            dq_output,
            f"{name}_DequantizeLinear",
            None,
        )
        self.written[name] = (scale_name, zp_name)

    def write_bias(self, name: str) -> None:
        bias = self.p.biases[name]
        if bias.weight not in self.written or bias.input not in self.written:
            missing = bias.weight if bias.weight not in self.written else bias.input
            raise BadModelError(
                f"quantize_static: node {bias.node!r}: bias {name!r} needs the scale of "
                f"{missing!r}, which is not quantized (received no range or weight for it)"
            )
        init = self.initializers[name]
        data = numpy_helper.to_array(init)
        x_scale = self.scales[self.written[bias.input][0]]
        w_scale = self.scales[self.written[bias.weight][0]]
        scale = x_scale * w_scale * bias.beta
        q = np.round(data.astype(np.float64) / scale.astype(np.float64))
        q = np.clip(q, np.float64(_INT32.min), np.float64(_INT32.max)).astype(np.int32)
        q_name = f"{name}_quantized"
        self.graph.initializer.append(numpy_helper.from_array(q.reshape(tuple(init.dims)), q_name))
        scale_data = np.asarray(scale, dtype=data.dtype).reshape(-1)
        self.graph.initializer.append(numpy_helper.from_array(scale_data, f"{q_name}_scale"))
        zp_name = f"{q_name}_zero_point"
        if scale.size > 1:
            self.graph.initializer.append(
                numpy_helper.from_array(np.zeros(scale.size, np.int32), zp_name)
            )
        else:
            self.graph.initializer.append(
                onnx.helper.make_tensor(zp_name, onnx.TensorProto.INT32, [], [0])
            )
        self.graph.initializer.remove(init)
        self.node(
            "DequantizeLinear",
            [q_name, f"{q_name}_scale", zp_name],
            name,
            f"{name}_DequantizeLinear",
            0 if scale.size > 1 else None,
        )


def _quantized(data: np.ndarray, params: _Params) -> np.ndarray:
    if params.axis is None:
        return quantize_array(
            data.ravel(), params.qt, params.scale, int(params.zero_point)
        ).reshape(data.shape)
    slices = [
        np.expand_dims(
            quantize_array(
                data.take(i, params.axis), params.qt, params.scale[i], int(params.zero_point[i])
            ),
            params.axis,
        )
        for i in range(data.shape[params.axis])
    ]
    return np.concatenate(slices, params.axis)


def rewrite(placement: Placement, options: QuantizeOptions, domain: str) -> onnx.ModelProto:
    """The QDQ model: Q/DQ nodes and integer initializers for every marked tensor, removed
    activations gone, unused float weights dropped, nodes in topological order.
    QuantizeLinear/DequantizeLinear nodes are in ``domain`` (``""`` or
    ``com.microsoft``).

    :raises BadModelError: an activation to quantize has no calibrated range, or a bias's
        input or weight has no scale.
    """
    writer = _Writer(placement, options, domain)
    marks = placement.tensors
    weights = {n: writer.initializer_params(n) for n in marks if n in writer.initializers}
    writer.adjust_for_biases(weights)
    shared = {n: m for n, m in marks.items() if m.shared_from is not None}
    for name, mark in marks.items():
        if mark.shared_from is not None or name in writer.written:
            continue
        if name in weights:
            writer.write_weight(name, weights[name])
            continue
        params = writer.activation_params(name)
        if params is None:
            raise BadModelError(
                f"quantize_static: tensor {name!r} is to be quantized but calibration gave it "
                "no range (received no type for it from shape inference)"
            )
        writer.write_activation(name, *writer.add_params(name, params))
    while shared:
        ready = [n for n, m in shared.items() if m.shared_from in writer.written]
        if not ready:
            raise BadModelError(
                f"quantize_static: tensors {sorted(shared)} share the scale of inputs that are "
                f"not quantized, received {sorted({m.shared_from for m in shared.values()})}"
            )
        for name in ready:
            writer.write_activation(name, *writer.written[shared.pop(name).shared_from])
    if options.quantize_bias:
        for name in placement.biases:
            writer.write_bias(name)
    for node in placement.removed:
        writer.graph.node.remove(node)
    if not options.add_qdq_pair_to_weight:
        _drop_unused_initializers(writer.graph)
    _sort_nodes(writer.graph)
    return placement.model


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {name for n in graph.node for name in n.input} | {v.name for v in graph.output}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """onnxruntime's ``ONNXModel.topological_sort``, so that the nodes come in its order:
    nodes reading nothing first, then the readers of the initializers and graph inputs (by
    sorted name), then breadth first through the outputs."""
    nodes = list(graph.node)
    waiting = [sum(1 for name in n.input if name) for n in nodes]
    readers: dict[str, list[int]] = {}
    ordered = [i for i, count in enumerate(waiting) if count == 0]
    for i, node in enumerate(nodes):
        if waiting[i]:
            for name in node.input:
                if name:
                    readers.setdefault(name, []).append(i)

    def release(name: str) -> None:
        for i in readers.get(name, []):
            waiting[i] -= 1
            if waiting[i] == 0:
                ordered.append(i)

    for name in sorted({t.name for t in graph.initializer} | {v.name for v in graph.input}):
        release(name)
    start = 0
    while start < len(ordered):
        for name in nodes[ordered[start]].output:
            release(name)
        start += 1
    placed = set(ordered)
    ordered += [i for i in range(len(nodes)) if i not in placed]  # left for the checker
    del graph.node[:]
    graph.node.extend(nodes[i] for i in ordered)
