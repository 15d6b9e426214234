"""Importer registrations for the ``ai.onnx.preview.training`` optimizer operators: see
sonnx.operators.training.updates."""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.training.updates import Adagrad, Adam, Momentum

register_operators(Adagrad, Adam, Momentum)
