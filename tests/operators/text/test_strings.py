"""String operators (StringConcat, StringSplit, StringNormalizer, RegexFullMatch, com.microsoft
Tokenizer, TfIdfVectorizer on strings) and Cast to and from strings, against onnx.reference
and onnxruntime; numbers where strings are expected are errors naming the op and input."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from sonnx.errors import BadInputError
from sonnx.operators.elementwise.cast import Cast, CastLike, cast
from sonnx.operators.text.features import TfIdfVectorizer, Tokenizer, tfidf_vectorizer, tokenizer
from sonnx.operators.text.strings import (
    RegexFullMatch,
    StringConcat,
    StringNormalizer,
    StringSplit,
    regex_full_match,
    string_concat,
    string_normalizer,
    string_split,
)
from sonnx.tensor import Tensor, to_numpy

# onnxruntime's StringNormalizer builds its locale (default en_US.UTF-8, often not installed).
LOCALE = "C.UTF-8"


def strings(values) -> np.ndarray:
    return np.array(values, dtype=object)


def _t(values) -> Tensor:
    return Tensor(data=np.asarray(values), requires_grad=False)


def onnx_type(array: np.ndarray) -> int:
    if array.dtype == object:
        return TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def run_node(runtime: str, op_type: str, inputs, outputs, domain="", opset=21, **attrs):
    """Outputs of one node run by ``runtime`` ("reference" or "onnxruntime") on ``inputs``."""
    names = [f"x{i}" for i in range(len(inputs))]
    out_names = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op_type, names, out_names, domain=domain or None, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, onnx_type(a), None)
            for n, a in zip(names, inputs, strict=True)
        ],
        [
            helper.make_tensor_value_info(n, t, None)
            for n, t in zip(out_names, outputs, strict=True)
        ],
    )
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports)
    feeds = dict(zip(names, inputs, strict=True))
    if runtime == "reference":
        return ReferenceEvaluator(model).run(None, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_strings(got: Tensor, expected: np.ndarray) -> None:
    array = to_numpy(got)
    assert array.dtype == object and array.shape == expected.shape
    assert array.tolist() == expected.tolist()


S = TensorProto.STRING
WORDS = strings([["Hello", "wörld", ""], ["a b  c", " lead trail ", "x,y,,z"]])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (WORDS, WORDS[::-1]),
        (WORDS, strings(["!", "?", "."])),
        (strings("zero-d "), WORDS),
        (strings("x"), strings("y")),
    ],
)
def test_string_concat_broadcasts_like_the_reference(a, b):
    (expected,) = run_node("reference", "StringConcat", [a, b], [S])
    assert_strings(string_concat(_t(a), _t(b)), np.asarray(expected, dtype=object))


SPLITS = [{}, {"delimiter": ","}, {"delimiter": " "}, {"delimiter": ",", "maxsplit": 1}]


# The reference keeps trailing whitespace after maxsplit whitespace splits ("trail "), against
# the specification; onnxruntime drops it.
@pytest.mark.parametrize(
    ("runtime", "attrs"),
    [("reference", a) for a in SPLITS] + [("onnxruntime", a) for a in [*SPLITS, {"maxsplit": 1}]],
)
def test_string_split_matches(runtime, attrs):
    # onnxruntime splits "" at a delimiter into no substring, the reference into one, "".
    x = WORDS if runtime == "reference" else np.where(WORDS == "", "e", WORDS).astype(object)
    y, z = run_node(runtime, "StringSplit", [x], [S, TensorProto.INT64], **attrs)
    got_y, got_z = string_split(_t(x), attrs.get("delimiter"), attrs.get("maxsplit"))
    assert_strings(got_y, np.asarray(y, dtype=object))
    assert got_z.numpy().dtype == np.int64
    np.testing.assert_array_equal(got_z.numpy(), z)


def test_string_split_of_an_empty_tensor_adds_an_empty_axis():
    y, z = string_split(_t(strings([]).reshape(0, 2)), ",")
    assert y.shape == (0, 2, 0) and z.shape == (0, 2)


NORMALIZER_CASES = [
    dict(case_change_action="LOWER", stopwords=["monday"]),
    dict(case_change_action="UPPER", stopwords=["monday"], is_case_sensitive=1),
    dict(case_change_action="NONE", stopwords=["Monday"], is_case_sensitive=1),
    dict(case_change_action="NONE", stopwords=["monday"]),
    dict(case_change_action="UPPER"),
    dict(case_change_action="LOWER", stopwords=["monday", "MONDAY", "", "Été", "straße", "x y"]),
]


@pytest.mark.parametrize("attrs", NORMALIZER_CASES)
@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer_matches_onnxruntime(attrs, two_d):
    x = strings(["Monday", "monday tuesday", "", "Été", "MONDAY", "straße", "x y"])
    x = x.reshape(1, -1) if two_d else x
    (expected,) = run_node("onnxruntime", "StringNormalizer", [x], [S], locale=LOCALE, **attrs)
    assert_strings(StringNormalizer(**attrs)(_t(x)), np.asarray(expected, dtype=object))


def test_string_normalizer_keeps_one_empty_string_when_all_are_dropped():
    assert to_numpy(string_normalizer(_t(strings(["a", "A"])), stopwords=["a"])).tolist() == [""]
    out = string_normalizer(_t(strings([["a"]])), "UPPER", ["A"])
    assert to_numpy(out).tolist() == [[""]]


@pytest.mark.parametrize(
    ("pattern", "values"),
    [
        (r"\w+@(gmail|yahoo)\.com", ["me@gmail.com", "me@gmail.org", "@yahoo.com", ""]),
        (r"[a-c]*\d{2}", ["abc12", "ab1", "12", "d12"]),
        (r".*", ["", "anything"]),
    ],
)
def test_regex_full_match_matches_the_reference(pattern, values):
    x = strings(values).reshape(2, -1)
    (expected,) = run_node("reference", "RegexFullMatch", [x], [TensorProto.BOOL], pattern=pattern)
    got = regex_full_match(_t(x), pattern)
    assert got.numpy().dtype == np.bool_
    np.testing.assert_array_equal(got.numpy(), expected)


def test_regex_full_match_reads_re2_classes_as_re2_does():
    x = _t(strings(["٣", "3", "a_1", "a-1"]))  # an Arabic-Indic digit: not \d in RE2
    assert regex_full_match(x, r"\d").numpy().tolist() == [False, True, False, False]
    assert regex_full_match(x, r"[[:alpha:]_]+[[:digit:]]").numpy().tolist()[2:] == [True, False]


def test_regex_full_match_rejects_syntax_python_cannot_read():
    with pytest.raises(BadInputError, match=r"RegexFullMatch: attribute pattern '\\\\pL'"):
        RegexFullMatch(pattern=r"\pL")(_t(strings(["a"])))


FLOATS = np.array(
    [0.1, 1e-5, 123456789.0, 1.0, -0.0, np.inf, -np.inf, np.nan, 3.14159265, 1e20, 1.5e-7],
    dtype=np.float32,
)
NUMBERS = [
    FLOATS,
    FLOATS.astype(np.float64) / 3,
    FLOATS[np.abs(FLOATS) < 1e4].astype(np.float16),
    np.array([1, -5, 2**40]),
    np.array([True, False]),
    np.array([1, 255], dtype=np.uint8),
    np.array([2**64 - 1], dtype=np.uint64),
]


@pytest.mark.parametrize("x", NUMBERS, ids=lambda a: str(a.dtype))
def test_cast_numbers_to_strings_as_onnxruntime_writes_them(x):
    (expected,) = run_node("onnxruntime", "Cast", [x], [S], to=S)
    assert_strings(cast(_t(x), "string"), np.asarray(expected, dtype=object))


NUMBER_TEXT = ["3.14", "1e-5", "1E8", "INF", "+INF", "-inf", "NaN", "Infinity", " 2.5", "0x10"]
TEXT = strings([*NUMBER_TEXT, "100.5", "1e40", "-1e-50", "1,5", "1e", ".5", "5.", "+3", "  7  "])
INTEGER_TEXT = strings(["100", "-3", "7", "0", "12abc", "0.5", "100.5", "+3", "  7  ", "5."])


@pytest.mark.parametrize(
    ("values", "to"),
    [(TEXT, TensorProto.FLOAT), (TEXT, TensorProto.DOUBLE), (TEXT, TensorProto.FLOAT16)]
    + [
        (INTEGER_TEXT, t)
        for t in (TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL)
    ],
)
def test_cast_strings_to_numbers_as_onnxruntime_reads_them(values, to):
    (expected,) = run_node("onnxruntime", "Cast", [values], [to], to=to)
    got = Cast(to=to)(_t(values)).numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_cast_like_a_string_target_and_string_to_string():
    out = CastLike()(_t(np.array([[1.5, -2.0]], dtype=np.float32)), _t(strings(["t"])))
    assert to_numpy(out).tolist() == [["1.5", "-2"]]
    assert to_numpy(cast(_t(strings(["a"])), "string")).tolist() == ["a"]
    back = CastLike()(_t(strings(["7", "-1"])), _t(np.array([0], dtype=np.int32)))
    assert back.numpy().dtype == np.int32 and back.numpy().tolist() == [7, -1]


@pytest.mark.parametrize("text", ["abc", "", "-"])
def test_cast_of_a_string_that_is_no_number_names_it(text):
    with pytest.raises(BadInputError, match=f"Cast: cannot cast string {text!r}"):
        cast(_t(strings([text])), "float32")


TOKENIZER_CASES = [
    dict(tokenexp="[a-zA-Z0-9_]+", mincharnum=1, mark=0, pad_value="#"),
    dict(tokenexp="[a-z]+", mincharnum=2, mark=1, pad_value="<pad>"),
    dict(separators=[" ", ","], mincharnum=1, mark=0, pad_value="#"),
    dict(separators=["[,;]", " +"], mincharnum=2, mark=1, pad_value=""),
    dict(tokenexp=".", mincharnum=1, mark=1, pad_value="#"),
    dict(separators=[""], mincharnum=1, mark=0, pad_value="#"),
]


@pytest.mark.parametrize("attrs", TOKENIZER_CASES)
@pytest.mark.parametrize("shape", [(6,), (2, 3)])
def test_tokenizer_matches_onnxruntime(attrs, shape):
    x = strings(["hello world", "a,bb;ccc  dd", "", "x", "Über café", "one,two three"])
    x = x.reshape(shape)
    (expected,) = run_node("onnxruntime", "Tokenizer", [x], [S], domain="com.microsoft", **attrs)
    assert_strings(Tokenizer(**attrs)(_t(x)), np.asarray(expected, dtype=object))


def test_tokenizer_without_tokens_gives_an_empty_last_axis():
    out = tokenizer(_t(strings([["", "  "]])), separators=[" "], mark=True)
    assert out.shape == (1, 2, 0)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (dict(mincharnum=1, mark=0, pad_value="#"), "one of the attributes separators"),
        (dict(tokenexp=".", mincharnum=2, mark=0, pad_value="#"), "need mincharnum 1"),
        (dict(tokenexp="a", mincharnum=0, mark=0, pad_value="#"), "mincharnum must be >= 1"),
        (dict(tokenexp="a", mincharnum=1, mark=0), "attribute pad_value must be set"),
    ],
)
def test_tokenizer_attribute_errors(attrs, message):
    with pytest.raises(BadInputError, match=f"Tokenizer: .*{message}"):
        Tokenizer(**attrs)(_t(strings(["a"])))


# Unigrams "go", "end", "x"; bigrams ("the", "end"), ("go", "go").
STRING_POOL = dict(
    ngram_counts=[0, 3],
    ngram_indexes=[0, 1, 2, 3, 4],
    pool_strings=["go", "end", "x", "the", "end", "go", "go"],
)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("skip", [0, 2])
def test_tfidf_vectorizer_on_strings_matches_onnxruntime(mode, skip):
    x = strings([["go", "go", "the", "end", "x", "go"], ["the", "q", "end", "end", "go", "#"]])
    attrs = dict(
        STRING_POOL,
        mode=mode,
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=skip,
        weights=[0.5, 1.0, 1.5, 2.0, 2.5],
    )
    (expected,) = run_node("onnxruntime", "TfIdfVectorizer", [x], [TensorProto.FLOAT], **attrs)
    np.testing.assert_allclose(TfIdfVectorizer(**attrs)(_t(x)).numpy(), expected)
    (one_row,) = run_node("onnxruntime", "TfIdfVectorizer", [x[0]], [TensorProto.FLOAT], **attrs)
    np.testing.assert_allclose(TfIdfVectorizer(**attrs)(_t(x[0])).numpy(), one_row)


def test_tfidf_vectorizer_pool_and_input_kinds_must_agree():
    with pytest.raises(BadInputError, match=r"input 0 \(X\) holds strings, but the pool is"):
        tfidf_vectorizer(_t(strings(["a"])), "TF", 1, 1, 0, [0], [0], pool_int64s=[1])
    with pytest.raises(BadInputError, match=r"input 0 \(X\) holds integer token ids, but"):
        tfidf_vectorizer(_t(np.array([1])), "TF", 1, 1, 0, [0], [0], pool_strings=["a"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: StringConcat()(x, _t(strings(["a"]))), r"StringConcat: input 0 \(X\)"),
        (lambda x: StringConcat()(_t(strings(["a"])), x), r"StringConcat: input 1 \(Y\)"),
        (lambda x: StringSplit()(x), r"StringSplit: input 0 \(X\)"),
        (lambda x: string_normalizer(x), r"StringNormalizer: input 0 \(X\)"),
        (lambda x: regex_full_match(x, "a"), r"RegexFullMatch: input 0 \(X\)"),
        (lambda x: tokenizer(x, tokenexp="a"), r"Tokenizer: input 0 \(X\)"),
    ],
)
def test_numbers_where_strings_are_expected(call, message):
    with pytest.raises(BadInputError, match=f"{message} must be a string tensor, received"):
        call(_t(np.array([1.0, 2.0], dtype=np.float32)))


@pytest.mark.parametrize(
    ("attrs", "shape", "message"),
    [
        (dict(case_change_action="TITLE"), (2,), "case_change_action must be one of"),
        ({}, (2, 2), r"must have shape \(C,\) or \(1, C\), received shape \(2, 2\)"),
    ],
)
def test_string_normalizer_errors(attrs, shape, message):
    x = _t(np.full(shape, "a", dtype=object))
    with pytest.raises(BadInputError, match=f"StringNormalizer: .*{message}"):
        StringNormalizer(**attrs)(x)
