"""TfIdfVectorizer: forward against onnx.reference (every mode, gram range and skip count, 1-D
and 2-D inputs), bad inputs, export opset check."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx import autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

# Unigrams 2, 3, 5, 4; bigrams (5, 6), (7, 8), (6, 7); trigrams (2, 3, 5), (5, 6, 7).
POOL = dict(
    ngram_counts=[0, 4, 10],
    ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7, 8],
    pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5, 5, 6, 7],
)
WEIGHTS = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
TOKENS = np.array([[1, 2, 3, 5, 6, 7, 8, 6, 7, 2, 3, 5], [5, 6, 7, 5, 6, 2, 3, 5, 4, 4, 8, 7]])


def _t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def reference(x: np.ndarray, **attrs) -> np.ndarray:
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    return ReferenceEvaluator(node).run(None, {"x": x})[0]


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weights", [None, WEIGHTS])
@pytest.mark.parametrize(("low", "high", "skip"), [(1, 1, 0), (1, 3, 0), (2, 2, 3), (1, 3, 5)])
def test_matches_reference(mode, weights, low, high, skip):
    attrs = dict(POOL, mode=mode, min_gram_length=low, max_gram_length=high, max_skip_count=skip)
    if weights is not None:
        attrs["weights"] = weights
    got = autograd.TfIdfVectorizer(**attrs)(_t(TOKENS)).numpy()
    assert got.dtype == np.float32
    # onnx.reference cannot run IDF/TFIDF without weights; they default to all ones.
    expected = reference(TOKENS, **{"weights": [1.0] * 9, **attrs})
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_one_dimensional_input_and_int32(dtype):
    x = TOKENS[0].astype(dtype)
    got = autograd.tfidf_vectorizer(_t(x), "TF", 1, 2, 2, **POOL)
    assert got.shape == (9,)
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=2)
    np.testing.assert_array_equal(got.numpy(), reference(x, **attrs))


def test_counts_by_hand_and_repeated_pool_ngrams_take_the_last_column():
    # Bigram (1, 2) listed twice: its second column (2) counts; (2, 1) in column 1.
    y = autograd.tfidf_vectorizer(
        _t(np.array([1, 2, 1, 2, 9], np.int64)),
        "TF",
        2,
        2,
        1,
        ngram_counts=[0, 0],
        ngram_indexes=[0, 1, 2],
        pool_int64s=[1, 2, 2, 1, 1, 2],
    )
    # Skip 1: (1,2) x2, (2,1) x1; skip 2 (tokens two apart): (1,1), (2,2), (1,9): none.
    np.testing.assert_array_equal(y.numpy(), [0, 1, 2])


def test_short_rows_and_empty_input_give_zeros():
    op = autograd.TfIdfVectorizer(
        mode="TF", min_gram_length=3, max_gram_length=3, max_skip_count=2, **POOL
    )
    np.testing.assert_array_equal(op(_t(np.array([[2, 3]]))).numpy(), np.zeros((1, 9)))
    assert op(_t(np.zeros((0,), np.int64))).shape == (9,)


def test_bad_inputs():
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0)
    with pytest.raises(BadInputError, match=r"TfIdfVectorizer: input 0 \(X\) must hold strings"):
        autograd.TfIdfVectorizer(**attrs)(_t(np.ones(3, np.float32)))
    with pytest.raises(BadInputError, match=r"must be 1-D \(C,\) or 2-D"):
        autograd.TfIdfVectorizer(**attrs)(_t(np.ones((1, 2, 3), np.int64)))
    with pytest.raises(BadInputError, match="attribute mode must be one of TF, IDF, TFIDF"):
        autograd.TfIdfVectorizer(**{**attrs, "mode": "BM25"})(_t(TOKENS))
    with pytest.raises(BadInputError, match="holds integer token ids, but the pool is"):
        strings = {k: v for k, v in attrs.items() if k != "pool_int64s"}
        autograd.TfIdfVectorizer(**strings, pool_strings=["a", "b"])(_t(TOKENS))
    with pytest.raises(BadInputError, match="1 <= min <= max, received min=3, max=2"):
        autograd.TfIdfVectorizer(**{**attrs, "min_gram_length": 3})(_t(TOKENS))
    with pytest.raises(BadInputError, match="more n-grams than ngram_indexes has entries"):
        autograd.TfIdfVectorizer(**{**attrs, "ngram_indexes": [0, 1]})(_t(TOKENS))
    with pytest.raises(BadInputError, match="weights must have one value per output column"):
        autograd.TfIdfVectorizer(**attrs, weights=[1.0])(_t(TOKENS))


def test_export_needs_opset_9():
    op = autograd.TfIdfVectorizer(
        mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0, **POOL
    )
    with pytest.raises(ExportError, match="TfIdfVectorizer does not exist before opset 9"):
        op.export(GraphBuilder(8), ["x"], ["y"])
    g = GraphBuilder(9)
    op.export(g, ["x"], ["y"])
    assert g.nodes[0].op_type == "TfIdfVectorizer"
