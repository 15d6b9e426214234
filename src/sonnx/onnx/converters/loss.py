"""Importer registrations for loss: see sonnx.operators.loss."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.loss import NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss

register_operators(NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss)
