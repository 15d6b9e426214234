"""Importer registrations for the random generators: see sonnx.operators.randomness.generators."""

from __future__ import annotations

from sonnx.onnx.registry import register_operator
from sonnx.operators.randomness.generators import (
    Bernoulli,
    Multinomial,
    RandomNormal,
    RandomNormalLike,
    RandomUniform,
    RandomUniformLike,
)

register_operator(RandomUniform, 1, 22)
register_operator(RandomNormal, 1, 22)
register_operator(RandomUniformLike, 1, 22)
register_operator(RandomNormalLike, 1, 22)
register_operator(Bernoulli, 15, 22)
register_operator(Multinomial, 7, 22)
