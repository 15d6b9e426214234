"""Importer registrations for the string operators: see sonnx.operators.text.strings."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.text.strings import (
    RegexFullMatch,
    StringConcat,
    StringNormalizer,
    StringSplit,
)

register_operator(StringNormalizer, 10)
register_operator(StringConcat, 20)
register_operator(StringSplit, 20)
register_operator(RegexFullMatch, 20)
