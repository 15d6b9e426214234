"""scikit-learn's CountVectorizer and TfidfVectorizer, converted by skl2onnx (Reshape,
StringNormalizer, com.microsoft Tokenizer, TfIdfVectorizer, Normalizer), run in sonnx and match
sklearn's ``transform`` and onnxruntime."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from skl2onnx import to_onnx
from skl2onnx.common.data_types import StringTensorType
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

import sonnx

TRAIN = np.array(
    [
        "This is the first document.",
        "This document is the second document.",
        "And this is the third one.",
        "Is this the first document?",
    ]
)
# Unseen words, an empty text, repeated n-grams and one-letter words (sklearn's default pattern
# skips those; skl2onnx's tokenizer finds them, which changes no count kept here).
TEXTS = np.array(
    [*TRAIN, "Unknown words only", "", "the first the first document document", "a is the b"]
)


def convert(vectorizer) -> onnx.ModelProto:
    vectorizer.fit(TRAIN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(vectorizer, initial_types=[("text", StringTensorType([None, 1]))])
    assert {"Tokenizer", "TfIdfVectorizer"} <= {n.op_type for n in model.graph.node}
    return model


def onnxruntime_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime's result; its StringNormalizer builds the en_US.UTF-8 locale unless told
    otherwise, which a minimal machine lacks, so the copy run here names C.UTF-8."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == "StringNormalizer":
            node.attribute.append(onnx.helper.make_attribute("locale", "C.UTF-8"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"text": x})[0]


@pytest.mark.parametrize(
    "vectorizer",
    [
        CountVectorizer(),
        CountVectorizer(ngram_range=(1, 2)),
        CountVectorizer(ngram_range=(2, 2), binary=True),
        TfidfVectorizer(),
        TfidfVectorizer(ngram_range=(1, 3)),
        TfidfVectorizer(norm="l1", lowercase=False),
        TfidfVectorizer(use_idf=False),
    ],
    ids=repr,
)
def test_text_vectorizers_match_sklearn_and_onnxruntime(vectorizer):
    model = convert(vectorizer)
    x = TEXTS.reshape(-1, 1).astype(object)
    got = sonnx.prepare(model).run([x])[0].numpy()
    expected = vectorizer.transform(TEXTS).toarray()
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, onnxruntime_run(model, x), rtol=1e-6, atol=1e-7)


def test_stop_words_follow_onnxruntime_where_skl2onnx_departs_from_sklearn():
    # skl2onnx drops stop_words from the graph, so bigrams around a stop word differ from
    # sklearn's; sonnx runs the graph as onnxruntime does.
    model = convert(TfidfVectorizer(ngram_range=(1, 2), stop_words=["the"]))
    x = TEXTS.reshape(-1, 1).astype(object)
    got = sonnx.prepare(model).run([x])[0].numpy()
    np.testing.assert_allclose(got, onnxruntime_run(model, x), rtol=1e-6, atol=1e-7)
