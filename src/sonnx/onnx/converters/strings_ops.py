"""Importer registrations for the string operators: see sonnx.operators.text.strings."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.text.strings import (
    RegexFullMatch,
    StringConcat,
    StringNormalizer,
    StringSplit,
)

register_operators(StringNormalizer, StringConcat, StringSplit, RegexFullMatch)
