"""Importer registrations for the ``ai.onnx.preview.training`` optimizer operators: see
sonnx.operators.training.updates."""

from __future__ import annotations

from sonnx.onnx.registry import register_operator
from sonnx.operators.training.updates import TRAINING_DOMAIN, Adagrad, Adam, Momentum

register_operator(Adagrad, 1, domain=TRAINING_DOMAIN)
register_operator(Adam, 1, domain=TRAINING_DOMAIN)
register_operator(Momentum, 1, domain=TRAINING_DOMAIN)
