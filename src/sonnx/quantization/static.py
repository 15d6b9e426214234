"""``quantize_static``: a float ONNX model and calibration feeds in, the QDQ model out, as
onnxruntime's ``quantize_static(..., quant_format=QuantFormat.QDQ)`` writes it: the same
options with the same names and defaults, the same ranges, scales, zero points and Q/DQ
placement. Calibration runs the model in sonnx, so onnxruntime need not be installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

import onnx
import onnx.version_converter
from google.protobuf.message import DecodeError

from sonnx.errors import BadInputError, BadModelError
from sonnx.onnx.model_loading import opset_versions
from sonnx.quantization.calibration import (
    CalibrationOptions,
    calibrate,
    calibration_method,
    tensors_to_calibrate,
)
from sonnx.quantization.options import QuantizeOptions, names_of
from sonnx.quantization.placement import DEFAULT_OP_TYPES, place
from sonnx.quantization.qtypes import QType, qtype
from sonnx.quantization.rewrite import MS_DOMAIN, rewrite

__all__ = ["quantize_static"]


def quantize_static(
    model: str | PathLike | onnx.ModelProto | Any,
    calibration: Iterable[Mapping[str, Any] | list[Any]] | Any,
    *,
    op_types_to_quantize: Iterable[str] | None = None,
    per_channel: bool = False,
    reduce_range: bool = False,
    activation_type: Any = "int8",
    weight_type: Any = "int8",
    nodes_to_quantize: Iterable[str] | None = None,
    nodes_to_exclude: Iterable[str] | None = None,
    calibrate_method: Any = "minmax",
    extra_options: Mapping[str, Any] | None = None,
) -> onnx.ModelProto:
    """Quantize ``model`` statically to the QDQ format: weights stored as integers read by
    DequantizeLinear, activations through QuantizeLinear/DequantizeLinear pairs with scales
    from the ranges seen on ``calibration``.

    The arguments are onnxruntime's ``quantize_static`` ones with its defaults (int8
    activations and weights; onnxruntime's guide suggests ``activation_type="uint8"`` with
    ``reduce_range=True`` for x86 CPUs without VNNI).

    :param model: the float model: a path, an ``onnx.ModelProto`` (not modified) or a
        :class:`~sonnx.SingaRep` (its current, perhaps trained, weights).
    :param calibration: the feeds to calibrate on: an iterable of dicts by input name or of
        lists in input order, or onnxruntime's ``CalibrationDataReader`` (anything with
        ``get_next()``).
    :param op_types_to_quantize: the operator types to quantize (None: every type
        onnxruntime quantizes in QDQ form).
    :param per_channel: one scale per output channel for Conv, Gemm and MatMul weights.
    :param reduce_range: 7-bit weights (and constant activations), for CPUs without VNNI.
    :param activation_type: ``"int8"``, ``"uint8"``, ``"int16"``, ``"uint16"``, ``"int4"``,
        ``"uint4"`` or an onnxruntime ``QuantType``.
    :param weight_type: as ``activation_type``; 16-bit types raise the opset to 21, 4-bit
        ones below opset 21 use the ``com.microsoft`` Q/DQ operators, as onnxruntime does.
    :param nodes_to_quantize: when given, only these nodes (by name).
    :param nodes_to_exclude: nodes (by name) left in float.
    :param calibrate_method: ``"minmax"``, ``"percentile"``, ``"entropy"`` or onnxruntime's
        ``CalibrationMethod`` member.
    :param extra_options: onnxruntime's ``extra_options``; the implemented keys are in
        :data:`sonnx.quantization.options.EXTRA_OPTIONS`.
    :returns: the quantized model (a new ``onnx.ModelProto``).
    :raises BadInputError: an unknown type, method, option or model argument; activation
        int8 with uint8 weights (onnxruntime refuses it too); a calibration feed with an
        unknown or missing input, or the wrong dtype or fixed dims (naming the input); no
        calibration feed at all.
    :raises BadModelError: the model has nothing to quantize.
    """
    activation, weight = (
        qtype(activation_type, "activation_type"),
        qtype(weight_type, "weight_type"),
    )
    if activation.name == "int8" and weight.name == "uint8":
        raise BadInputError(
            "quantize_static: int8 activations cannot be multiplied with uint8 weights "
            "(onnxruntime's kernels take uint8 or int8 activations with int8 weights, or "
            "uint8 with uint8), received activation_type='int8', weight_type='uint8'"
        )
    extra = QuantizeOptions.extra(extra_options)
    options = QuantizeOptions(
        activation=activation,
        weight=weight,
        per_channel=bool(per_channel),
        reduce_range=bool(reduce_range),
        op_types=names_of(op_types_to_quantize, "op_types_to_quantize") or DEFAULT_OP_TYPES,
        nodes_to_quantize=names_of(nodes_to_quantize, "nodes_to_quantize"),
        nodes_to_exclude=names_of(nodes_to_exclude, "nodes_to_exclude"),
        calibration=CalibrationOptions(
            calibration_method(calibrate_method),
            extra["CalibTensorRangeSymmetric"],
            bool(extra["CalibMovingAverage"]),
            float(extra["CalibPercentile"]),
        ),
        activation_symmetric=bool(extra["ActivationSymmetric"]),
        weight_symmetric=extra["WeightSymmetric"],
        force_quantize_no_input_check=bool(extra["ForceQuantizeNoInputCheck"]),
        exclude_output_ops=frozenset(extra["OpTypesToExcludeOutputQuantization"]),
        add_qdq_pair_to_weight=bool(extra["AddQDQPairToWeight"]),
        quantize_bias=bool(extra["QuantizeBias"]),
        per_channel_axis=dict(extra["QDQOpTypePerChannelSupportToAxis"]),
        keep_removable_activations=bool(extra["QDQKeepRemovableActivations"]),
        disable_weight_adjust_for_int32_bias=bool(extra["QDQDisableWeightAdjustForInt32Bias"]),
        min_real_range=extra["MinimumRealRange"],
    )
    proto, domain = _at_supported_opset(_float_model(model), activation, weight)
    proto = onnx.shape_inference.infer_shapes(proto)
    if not any(options.quantizes(n) for n in proto.graph.node):
        raise BadModelError(
            "quantize_static: the model has nothing to quantize: no node of the operator types "
            f"{sorted(options.op_types)} is selected; received nodes of types "
            f"{sorted({n.op_type for n in proto.graph.node})}"
        )
    names = tensors_to_calibrate(proto, set(options.op_types))
    ranges = calibrate(proto, calibration, names, options.calibration)
    placement = place(proto, ranges, options)
    if not placement.tensors:
        raise BadModelError(
            "quantize_static: the model has nothing to quantize: the selected nodes read and "
            "write no float tensor; received nodes of types "
            f"{sorted({n.op_type for n in proto.graph.node if options.quantizes(n)})}"
        )
    quantized = rewrite(placement, options, domain)
    if domain == MS_DOMAIN and not any(o.domain == MS_DOMAIN for o in quantized.opset_import):
        quantized.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    quantized.producer_name = "sonnx.quantization"
    return quantized


def _float_model(model: Any, caller: str = "quantize_static") -> onnx.ModelProto:
    """A copy of the model to quantize, from a path, a ModelProto, serialized bytes or a
    SingaRep; errors name ``caller``."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    if isinstance(model, (str, PathLike)):
        try:
            return onnx.load(model)
        except (OSError, DecodeError) as error:
            raise BadModelError(
                f"{caller}: cannot read the model file {str(model)!r}: {error}"
            ) from error
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model)
        except DecodeError as error:
            raise BadModelError(f"{caller}: the bytes are not an ONNX model: {error}") from error
    if callable(getattr(model, "current_model", None)):
        return model.current_model()
    raise BadInputError(
        f"{caller}: model must be a path, an onnx.ModelProto or a SingaRep, received "
        f"{type(model).__name__}"
    )


def _at_supported_opset(
    model: onnx.ModelProto, activation: QType, weight: QType
) -> tuple[onnx.ModelProto, str]:
    """onnxruntime's ``update_opset_version``: 16-bit types need opset 21 (the model is
    converted), opsets below 10 become 11; 4-bit types below opset 21 take the
    ``com.microsoft`` QuantizeLinear/DequantizeLinear. Returns the model and the Q/DQ
    domain."""
    opset = opset_versions(model)[""]
    target = opset
    if opset < 21 and 16 in (activation.bits, weight.bits):
        target = 21
    elif opset < 10:
        target = 11
    if target != opset:
        model = onnx.version_converter.convert_version(model, target)
    four_bit = 4 in (activation.bits, weight.bits)
    return model, MS_DOMAIN if target < 21 and four_bit else ""
