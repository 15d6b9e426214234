"""The options of :func:`~sonnx.quantization.quantize_static`, checked once: onnxruntime's
arguments and the ``extra_options`` keys sonnx implements, with onnxruntime's names and
defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from sonnx.errors import BadInputError
from sonnx.quantization.calibration import CalibrationOptions
from sonnx.quantization.qtypes import QType

__all__ = ["EXTRA_OPTIONS", "QuantizeOptions", "names_of"]

#: The ``extra_options`` keys implemented, with their onnxruntime defaults.
EXTRA_OPTIONS: dict[str, Any] = {
    "ActivationSymmetric": False,
    "WeightSymmetric": None,
    "ForceQuantizeNoInputCheck": False,
    "OpTypesToExcludeOutputQuantization": [],
    "AddQDQPairToWeight": False,
    "QuantizeBias": True,
    "QDQOpTypePerChannelSupportToAxis": {},
    "QDQKeepRemovableActivations": False,
    "QDQDisableWeightAdjustForInt32Bias": False,
    "MinimumRealRange": None,
    "CalibTensorRangeSymmetric": None,
    "CalibMovingAverage": False,
    "CalibPercentile": 99.999,
}


@dataclass(frozen=True)
class QuantizeOptions:
    """Everything the placement and the rewriting read."""

    activation: QType
    weight: QType
    per_channel: bool
    reduce_range: bool
    op_types: frozenset[str]
    nodes_to_quantize: frozenset[str]
    nodes_to_exclude: frozenset[str]
    calibration: CalibrationOptions
    activation_symmetric: bool = False
    weight_symmetric: bool | None = None
    force_quantize_no_input_check: bool = False
    exclude_output_ops: frozenset[str] = frozenset()
    add_qdq_pair_to_weight: bool = False
    quantize_bias: bool = True
    per_channel_axis: Mapping[str, int] = field(default_factory=dict)
    keep_removable_activations: bool = False
    disable_weight_adjust_for_int32_bias: bool = False
    min_real_range: float | None = None

    def quantizes(self, node: onnx.NodeProto) -> bool:
        """onnxruntime's ``should_quantize_node``."""
        if self.nodes_to_quantize and node.name not in self.nodes_to_quantize:
            return False
        return (
            node.op_type in self.op_types
            and node.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and node.name not in self.nodes_to_exclude
        )

    def weight_is_symmetric(self, qt: QType) -> bool:
        """``WeightSymmetric`` if given, else whether the type is signed (8, 16 or 4 bits)."""
        return qt.signed if self.weight_symmetric is None else self.weight_symmetric

    @classmethod
    def extra(cls, extra_options: Mapping[str, Any] | None) -> dict[str, Any]:
        """``extra_options`` over the defaults.

        :raises BadInputError: a key sonnx does not implement (all named, with the ones it
            does).
        """
        given = dict(extra_options or {})
        unknown = sorted(set(given) - set(EXTRA_OPTIONS))
        if unknown:
            raise BadInputError(
                f"quantize_static: extra_options {unknown} are not implemented; the "
                f"implemented ones are {sorted(EXTRA_OPTIONS)}, received keys {sorted(given)}"
            )
        return {**EXTRA_OPTIONS, **given}


def names_of(value: Iterable[str] | None, what: str) -> frozenset[str]:
    """Names (operator types or nodes) from a list of strings; None gives none.

    :raises BadInputError: not a list of strings, naming ``what`` and ending in what was
        received.
    """
    if value is None:
        return frozenset()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise BadInputError(
            f"quantize_static: {what} must be a list of strings, received {value!r}"
        )
    return frozenset(value)
