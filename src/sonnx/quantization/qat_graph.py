"""The ONNX rewrites around quantization-aware training: from a float or QDQ model to the
graph that trains, and from the trained graph back to the QDQ model onnxruntime deploys.

- :func:`fold_batch_norms`: a BatchNormalization after a Conv goes into the Conv's weight and
  bias, so that the weight fake-quantized in training is the one deployed (see the guide);
- :func:`trainable_qdq`: an integer weight behind a DequantizeLinear becomes a float weight
  behind a QuantizeLinear -> DequantizeLinear pair, and an int32 bias a float one, so both
  train; the scales and zero points stay;
- :func:`deployable_qdq`: the reverse, with the trained values: each weight quantized into an
  integer initializer ``<weight>_quantized``, each bias into int32 with scale
  ``input_scale * weight_scale``, as onnxruntime's ``quantize_static`` writes them.

Which bias goes with which scales is recorded in the trainable graph's ``metadata_props``
under :data:`BIASES_KEY`, so the graph carries it through training, export and re-import.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["BIASES_KEY", "deployable_qdq", "fold_batch_norms", "trainable_qdq"]

#: metadata key: JSON ``{bias: [input scale name, weight scale name]}``.
BIASES_KEY = "sonnx.qat.biases"
#: Operators whose inputs are (activation, weight, bias), with the bias quantized to int32.
_BIASED = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "Gemm",
        "LayerNormalization",
        "InstanceNormalization",
        "BatchNormalization",
    }
)
_Q, _DQ = "QuantizeLinear", "DequantizeLinear"
_INT32 = np.iinfo(np.int32)


def _initializers(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in graph.initializer}


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _broadcast(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a tensor of ``shape`` (as
    QuantizeLinear reads it: scalar, per axis, or per block along ``axis``)."""
    if p.size == 1:
        return p.reshape(())
    axis %= len(shape)
    if block:
        return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)
    dims = [1] * len(shape)
    dims[axis] = shape[axis]
    return p.reshape(dims)


def _remove_unused_initializers(graph: onnx.GraphProto, names: set[str]) -> None:
    used = {n for node in graph.node for n in node.input}
    used |= {v.name for v in graph.output} | {v.name for v in graph.input}
    kept = [t for t in graph.initializer if t.name not in names or t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def fold_batch_norms(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each inference-mode BatchNormalization that follows a Conv folded into
    it: ``W * g / sqrt(v + eps)`` per output channel and ``(b - m) * g / sqrt(v + eps) + B``.
    A pair is folded when the Conv's output is read by the BatchNormalization alone, the
    Conv's weight and bias are initializers no other node reads, and the statistics are
    initializers (or their Identity copies, which torch's exporter writes for equal ones).

    :param model: the model (not modified).
    :returns: a new model.
    """
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    inits, readers = _initializers(graph), _readers(graph)
    outputs = {v.name for v in graph.output}
    producer = {o: n for n in graph.node for o in n.output}

    def constant(name: str) -> np.ndarray | None:
        node = producer.get(name)
        if node is not None and node.op_type == "Identity":
            name = node.input[0]
        init = inits.get(name)
        if init is None or init.data_type != onnx.TensorProto.FLOAT:
            return None
        return numpy_helper.to_array(init)

    for bn in [n for n in graph.node if n.op_type == "BatchNormalization" and n.domain == ""]:
        conv = producer.get(bn.input[0])
        if (
            conv is None
            or conv.op_type != "Conv"
            or len(bn.output) != 1
            or _attr(bn, "training_mode", 0)
            or bn.input[0] in outputs
            or len(readers[bn.input[0]]) != 1
            or not all(n in inits and len(readers[n]) == 1 for n in conv.input[1:])
        ):
            continue
        statistics = [constant(n) for n in bn.input[1:]]
        if any(s is None for s in statistics) or constant(conv.input[1]) is None:
            continue
        gamma, beta, mean, var = statistics
        w = numpy_helper.to_array(inits[conv.input[1]])
        bias = (
            numpy_helper.to_array(inits[conv.input[2]])
            if len(conv.input) > 2
            else np.zeros(w.shape[0], np.float32)
        )
        factor = gamma / np.sqrt(var + np.float32(_attr(bn, "epsilon", 1e-5)))
        w_name = conv.input[1]
        b_name = conv.input[2] if len(conv.input) > 2 else _free_name(graph, f"{w_name}_bias")
        for name, value in (
            (w_name, w * factor.reshape(-1, *([1] * (w.ndim - 1)))),
            (b_name, (bias - mean) * factor + beta),
        ):
            if name in inits:
                graph.initializer.remove(inits[name])
            inits[name] = numpy_helper.from_array(value.astype(np.float32), name)
            graph.initializer.append(inits[name])
        if len(conv.input) < 3:
            conv.input.append(b_name)
        conv.output[0] = bn.output[0]
        graph.node.remove(bn)
    _drop_dead_copies(graph)
    return folded


def _drop_dead_copies(graph: onnx.GraphProto) -> None:
    """Remove the Identity nodes and initializers that nothing reads any more."""
    outputs = {v.name for v in graph.output}
    read = {n for node in graph.node for n in node.input}
    for node in [n for n in graph.node if n.op_type == "Identity"]:
        if node.output[0] not in read and node.output[0] not in outputs:
            graph.node.remove(node)
    # an initializer also listed as a graph input (IR < 4) stays: it is the input's default
    used = {n for node in graph.node for n in node.input} | outputs | {v.name for v in graph.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _scale_and_zero_point(
    node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]
) -> tuple[onnx.TensorProto, onnx.TensorProto | None] | None:
    """A Q or DQ node's scale and zero point initializers (zero point None when absent);
    None when either is computed rather than stored."""
    scale = inits.get(node.input[1])
    named_zp = node.input[2] if len(node.input) > 2 else ""
    zp = inits.get(named_zp) if named_zp else None
    if scale is None or (named_zp and zp is None):
        return None
    return scale, zp


def _dequantized(
    q: onnx.TensorProto, scale: onnx.TensorProto, zp: onnx.TensorProto | None, node: onnx.NodeProto
) -> np.ndarray:
    values = numpy_helper.to_array(q).astype(np.float32)
    axis, block = int(_attr(node, "axis", 1)), int(_attr(node, "block_size", 0))
    s = _broadcast(numpy_helper.to_array(scale).astype(np.float32), values.shape, axis, block)
    if zp is not None:
        z = numpy_helper.to_array(zp).astype(np.float32)
        values = values - _broadcast(z, values.shape, axis, block)
    return (values * s).astype(numpy_helper.to_array(scale).dtype)


def _free_name(graph: onnx.GraphProto, base: str) -> str:
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    taken |= {v.name for v in graph.input}
    name, count = base, 0
    while name in taken:
        count += 1
        name = f"{base}_{count}"
    return name


def trainable_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ ``model`` in the form that trains: each integer weight read by a
    DequantizeLinear becomes its dequantized float value behind a QuantizeLinear with the
    same scale and zero point (named as onnxruntime named the float weight: the integer
    initializer's name without ``_quantized``), each int32 bias a float initializer under the
    name its reader reads, and the biases' scales are recorded under :data:`BIASES_KEY`.

    :param model: a QDQ model (not modified): from onnxruntime's ``quantize_static``,
        :func:`~sonnx.quantization.quantize_static`, or a trainable graph already.
    :returns: a new model.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits, readers = _initializers(graph), _readers(graph)
    for node in [n for n in graph.node if n.op_type == _DQ and n.input[0] in inits]:
        if len(readers[node.input[0]]) != 1:
            continue  # an integer tensor dequantized twice: left as it is
        x = inits[node.input[0]]
        parameters = _scale_and_zero_point(node, inits)
        if parameters is None:
            continue
        scale, zp = parameters
        value = _dequantized(x, scale, zp, node)
        if x.data_type == onnx.TensorProto.INT32:
            # a bias: its reader reads the DequantizeLinear's output; that becomes the float bias
            graph.node.remove(node)
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            base = x.name.removesuffix("_quantized")
            float_name = _free_name(graph, base) if base != x.name else f"{x.name}_float"
            graph.initializer.append(numpy_helper.from_array(value, float_name))
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs.pop("output_dtype", None)
            quantize = onnx.helper.make_node(
                _Q,
                [float_name, *node.input[1:]],
                [x.name],
                f"{float_name}_QuantizeLinear",
                domain=node.domain,
                **attrs,
            )
            graph.node.insert(list(graph.node).index(node), quantize)
        graph.initializer.remove(x)
        _remove_unused_initializers(graph, set(node.input[1:]))
    _record_biases(out)
    return out


def _record_biases(model: onnx.ModelProto) -> None:
    """Record each float bias of a node whose activation and weight come from
    DequantizeLinear nodes with initializer scales, with those scales' names."""
    graph = model.graph
    inits = _initializers(graph)
    producer = {o: n for n in graph.node for o in n.output}
    biases: dict[str, list[str]] = {}
    for node in graph.node:
        if node.op_type not in _BIASED or len(node.input) < 3 or node.input[2] not in inits:
            continue
        if inits[node.input[2]].data_type != onnx.TensorProto.FLOAT:
            continue
        sources = [producer.get(name) for name in node.input[:2]]
        if all(s is not None and s.op_type == _DQ and s.input[1] in inits for s in sources):
            biases[node.input[2]] = [s.input[1] for s in sources]  # type: ignore[union-attr]
    kept = [p for p in model.metadata_props if p.key != BIASES_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    if biases:
        entry = model.metadata_props.add()
        entry.key, entry.value = BIASES_KEY, json.dumps(biases, sort_keys=True)


def _quantized_weight(
    x: np.ndarray, scale: np.ndarray, zp: onnx.TensorProto | None, node: onnx.NodeProto
) -> tuple[np.ndarray, int]:
    """QuantizeLinear's integers for ``x`` (float32 division, half-to-even rounding,
    saturation) and their ONNX type."""
    axis, block = int(_attr(node, "axis", 1)), int(_attr(node, "block_size", 0))
    s = _broadcast(scale.astype(np.float32), x.shape, axis, block)
    q = np.round(x.astype(np.float32) / s)
    onnx_type = zp.data_type if zp is not None else onnx.TensorProto.UINT8
    if zp is not None:
        q = q + _broadcast(numpy_helper.to_array(zp).astype(np.float32), x.shape, axis, block)
    low, high = _type_range(onnx_type)
    return np.clip(q, low, high), onnx_type


def _type_range(onnx_type: int) -> tuple[int, int]:
    bits = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}.get(onnx_type)
    if bits is not None:
        signed = onnx_type == onnx.TensorProto.INT4
        return (-8, 7) if signed else (0, 15)
    info = np.iinfo(onnx.helper.tensor_dtype_to_np_dtype(onnx_type))
    return int(info.min), int(info.max)


def deployable_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The trained graph as onnxruntime's QDQ format: each float weight behind a
    QuantizeLinear (with initializer scale and zero point, read only by DequantizeLinear
    nodes) stored as its integers ``<weight>_quantized``, the QuantizeLinear gone; each
    recorded bias as int32 ``<bias>_quantized`` with scale ``input_scale * weight_scale`` and
    zero point 0, behind a DequantizeLinear.

    :param model: a trainable graph (see :func:`trainable_qdq`; not modified).
    :returns: a new model.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits, readers = _initializers(graph), _readers(graph)
    for node in [n for n in graph.node if n.op_type == _Q and n.input[0] in inits]:
        parameters = _scale_and_zero_point(node, inits)
        if parameters is None:
            continue
        scale, zp = parameters
        if any(r.op_type != _DQ for r in readers.get(node.output[0], [])):
            continue
        x = inits[node.input[0]]
        q, onnx_type = _quantized_weight(
            numpy_helper.to_array(x), numpy_helper.to_array(scale), zp, node
        )
        name = _free_name(graph, f"{x.name}_quantized")
        graph.initializer.append(
            onnx.helper.make_tensor(name, onnx_type, list(x.dims), q.astype(np.int64).ravel())
        )
        for reader in readers.get(node.output[0], []):
            reader.input[0] = name
        graph.node.remove(node)
        _remove_unused_initializers(graph, {x.name})
    _quantize_biases(out)
    return out


def _quantize_biases(model: onnx.ModelProto) -> None:
    """onnxruntime's int32 bias (``QDQQuantizer._quantize_bias_tensors``) for each recorded
    bias, from the current scales; the record leaves the metadata."""
    graph = model.graph
    record = next((p for p in model.metadata_props if p.key == BIASES_KEY), None)
    if record is None:
        return
    inits = _initializers(graph)
    # the bias's DequantizeLinear takes the domain of its weight's (com.microsoft for 4 bits)
    domains = {n.input[1]: n.domain for n in graph.node if n.op_type == _DQ}
    for bias, (x_scale, w_scale) in json.loads(record.value).items():
        if bias not in inits or x_scale not in inits or w_scale not in inits:
            continue
        data = numpy_helper.to_array(inits[bias])
        scale = numpy_helper.to_array(inits[x_scale]) * numpy_helper.to_array(inits[w_scale])
        q = np.round(data.astype(np.float64) / scale.astype(np.float64))
        q = np.clip(q, np.float64(_INT32.min), np.float64(_INT32.max)).astype(np.int32)
        q_name = _free_name(graph, f"{bias}_quantized")
        scale_data = np.asarray(scale, dtype=data.dtype).reshape(-1)
        per_channel = scale_data.size > 1
        zero = np.zeros(scale_data.size, np.int32) if per_channel else np.array(0, np.int32)
        graph.initializer.extend(
            [
                numpy_helper.from_array(q.reshape(data.shape), q_name),
                numpy_helper.from_array(scale_data, f"{q_name}_scale"),
                numpy_helper.from_array(zero, f"{q_name}_zero_point"),
            ]
        )
        graph.initializer.remove(inits[bias])
        dequantize = onnx.helper.make_node(
            _DQ,
            [q_name, f"{q_name}_scale", f"{q_name}_zero_point"],
            [bias],
            f"{bias}_DequantizeLinear",
            domain=domains.get(w_scale, ""),
            **({"axis": 0} if per_channel else {}),
        )
        graph.node.insert(0, dequantize)
    model.metadata_props.remove(record)
