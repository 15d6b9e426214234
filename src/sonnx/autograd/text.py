"""Text features: TfIdfVectorizer (n-gram counts of integer token sequences).

The pool of n-grams is matched exactly, without a trie: for each n-gram size and skip distance,
every window of the input and every pool n-gram of that size are stacked as rows and numbered
by ``torch.unique(..., dim=0)``, so a window matches a pool n-gram exactly when their row
numbers agree. Memory stays proportional to the windows, whatever the vocabulary size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from sonnx.autograd.conv_common import require_opset
from sonnx.autograd.operator import Operator
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.onnx.graph_builder import GraphBuilder

__all__ = ["TfIdfVectorizer", "tfidf_vectorizer"]

MODES = ("TF", "IDF", "TFIDF")
# Pool n-grams of one size: their tokens (K, n) and the output column of each (K,).
NgramTable = dict[int, tuple[torch.Tensor, torch.Tensor]]


class TfIdfVectorizer(Operator):
    """ONNX TfIdfVectorizer: X (C,) or (N, C) int32/int64 tokens -> float32 (size,) or (N, size).

    Counts each pool n-gram of length min_gram_length..max_gram_length whose tokens appear
    ``d`` positions apart (d = 1 .. max_skip_count + 1; unigrams once), into the column
    ``ngram_indexes`` gives it. ``mode`` turns counts into TF (the count), IDF (the weight, or 1,
    when the count is positive) or TFIDF (weight times count). ``weights`` are indexed by output
    column, as onnxruntime and ``onnx.reference`` do. String pools need string tensors, which
    torch does not have.
    """

    op_type = "TfIdfVectorizer"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in (torch.int32, torch.int64):
            raise BadInputError(
                "TfIdfVectorizer: input X must hold int32 or int64 token ids (string tensors "
                f"are not supported: torch has no string dtype), received {x.dtype}"
            )
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
        table, size = self._ngram_table(x.device)
        rows = x.reshape(1, -1).to(torch.int64) if x.dim() == 1 else x.to(torch.int64)
        counts = torch.zeros(rows.shape[0], size, dtype=torch.int64, device=x.device)
        max_skip = int(self.attr("max_skip_count"))
        for n, (grams, columns) in table.items():
            for skip in [1] if n == 1 else range(1, max_skip + 2):
                _count_windows(rows, n, skip, grams, columns, counts)
        y = self._weigh(counts, mode, size)
        return y.reshape(size) if x.dim() == 1 else y

    def _ngram_table(self, device: torch.device) -> tuple[NgramTable, int]:
        """The pool n-grams within the length range, by size, and the output size."""
        pool = [int(v) for v in self.attr("pool_int64s") or []]
        if not pool and self.attr("pool_strings"):
            raise BadInputError(
                "TfIdfVectorizer: attribute pool_strings holds string n-grams, which need string "
                "tensors (torch has no string dtype); map the tokens to integers and use "
                "pool_int64s"
            )
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


def tfidf_vectorizer(
    x: Tensor,
    mode: str,
    min_gram_length: int,
    max_gram_length: int,
    max_skip_count: int,
    ngram_counts: Sequence[int],
    ngram_indexes: Sequence[int],
    pool_int64s: Sequence[int],
    weights: Sequence[float] | None = None,
) -> Tensor:
    """TF/IDF/TFIDF n-gram features of integer token sequences x (C,) or (N, C).

    ``pool_int64s`` lists the n-grams, grouped by length; ``ngram_counts[i]`` is where the
    (i+1)-grams start in it and ``ngram_indexes`` the output column of each n-gram in order.
    """
    return TfIdfVectorizer(
        mode=mode,
        min_gram_length=int(min_gram_length),
        max_gram_length=int(max_gram_length),
        max_skip_count=int(max_skip_count),
        ngram_counts=[int(v) for v in ngram_counts],
        ngram_indexes=[int(v) for v in ngram_indexes],
        pool_int64s=[int(v) for v in pool_int64s],
        weights=None if weights is None else [float(v) for v in weights],
    )(x)
