"""Importer registrations for the random generators: see sonnx.operators.randomness.generators."""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.randomness.generators import (
    Bernoulli,
    Multinomial,
    RandomNormal,
    RandomNormalLike,
    RandomUniform,
    RandomUniformLike,
)

register_operators(
    RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli, Multinomial,
)
