"""Importer registrations for loss: see sonnx.autograd.loss."""

from sonnx.autograd.loss import NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
from sonnx.onnx.registry import register_operator

register_operator(NegativeLogLikelihoodLoss, 12, 13, 22)
register_operator(SoftmaxCrossEntropyLoss, 12, 13)
