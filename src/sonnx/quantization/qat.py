"""Quantization-aware training of any ONNX model: :func:`prepare_qat` makes the graph that
trains with fake quantization, :func:`convert` writes the trained QDQ model.

The trained graph is an ONNX QDQ graph throughout: float weights behind
QuantizeLinear -> DequantizeLinear pairs, activations through pairs with their calibrated
scales, float biases. While a run records gradients each pair runs as one differentiable call
(:mod:`~sonnx.quantization.fake_quant`); otherwise it runs as its nodes, so inference on the
trained graph computes what onnxruntime computes on the converted model. Training uses what
any prepared model uses: ``autograd.training``, ``opt.*``, ``SONNXModel``, ``DistOpt``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

import onnx

from sonnx.device import Device
from sonnx.errors import BadInputError, BadModelError
from sonnx.quantization.fake_quant import FAKE_QUANTIZE, fake_quant_fusions
from sonnx.quantization.qat_graph import deployable_qdq, fold_batch_norms, trainable_qdq
from sonnx.quantization.static import _float_model, quantize_static
from sonnx.runtime.rep import SingaRep, prepare

__all__ = ["convert", "prepare_qat"]

_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def prepare_qat(
    model: str | PathLike | onnx.ModelProto | SingaRep,
    calibration: Iterable[Mapping[str, Any] | list[Any]] | Any = None,
    *,
    learn_scales: bool = False,
    fold_batch_norm: bool = True,
    device: Device | None = None,
    **options: Any,
) -> SingaRep:
    """The model, ready for quantization-aware training.

    A float model is calibrated and given Q/DQ pairs as :func:`quantize_static` places them,
    with ``options`` (its keyword arguments: ``per_channel``, ``weight_type``,
    ``activation_type``, ``calibrate_method``, ...); its weights and biases stay float and
    trainable, each weight behind its own pair. A model that already carries QDQ (from
    onnxruntime's ``quantize_static``, from :func:`quantize_static`, or a trained graph saved
    earlier) keeps its placement, scales and zero points as the start; its integer weights
    and int32 biases become float ones again, and ``calibration`` is not needed.

    :param model: a path, an ``onnx.ModelProto`` or a :class:`~sonnx.SingaRep` (its current
        weights).
    :param calibration: the feeds that calibrate a float model's activations (as for
        :func:`quantize_static`); unused for a model that carries QDQ.
    :param learn_scales: train the scales too, with LSQ's gradient (Esser et al. 2019); they
        then appear in ``rep.params``. Otherwise they stay at their calibrated values.
    :param fold_batch_norm: fold each BatchNormalization that follows a Conv into it before
        quantizing, so that the weight trained through fake quantization is the weight
        deployed (a float model only).
    :param device: where the model trains (None: the default device).
    :param options: :func:`quantize_static`'s keyword options, for a float model.
    :returns: the prepared model, trainable, its Q/DQ pairs fake-quantizing in training.
    :raises BadInputError: a float model without ``calibration``, options given for a model
        that carries QDQ, or what :func:`quantize_static` raises for the feeds and options.
    :raises BadModelError: the model has nothing to quantize.
    """
    proto = _float_model(model)
    if any(n.op_type in _QDQ for n in proto.graph.node):
        if options:
            raise BadInputError(
                "prepare_qat: the model already carries QuantizeLinear/DequantizeLinear nodes, "
                f"so it keeps their placement and types; received options {sorted(options)}"
            )
        graph = trainable_qdq(proto)
    else:
        if calibration is None:
            raise BadInputError(
                "prepare_qat: a float model needs calibration feeds to set its activations' "
                "scales; received calibration=None"
            )
        if fold_batch_norm:
            proto = fold_batch_norms(proto)
        extra = {
            **dict(options.pop("extra_options", None) or {}),
            "AddQDQPairToWeight": True,
            "QuantizeBias": False,
        }
        graph = trainable_qdq(quantize_static(proto, calibration, extra_options=extra, **options))
    rep = prepare(graph, device=device)
    fake_quantize = functools.partial(_fake_quantize, learn_scales=learn_scales)
    fake_quantize(rep)
    # Done again to a rep prepared from a rewrite of this one (lora.add's adapters).
    rep.rewrites = (*rep.rewrites, fake_quantize)
    return rep


def _fake_quantize(rep: SingaRep, learn_scales: bool) -> None:
    """Run the program's Q/DQ pairs as fake-quantizing groups in training (their scales
    trainable with ``learn_scales``)."""
    pairs = fake_quant_fusions(rep.program, learn_scales)
    if not pairs:
        raise BadModelError(
            "prepare_qat: the model has no QuantizeLinear -> DequantizeLinear pair of an "
            "integer type with initializer scales to fake-quantize"
        )
    rep.program.fuse(pairs.values())
    if learn_scales:
        for pair in pairs.values():
            scale = rep.constants[pair.inputs[1]]
            scale.requires_grad = scale.stores_grad = True
            rep.tensor_map[pair.inputs[1]] = scale


def convert(rep: SingaRep) -> onnx.ModelProto:
    """The trained model in onnxruntime's QDQ format: integer weights behind
    DequantizeLinear, int32 biases, activations through their Q/DQ pairs with the trained
    scales. onnxruntime runs it with its integer kernels; sonnx runs it too, with the
    outputs of ``rep`` in inference.

    :param rep: a model from :func:`prepare_qat`, trained or not.
    :returns: a new ``onnx.ModelProto``.
    :raises BadInputError: ``rep`` is not a SingaRep, or carries no fake quantization.
    """
    if not isinstance(rep, SingaRep):
        raise BadInputError(
            f"convert: expected a SingaRep from prepare_qat, received {type(rep).__name__}"
        )
    if not any(f.name == FAKE_QUANTIZE for f in rep.program.fusions.values()):
        raise BadInputError(
            "convert: the model carries no fake quantization; make it with "
            "sonnx.quantization.prepare_qat (a model from prepare() is converted by "
            "quantize_static)"
        )
    deployed = deployable_qdq(rep.current_model())
    deployed.producer_name = "sonnx.quantization"
    return deployed
