"""Text features: TfIdfVectorizer (n-gram counts of token sequences, integer or string) and
onnxruntime's ``com.microsoft`` Tokenizer, which skl2onnx puts before it for scikit-learn's
CountVectorizer and TfidfVectorizer.

The pool of n-grams is matched exactly, without a trie: for each n-gram size and skip distance,
every window of the input and every pool n-gram of that size are stacked as rows and numbered
by ``torch.unique(..., dim=0)``, so a window matches a pool n-gram exactly when their row
numbers agree. Memory stays proportional to the windows, whatever the vocabulary size. String
tokens are first numbered by the pool's vocabulary (-1 for a token outside it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError
from sonnx.operators.conv.windows import require_opset
from sonnx.operators.text.strings import compile_re2, string_input
from sonnx.strings import StringArray, numbers, object_array
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["TfIdfVectorizer", "Tokenizer", "tfidf_vectorizer", "tokenizer"]

MODES = ("TF", "IDF", "TFIDF")
# Pool n-grams of one size: their tokens (K, n) and the output column of each (K,).
NgramTable = dict[int, tuple[torch.Tensor, torch.Tensor]]


class TfIdfVectorizer(Operator):
    """ONNX TfIdfVectorizer: X (C,) or (N, C) int32/int64 tokens -> float32 (size,) or (N, size).

    Counts each pool n-gram of length min_gram_length..max_gram_length whose tokens appear
    ``d`` positions apart (d = 1 .. max_skip_count + 1; unigrams once), into the column
    ``ngram_indexes`` gives it. ``mode`` turns counts into TF (the count), IDF (the weight, or 1,
    when the count is positive) or TFIDF (weight times count). ``weights`` are indexed by output
    column, as onnxruntime and ``onnx.reference`` do. String tokens (X a string tensor) are
    matched against ``pool_strings``, integer ones against ``pool_int64s``.
    """

    op_type = "TfIdfVectorizer"
    since_versions = (9,)
    takes_strings = True
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, x: torch.Tensor | StringArray) -> torch.Tensor:
        x, pool = self._tokens_and_pool(x)
        if x.dim() not in (1, 2):
            raise BadInputError(
                f"TfIdfVectorizer: input X must be 1-D (C,) or 2-D (N, C), received shape "
                f"{tuple(x.shape)}"
            )
        mode = self.attr("mode")
        if mode not in MODES:
            raise BadInputError(
                f"TfIdfVectorizer: attribute mode must be one of {', '.join(MODES)}, "
                f"received {mode!r}"
            )
        table, size = self._ngram_table(pool, x.device)
        rows = x.reshape(1, -1).to(torch.int64) if x.dim() == 1 else x.to(torch.int64)
        counts = torch.zeros(rows.shape[0], size, dtype=torch.int64, device=x.device)
        max_skip = int(self.attr("max_skip_count"))
        for n, (grams, columns) in table.items():
            for skip in [1] if n == 1 else range(1, max_skip + 2):
                _count_windows(rows, n, skip, grams, columns, counts)
        y = self._weigh(counts, mode, size)
        return y.reshape(size) if x.dim() == 1 else y

    def _tokens_and_pool(self, x: torch.Tensor | StringArray) -> tuple[torch.Tensor, list[int]]:
        """The input as integer tokens and the pool as integers: strings are numbered by the
        pool's vocabulary, in order of first appearance (-1 for a token outside it)."""
        strings = self.attr("pool_strings")
        if type(x) is not StringArray:
            if x.dtype not in (torch.int32, torch.int64):
                raise BadInputError(
                    "TfIdfVectorizer: input 0 (X) must hold strings or int32/int64 token ids, "
                    f"received {dtype_name(x.dtype)}"
                )
            if strings and not self.attr("pool_int64s"):
                raise BadInputError(
                    "TfIdfVectorizer: input 0 (X) holds integer token ids, but the pool is "
                    "attribute pool_strings: expected a string tensor"
                )
            return x, [int(v) for v in self.attr("pool_int64s") or []]
        if not strings:
            raise BadInputError(
                "TfIdfVectorizer: input 0 (X) holds strings, but the pool is attribute "
                "pool_int64s: expected int32/int64 token ids"
            )
        vocabulary: dict[str, int] = {}
        pool = [vocabulary.setdefault(s, len(vocabulary)) for s in strings]
        lookup = np.vectorize(lambda token: vocabulary.get(token, -1), otypes=[np.int64])
        ids = lookup(x.array) if x.numel() else np.zeros(x.array.shape, dtype=np.int64)
        return numbers(ids), pool

    def _ngram_table(self, pool: list[int], device: torch.device) -> tuple[NgramTable, int]:
        """The pool n-grams within the length range, by size, and the output size."""
        starts = [int(v) for v in self.attr("ngram_counts") or []]
        indexes = [int(v) for v in self.attr("ngram_indexes") or []]
        low, high = int(self.attr("min_gram_length")), int(self.attr("max_gram_length"))
        if not 1 <= low <= high:
            raise BadInputError(
                "TfIdfVectorizer: attributes min_gram_length and max_gram_length must satisfy "
                f"1 <= min <= max, received min={low}, max={high}"
            )
        if not indexes or min(indexes) < 0:
            raise BadInputError(
                "TfIdfVectorizer: attribute ngram_indexes must list a non-negative output column "
                f"for each pool n-gram, received {indexes}"
            )
        by_size: dict[int, dict[tuple[int, ...], int]] = {}
        gram_id = 0
        for i, start in enumerate(starts):
            n = i + 1
            end = starts[i + 1] if i + 1 < len(starts) else len(pool)
            for k in range(max(end - start, 0) // n):
                if gram_id >= len(indexes):
                    raise BadInputError(
                        f"TfIdfVectorizer: the pool holds more n-grams than ngram_indexes has "
                        f"entries ({len(indexes)})"
                    )
                if low <= n <= high:  # a repeated n-gram takes its last column
                    gram = tuple(pool[start + k * n : start + (k + 1) * n])
                    by_size.setdefault(n, {})[gram] = indexes[gram_id]
                gram_id += 1
        table = {
            n: (
                torch.tensor(list(grams), dtype=torch.int64, device=device),
                torch.tensor(list(grams.values()), dtype=torch.int64, device=device),
            )
            for n, grams in by_size.items()
        }
        return table, max(indexes) + 1

    def _weigh(self, counts: torch.Tensor, mode: str, size: int) -> torch.Tensor:
        weights = [float(v) for v in self.attr("weights") or []]
        if weights and len(weights) < size:
            raise BadInputError(
                f"TfIdfVectorizer: attribute weights must have one value per output column "
                f"({size}), received {len(weights)}"
            )
        w = (
            torch.tensor(weights[:size], dtype=torch.float32, device=counts.device)
            if weights
            else torch.ones(size, dtype=torch.float32, device=counts.device)
        )
        if mode == "TF":
            return counts.to(torch.float32)
        if mode == "IDF":
            return torch.where(counts > 0, w, torch.zeros((), device=counts.device))
        return counts.to(torch.float32) * w

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        require_opset(g, self.op_type, 9)
        super().export(g, inputs, outputs)


def _count_windows(
    rows: torch.Tensor,
    n: int,
    skip: int,
    grams: torch.Tensor,
    columns: torch.Tensor,
    counts: torch.Tensor,
) -> None:
    """Add to ``counts`` (N, size) the pool n-grams found ``skip`` apart in ``rows`` (N, C)."""
    span = (n - 1) * skip
    batch, length = rows.shape
    if span >= length:
        return
    positions = torch.arange(length - span, device=rows.device)[:, None]
    positions = positions + skip * torch.arange(n, device=rows.device)
    windows = rows[:, positions].reshape(-1, n)
    _, number = torch.unique(torch.cat([grams, windows]), dim=0, return_inverse=True)
    column_of = torch.full((int(number.max()) + 1,), -1, dtype=torch.int64, device=rows.device)
    column_of[number[: len(grams)]] = columns
    found = column_of[number[len(grams) :]].reshape(batch, -1)
    counts.scatter_add_(1, found.clamp(min=0), (found >= 0).to(torch.int64))


# The marks onnxruntime's Tokenizer puts around each element's tokens when ``mark`` is set.
START_TEXT, END_TEXT = "\x02", "\x03"


class Tokenizer(Operator):
    """onnxruntime's ``com.microsoft`` Tokenizer: X (C,) or (N, C) strings -> tokens
    (C, T) or (N, C, T), each element's tokens padded with ``pad_value`` to the most any
    element has (T = 0 when no element has a token).

    Tokens are the matches of the regular expression ``tokenexp``, or the text between the
    matches of the ``separators`` (each separator splits the pieces the previous ones left);
    ``tokenexp="."`` or ``separators=[""]`` makes each character a token. Tokens shorter than
    ``mincharnum`` characters are dropped. With ``mark`` the tokens of each element are put
    between ``"\x02"`` and ``"\x03"``, before the padding. Patterns are RE2 read by Python's
    ``re`` (see :func:`~sonnx.operators.text.strings.compile_re2`); onnxruntime's RE2 takes the
    longest match where Python takes the first alternative (``a|ab``), and a separator that
    matches the empty string splits nothing here.
    """

    op_type = "Tokenizer"
    domain = "com.microsoft"
    since_versions = (1,)
    takes_strings = True
    output_shape = OutputShape.VALUE_SIZED

    def forward(self, x: StringArray) -> StringArray:
        values = string_input(self.op_type, 0, "X", x)
        if values.ndim not in (1, 2):
            raise BadInputError(
                f"Tokenizer: input 0 (X) must have shape (C,) or (N, C), received shape "
                f"{values.shape}"
            )
        split = self._splitter()
        rows = [split(s) for s in values.reshape(-1)]
        width = max((len(r) for r in rows), default=0)
        if width == 0:
            return StringArray(np.empty((*values.shape, 0), dtype=object))
        if self.attr("mark"):
            rows = [[START_TEXT, *r, END_TEXT] for r in rows]
            width += 2
        pad = self._required("pad_value", str)
        tokens = [t for r in rows for t in (*r, *[pad] * (width - len(r)))]
        return StringArray(object_array(tokens, (*values.shape, width)))

    def _required(self, name: str, kind: type) -> Any:
        value = self.attr(name)
        if not isinstance(value, kind):
            raise BadInputError(
                f"Tokenizer: attribute {name} must be set to a {kind.__name__}, received {value!r}"
            )
        return value

    def _splitter(self) -> Callable[[str], list[str]]:
        """The function from one string to its tokens."""
        self._required("mark", int)
        least = self._required("mincharnum", int)
        separators, tokenexp = self.attr("separators"), self.attr("tokenexp")
        if least < 1:
            raise BadInputError(f"Tokenizer: attribute mincharnum must be >= 1, received {least}")
        if not separators and not tokenexp:
            raise BadInputError(
                "Tokenizer: one of the attributes separators and tokenexp must be set, received "
                f"separators={separators!r}, tokenexp={tokenexp!r}"
            )
        if (separators == [""]) if separators else tokenexp == ".":
            if least > 1:
                raise BadInputError(
                    f"Tokenizer: one-character tokens need mincharnum 1, received {least}"
                )
            return list
        if separators:
            cuts = [compile_re2(self.op_type, p) for p in separators]
            return lambda s: _split_at(s, cuts, least)
        regex = compile_re2(self.op_type, tokenexp)
        return lambda s: _matches(s, regex, least)


def _split_at(text: str, separators: Sequence[re.Pattern[str]], least: int) -> list[str]:
    """The pieces of ``text`` between matches of each separator in turn (at least ``least``
    characters long)."""
    pieces = [text]
    for separator in separators:
        cut = []
        for piece in pieces:
            start = 0
            for m in separator.finditer(piece):
                if m.end() > m.start():
                    cut.append(piece[start : m.start()])
                    start = m.end()
            cut.append(piece[start:])
        pieces = [p for p in cut if len(p) >= least]
    return pieces


def _matches(text: str, regex: re.Pattern[str], least: int) -> list[str]:
    """The matches of ``regex`` in ``text`` at least ``least`` characters long; after a
    shorter match the search resumes one character after its start, as onnxruntime does."""
    tokens, position = [], 0
    while (m := regex.search(text, position)) is not None:
        if len(m[0]) >= least:
            tokens.append(m[0])
            position = m.end()
        else:
            position = m.start() + 1
    return tokens


def tfidf_vectorizer(
    x: Tensor,
    mode: str,
    min_gram_length: int,
    max_gram_length: int,
    max_skip_count: int,
    ngram_counts: Sequence[int],
    ngram_indexes: Sequence[int],
    pool_int64s: Sequence[int] = (),
    weights: Sequence[float] | None = None,
    pool_strings: Sequence[str] = (),
) -> Tensor:
    """TF/IDF/TFIDF n-gram features of token sequences x (C,) or (N, C): integers matched
    against ``pool_int64s``, or strings against ``pool_strings``.

    The pool lists the n-grams, grouped by length; ``ngram_counts[i]`` is where the
    (i+1)-grams start in it and ``ngram_indexes`` the output column of each n-gram in order.

    :param x: (C,) or (N, C) int32/int64 token ids or strings.
    :param mode: ``"TF"``, ``"IDF"`` or ``"TFIDF"``.
    :param min_gram_length: the shortest n-gram counted.
    :param max_gram_length: the longest n-gram counted.
    :param max_skip_count: the most tokens skipped between an n-gram's items.
    :param ngram_counts: where each length's n-grams start in the pool.
    :param ngram_indexes: the output column of each pool n-gram.
    :param pool_int64s: the integer pool (for token ids).
    :param weights: the IDF weight per output column, or None for 1s.
    :param pool_strings: the string pool (for strings).
    :returns: the float32 (size,) or (N, size) features (ONNX TfIdfVectorizer).
    :raises BadInputError: ``x`` has another rank or type, ``mode`` is unknown, the pool does not
        match ``x``'s type, or the attributes disagree with each other.
    """
    return TfIdfVectorizer(
        mode=mode,
        min_gram_length=int(min_gram_length),
        max_gram_length=int(max_gram_length),
        max_skip_count=int(max_skip_count),
        ngram_counts=[int(v) for v in ngram_counts],
        ngram_indexes=[int(v) for v in ngram_indexes],
        pool_int64s=[int(v) for v in pool_int64s] or None,
        pool_strings=[str(v) for v in pool_strings] or None,
        weights=None if weights is None else [float(v) for v in weights],
    )(x)


def tokenizer(
    x: Tensor,
    tokenexp: str | None = None,
    separators: Sequence[str] | None = None,
    mincharnum: int = 1,
    mark: bool = False,
    pad_value: str = "#",
) -> Tensor:
    """The tokens of each string of ``x`` (C,) or (N, C), padded with ``pad_value``: the
    matches of ``tokenexp``, or the text between ``separators`` (see :class:`Tokenizer`).

    :param x: a (C,) or (N, C) string tensor.
    :param tokenexp: the regular expression a token matches, or None to use ``separators``.
    :param separators: the patterns tokens are split at, or None to use ``tokenexp``.
    :param mincharnum: tokens shorter than this are dropped.
    :param mark: True puts each element's tokens between the marks ``\\x02`` and ``\\x03``.
    :param pad_value: the string padding each element's tokens to the longest.
    :returns: the (C, T) or (N, C, T) string tokens (com.microsoft Tokenizer).
    :raises BadInputError: ``x`` has another shape, or a pattern does not compile.
    """
    return Tokenizer(
        tokenexp=tokenexp,
        separators=None if separators is None else list(separators),
        mincharnum=int(mincharnum),
        mark=int(mark),
        pad_value=pad_value,
    )(x)
