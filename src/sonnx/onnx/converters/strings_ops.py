"""Importer registrations for the string operators: see sonnx.autograd.strings_ops."""

from sonnx.autograd.strings_ops import (
    RegexFullMatch,
    StringConcat,
    StringNormalizer,
    StringSplit,
)
from sonnx.onnx.registry import register_operator

register_operator(StringNormalizer, 10)
register_operator(StringConcat, 20)
register_operator(StringSplit, 20)
register_operator(RegexFullMatch, 20)
