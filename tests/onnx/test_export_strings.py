"""String operators built in sonnx export: string graph inputs, string initializers and the
string operators pass the full ONNX checker and onnxruntime matches sonnx at batch 2 and 5."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx.operators.elementwise.cast import cast, cast_like
from sonnx.operators.text import strings as so
from sonnx.operators.text.features import TfIdfVectorizer, Tokenizer, tfidf_vectorizer, tokenizer
from tests.onnx.export_check import const, export_check

WORDS = np.array(["Monday go", "tue,sday", "The end", "x", "42", "a,b,c", " lead  trail "])


def words(width: int | None = None):
    """``make_inputs`` for string tensors (batch,) or (batch, width)."""

    def make(batch: int) -> list[np.ndarray]:
        values = np.resize(WORDS, batch * (width or 1)).astype(object)
        return [values.reshape(batch, width) if width else values]

    return make


def tokens(batch: int) -> list[np.ndarray]:
    pool = np.array(["go", "end", "x", "the", "end", "q"], dtype=object)
    return [np.resize(pool, batch * 4).reshape(batch, 4)]


def case(id_: str, build, make, **opts):
    return pytest.param(build, make, opts, id=id_)


# Unigrams "go", "end", "x"; bigram ("the", "end").
POOL = dict(ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3])
POOL_STRINGS = ["go", "end", "x", "the", "end"]
# onnxruntime's StringNormalizer needs a locale this machine has.
LOCALE = "C.UTF-8"

ALL = [
    case("string_concat", lambda x: so.string_concat(x, x), words(2)),
    case(
        "StringConcat_initializer",
        lambda x: so.StringConcat()(x, const(np.array(["!", "?"], dtype=object))),
        words(2),
    ),
    case("string_split", lambda x: so.string_split(x, ","), words(2)),
    case("StringSplit_whitespace_maxsplit", lambda x: so.StringSplit(maxsplit=1)(x), words()),
    case("regex_full_match", lambda x: so.regex_full_match(x, r"[a-z]+ \w+"), words(2)),
    case("RegexFullMatch", lambda x: so.RegexFullMatch(pattern=r"\d+")(x), words()),
    case(
        "string_normalizer",
        lambda x: so.string_normalizer(x, "UPPER", ["x"], locale=LOCALE),
        words(),
    ),
    case(
        "StringNormalizer",
        lambda x: so.StringNormalizer(case_change_action="LOWER", locale=LOCALE)(x),
        words(),
    ),
    case(
        "tfidf_vectorizer_strings",
        lambda x: tfidf_vectorizer(x, "TF", 1, 2, 0, **POOL, pool_strings=POOL_STRINGS),
        tokens,
    ),
    case(
        "TfIdfVectorizer_strings",
        lambda x: TfIdfVectorizer(
            mode="TFIDF",
            min_gram_length=1,
            max_gram_length=2,
            max_skip_count=1,
            **POOL,
            pool_strings=POOL_STRINGS,
            weights=[0.5, 1.0, 1.5, 2.0],
        )(x),
        tokens,
    ),
    case(
        "cast_to_string",
        lambda x: cast(x, "string"),
        lambda b: [np.linspace(-1e-5, 1e8, b * 2).reshape(b, 2).astype(np.float32)],
    ),
    case(
        "cast_string_round_trip",
        lambda x: cast(cast(x, np.float32), "string"),
        lambda b: [np.array([f"{i * 0.5}e-3" for i in range(b)], dtype=object)],
    ),
    case(
        "cast_like_string_initializer",
        lambda x: cast_like(x, const(np.array(["s"], dtype=object))),
        lambda b: [np.arange(b * 2, dtype=np.int64).reshape(b, 2)],
    ),
]

ALL += [
    pytest.param(lambda x: tokenizer(x, tokenexp="[a-z]+"), words(2), {}, id="tokenizer"),
    pytest.param(
        lambda x: Tokenizer(separators=[",", " "], mincharnum=1, mark=1, pad_value="#")(x),
        words(),
        {},
        id="Tokenizer",
    ),
]


@pytest.mark.parametrize(("build", "make", "opts"), ALL)
def test_string_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
