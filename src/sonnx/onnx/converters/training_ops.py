"""Importer registrations for the ``ai.onnx.preview.training`` optimizer operators: see
sonnx.autograd.training_ops."""

from __future__ import annotations

from sonnx.autograd.training_ops import TRAINING_DOMAIN, Adagrad, Adam, Momentum
from sonnx.onnx.registry import register_operator

register_operator(Adagrad, 1, domain=TRAINING_DOMAIN)
register_operator(Adam, 1, domain=TRAINING_DOMAIN)
register_operator(Momentum, 1, domain=TRAINING_DOMAIN)
