"""String operators of the default ONNX domain: StringConcat, StringSplit, StringNormalizer and
RegexFullMatch.

They read characters, so each sets ``takes_strings = True`` and receives the
:class:`~sonnx.strings.StringArray` of a string input (see :func:`sonnx.strings.run_on_strings`);
strings come out as StringArrays, masks and lengths as torch tensors on the model's device.
Where the ONNX reference implementation and onnxruntime disagree (StringNormalizer), sonnx
follows the specification's wording, which onnxruntime implements.
"""

from __future__ import annotations

import operator
import re
from functools import cache
from typing import Any

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.singa_functions import (
    REQUIRED,
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.errors import BadInputError
from sonnx.operators.conv.windows import require_opset
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.strings import StringArray, numbers, object_array
from sonnx.tensor import Tensor

__all__ = [
    "RegexFullMatch",
    "StringConcat",
    "StringNormalizer",
    "StringSplit",
    "regex_full_match",
    "string_concat",
    "string_normalizer",
    "string_split",
]

CASE_ACTIONS = ("NONE", "LOWER", "UPPER")


def string_input(op_type: str, position: int, name: str, value: Any) -> np.ndarray:
    """The NumPy object array of input ``position`` (``name``), which must be strings."""
    if type(value) is not StringArray:
        received = dtype_name(value.dtype) if hasattr(value, "dtype") else type(value).__name__
        raise BadInputError(
            f"{op_type}: input {position} ({name}) must be a string tensor, received {received}"
        )
    return value.array


class _StringOp(Operator):
    """An operator of opset 20 or later whose string inputs arrive as StringArrays."""

    takes_strings = True
    since = 20

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, self.since)
        super().export(g, inputs, outputs)


class StringConcat(_StringOp):
    """ONNX StringConcat: ``X + Y`` elementwise, broadcasting NumPy-style."""

    op_type = "StringConcat"
    since_versions = (20,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "string_concat",
            "The strings of ``x`` followed by those of ``y``, elementwise with broadcasting.",
            inputs=(
                Input("x", "a string tensor."),
                Input("y", "a string tensor broadcastable with ``x``."),
            ),
            returns="a string tensor of the broadcast shape (ONNX StringConcat).",
            raises=(("BadInputError", "an input does not hold strings."),),
        ),
    )

    def forward(self, x: StringArray, y: StringArray) -> StringArray:
        a = string_input(self.op_type, 0, "X", x)
        b = string_input(self.op_type, 1, "Y", y)
        joined = np.frompyfunc(operator.add, 2, 1)(a, b)
        return StringArray(np.asarray(joined, dtype=object))


class StringSplit(_StringOp):
    """ONNX StringSplit: Y holds each element's substrings along a new last axis, padded with
    ``""`` to the longest; Z (int64, X's shape) how many substrings each element has.

    Without ``delimiter`` (or with ``""``) runs of whitespace separate and leading or trailing
    whitespace is dropped, as Python's ``str.split()`` does; ``maxsplit`` caps the splits (the
    last substring keeps no trailing whitespace, as the specification and onnxruntime say; the
    reference implementation keeps it).
    An empty element split at a delimiter gives one substring, ``""``, as in the ONNX reference
    implementation (onnxruntime gives none).
    """

    op_type = "StringSplit"
    since_versions = (20,)
    output_shape = OutputShape.VALUE_SIZED

    singa_functions = (
        SingaFunction(
            "string_split",
            (
                '(substrings padded with ``""``, their counts) of each string of ``x`` split at '
                "``delimiter`` (whitespace runs when None), at most ``maxsplit`` times."
            ),
            inputs=(Input("x", "a string tensor."),),
            returns=(
                "``(y, z)``: the substrings along a new last axis, and the int64 count per string "
                "(ONNX StringSplit)."
            ),
            keywords=(
                Keyword(
                    "delimiter", 'the separator; None (or ``""``) splits at runs of whitespace.'
                ),
                Keyword("maxsplit", "the most splits per string; None for no limit."),
            ),
            raises=(("BadInputError", "``x`` does not hold strings."),),
            result="tuple[Tensor, Tensor]",
        ),
    )

    def forward(self, x: StringArray) -> tuple[StringArray, torch.Tensor]:
        values = string_input(self.op_type, 0, "X", x)
        delimiter = self.attr("delimiter") or None
        maxsplit = self.attr("maxsplit")
        limit = -1 if maxsplit is None else int(maxsplit)
        # Whitespace splitting drops the element's trailing whitespace even after maxsplit.
        parts = [(s if delimiter else s.strip()).split(delimiter, limit) for s in values.flat]
        lengths = np.array([len(p) for p in parts], dtype=np.int64).reshape(values.shape)
        width = max((len(p) for p in parts), default=0)
        padded = [p + [""] * (width - len(p)) for p in parts]
        y = object_array([s for p in padded for s in p], (*values.shape, width))
        return StringArray(y), numbers(lengths)


class StringNormalizer(_StringOp):
    """ONNX StringNormalizer on X of shape (C,) or (1, C): drop the elements equal to a
    stopword (ignoring case unless ``is_case_sensitive``), then change the case of the rest as
    ``case_change_action`` says. If every element is dropped the output is ``[""]`` (shape
    (1,), or (1, 1) for a (1, C) input).

    Stopwords are matched against whole elements, as the specification says and onnxruntime
    does (the ONNX reference implementation removes stopwords inside space-separated text,
    drops empty elements and strips accents). Case changes map each character on its own, as
    C's ``towupper`` does for onnxruntime (``"ß"`` stays ``"ß"``); ``locale`` is not read:
    Python's Unicode case tables apply whatever the locale.
    """

    op_type = "StringNormalizer"
    since_versions = (10,)
    output_shape = OutputShape.VALUE_SIZED
    since = 10

    singa_functions = (
        SingaFunction(
            "string_normalizer",
            "``x`` (C,) or (1, C) without its stopwords, its case changed (LOWER, UPPER, NONE).",
            inputs=(Input("x", "a (C,) or (1, C) string tensor."),),
            returns="the remaining strings, changed (ONNX StringNormalizer).",
            keywords=(
                Keyword("case_change_action", '``"LOWER"``, ``"UPPER"`` or ``"NONE"``.'),
                Keyword(
                    "stopwords",
                    "the strings to drop, or None.",
                    default=None,
                    annotation="list[str] | None",
                ),
                Keyword(
                    "is_case_sensitive",
                    "whether stopwords match case-sensitively.",
                    default=False,
                    annotation="bool",
                    convert="int",
                ),
                Keyword("locale", "the locale to write on export, or None."),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``x`` does not hold strings or has another shape, or "
                        "``case_change_action`` is unknown."
                    ),
                ),
            ),
            details="``locale`` is written on export (onnxruntime needs that locale installed).",
        ),
    )

    def forward(self, x: StringArray) -> StringArray:
        values = string_input(self.op_type, 0, "X", x)
        if values.ndim not in (1, 2) or (values.ndim == 2 and values.shape[0] != 1):
            raise BadInputError(
                f"StringNormalizer: input 0 (X) must have shape (C,) or (1, C), received shape "
                f"{values.shape}"
            )
        action = self.attr("case_change_action")
        if action not in CASE_ACTIONS:
            raise BadInputError(
                "StringNormalizer: attribute case_change_action must be one of "
                f"{', '.join(CASE_ACTIONS)}, received {action!r}"
            )
        kept = self._without_stopwords(values.reshape(-1).tolist())
        changed = [change_case(s, action) for s in kept] or [""]
        shape = (len(changed),) if values.ndim == 1 else (1, len(changed))
        return StringArray(object_array(changed, shape))

    def _without_stopwords(self, words: list[str]) -> list[str]:
        stopwords = self.attr("stopwords") or []
        if self.attr("is_case_sensitive"):
            stops = set(stopwords)
            return [w for w in words if w not in stops]
        stops = {s.lower() for s in stopwords}
        return [w for w in words if w.lower() not in stops]


def change_case(text: str, action: str) -> str:
    """``text`` lower- or upper-cased character by character (``action`` LOWER/UPPER/NONE)."""
    if action == "NONE":
        return text
    method = str.lower if action == "LOWER" else str.upper
    if text.isascii():
        return method(text)
    # A character whose full case mapping is several characters ("ß" -> "SS") is kept.
    return "".join(c if len(changed := method(c)) != 1 else changed for c in text)


# RE2's POSIX classes, valid inside a bracket expression ("[[:digit:]_]"), which Python's re
# reads as a nested set.
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_POSIX_CLASS = re.compile(r"\[:(\w+):\]")


@cache
def compile_re2(op_type: str, pattern: str) -> re.Pattern[str]:
    """``pattern``, written in RE2 syntax, compiled by Python's ``re``.

    The two agree on the common syntax; to agree on more, ``\\d``, ``\\w``, ``\\s`` and ``\\b``
    are ASCII-only (``re.ASCII``), as in RE2, and POSIX classes (``[[:alpha:]]``) become their
    ASCII ranges. Where they still differ: RE2 rejects backreferences and lookaround, which
    Python accepts, and Python rejects RE2's Unicode classes (``\\pL``, ``\\p{Greek}``),
    ``\\C`` and ``\\z``, which give an error naming the pattern.
    """
    translated = _POSIX_CLASS.sub(lambda m: _POSIX_CLASSES.get(m[1], m[0]), pattern)
    try:
        return re.compile(translated, re.ASCII)
    except re.error as e:
        raise BadInputError(
            f"{op_type}: attribute pattern {pattern!r} is not a regular expression sonnx can "
            f"run (RE2 syntax read by Python's re): {e}"
        ) from None


class RegexFullMatch(_StringOp):
    """ONNX RegexFullMatch: True where the whole element matches ``pattern`` (see
    :func:`compile_re2` for how RE2 syntax is read)."""

    op_type = "RegexFullMatch"
    since_versions = (20,)
    output_shape = OutputShape.FROM_SHAPES

    singa_functions = (
        SingaFunction(
            "regex_full_match",
            "A bool tensor: True where a string of ``x`` matches ``pattern`` (RE2 syntax) whole.",
            inputs=(Input("x", "a string tensor."),),
            returns="a bool tensor of ``x``'s shape (ONNX RegexFullMatch).",
            keywords=(
                Keyword(
                    "pattern",
                    "the regular expression (see :func:`compile_re2` for how RE2 is read).",
                    default=REQUIRED,
                    annotation="str",
                ),
            ),
            raises=(
                ("BadInputError", "``x`` does not hold strings or ``pattern`` does not compile."),
            ),
        ),
    )

    def forward(self, x: StringArray) -> torch.Tensor:
        values = string_input(self.op_type, 0, "X", x)
        regex = compile_re2(self.op_type, self.attr("pattern") or "")
        matched = [regex.fullmatch(s) is not None for s in values.reshape(-1)]
        return numbers(np.array(matched, dtype=bool).reshape(values.shape))


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def string_concat(x: Tensor, y: Tensor) -> Tensor:
    """The strings of ``x`` followed by those of ``y``, elementwise with broadcasting.

    :param x: a string tensor.
    :param y: a string tensor broadcastable with ``x``.
    :returns: a string tensor of the broadcast shape (ONNX StringConcat).
    :raises BadInputError: an input does not hold strings.
    """
    return StringConcat()(x, y)


def string_split(
    x: Tensor, delimiter: str | None = None, maxsplit: int | None = None
) -> tuple[Tensor, Tensor]:
    """(substrings padded with ``""``, their counts) of each string of ``x`` split at ``delimiter``
    (whitespace runs when None), at most ``maxsplit`` times.

    :param x: a string tensor.
    :param delimiter: the separator; None (or ``""``) splits at runs of whitespace.
    :param maxsplit: the most splits per string; None for no limit.
    :returns: ``(y, z)``: the substrings along a new last axis, and the int64 count per string (ONNX
        StringSplit).
    :raises BadInputError: ``x`` does not hold strings.
    """
    return StringSplit(delimiter=delimiter, maxsplit=maxsplit)(x)


def string_normalizer(
    x: Tensor,
    case_change_action: str = "NONE",
    stopwords: list[str] | None = None,
    is_case_sensitive: bool = False,
    locale: str | None = None,
) -> Tensor:
    """``x`` (C,) or (1, C) without its stopwords, its case changed (LOWER, UPPER, NONE).

    ``locale`` is written on export (onnxruntime needs that locale installed).

    :param x: a (C,) or (1, C) string tensor.
    :param case_change_action: ``"LOWER"``, ``"UPPER"`` or ``"NONE"``.
    :param stopwords: the strings to drop, or None.
    :param is_case_sensitive: whether stopwords match case-sensitively.
    :param locale: the locale to write on export, or None.
    :returns: the remaining strings, changed (ONNX StringNormalizer).
    :raises BadInputError: ``x`` does not hold strings or has another shape, or
        ``case_change_action`` is unknown.
    """
    op = StringNormalizer(
        case_change_action=case_change_action,
        stopwords=stopwords,
        is_case_sensitive=int(is_case_sensitive),
        locale=locale,
    )
    return op(x)


def regex_full_match(x: Tensor, pattern: str) -> Tensor:
    """A bool tensor: True where a string of ``x`` matches ``pattern`` (RE2 syntax) whole.

    :param x: a string tensor.
    :param pattern: the regular expression (see :func:`compile_re2` for how RE2 is read).
    :returns: a bool tensor of ``x``'s shape (ONNX RegexFullMatch).
    :raises BadInputError: ``x`` does not hold strings or ``pattern`` does not compile.
    """
    return RegexFullMatch(pattern=pattern)(x)
