"""The string operators (``strings``), TfIdfVectorizer and com.microsoft Tokenizer
(``features``).
"""

from sonnx.engine.operator import Operator
from sonnx.operators.text import features, strings

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    strings.StringNormalizer,
    strings.StringConcat,
    strings.StringSplit,
    strings.RegexFullMatch,
    features.TfIdfVectorizer,
    features.Tokenizer,
)
