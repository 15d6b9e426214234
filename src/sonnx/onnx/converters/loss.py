"""Importer registrations for loss: see sonnx.operators.loss."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.loss import NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss

register_operator(NegativeLogLikelihoodLoss, 12, 13, 22)
register_operator(SoftmaxCrossEntropyLoss, 12, 13)
