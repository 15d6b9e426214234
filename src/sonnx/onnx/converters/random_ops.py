"""Importer registrations for the random generators: see sonnx.autograd.random_ops."""

from __future__ import annotations

from sonnx.autograd.random_ops import (
    Bernoulli,
    Multinomial,
    RandomNormal,
    RandomNormalLike,
    RandomUniform,
    RandomUniformLike,
)
from sonnx.onnx.registry import register_operator

register_operator(RandomUniform, 1, 22)
register_operator(RandomNormal, 1, 22)
register_operator(RandomUniformLike, 1, 22)
register_operator(RandomNormalLike, 1, 22)
register_operator(Bernoulli, 15, 22)
register_operator(Multinomial, 7, 22)
