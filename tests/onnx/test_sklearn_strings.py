"""scikit-learn models with strings, converted by skl2onnx and run in sonnx: string class
labels (with and without ZipMap), string categories, LabelEncoder and a ColumnTransformer
pipeline over numeric and string columns. Labels equal ``predict`` exactly; probabilities
match ``predict_proba`` and onnxruntime."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
from skl2onnx import convert_sklearn, to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn import compose, linear_model, pipeline, preprocessing, svm, tree

import sonnx
from sonnx.errors import BadInputError
from sonnx.onnx.values import MapSequence
from sonnx.tensor import Tensor
from tests.onnx.test_sklearn import ATOL, RTOL, classification, proba_matrix

NAMES = np.array(["bird", "cat", "dog", "eel"], dtype=object)


def run_both(model, feeds: dict) -> tuple[list, list]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = [v.numpy() if isinstance(v, Tensor) else v for v in sonnx.prepare(model).run(feeds)]
    return got, expected


def check_string_classifier(estimator, classes: int, zipmap: bool) -> None:
    x, y = classification(classes)
    labels = NAMES[y]
    estimator.fit(x, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(estimator, x[:1], options={"zipmap": zipmap})
    got, expected = run_both(model, {"X": x})
    assert got[0].dtype == object and all(isinstance(v, str) for v in got[0])
    np.testing.assert_array_equal(got[0], estimator.predict(x))
    np.testing.assert_array_equal(got[0], expected[0])
    if zipmap:
        assert isinstance(got[1], MapSequence)
        scores = proba_matrix(got[1], estimator.classes_)
        reference = proba_matrix(expected[1], estimator.classes_)
    else:
        scores, reference = got[1], expected[1]
    np.testing.assert_allclose(scores, estimator.predict_proba(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(scores, reference, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("zipmap", [False, True])
def test_logistic_regression_with_string_labels(classes, zipmap):
    check_string_classifier(linear_model.LogisticRegression(), classes, zipmap)


@pytest.mark.parametrize("classes", [2, 3])
def test_svc_with_string_labels(classes):
    check_string_classifier(svm.SVC(probability=True, random_state=0), classes, zipmap=False)


@pytest.mark.parametrize("classes", [2, 3])
def test_decision_tree_with_string_labels(classes):
    check_string_classifier(tree.DecisionTreeClassifier(max_depth=5), classes, zipmap=True)


def test_one_hot_encoder_on_string_categories():
    rng = np.random.default_rng(0)
    x = np.stack([NAMES[rng.integers(0, 4, 50)], NAMES[rng.integers(1, 3, 50)]], 1)
    estimator = preprocessing.OneHotEncoder(sparse_output=False, handle_unknown="ignore").fit(x)
    model = to_onnx(estimator, x[:1])
    unseen = x.copy()
    unseen[0, 1] = "unicorn"  # an unknown category: a zero row, as in sklearn
    for data in (x, unseen):
        got, expected = run_both(model, {"X": data})
        np.testing.assert_array_equal(got[0], estimator.transform(data))
        np.testing.assert_array_equal(got[0], expected[0])


def test_label_encoder():
    estimator = preprocessing.LabelEncoder().fit(NAMES[[2, 0, 1, 3, 1]])
    model = convert_sklearn(estimator, initial_types=[("X", StringTensorType([None]))])
    values = NAMES[[3, 1, 1, 0, 2]]
    got, expected = run_both(model, {"X": values})
    np.testing.assert_array_equal(got[0], estimator.transform(values))
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.fixture(scope="module")
def mixed_pipeline():
    """Numeric columns scaled, a string column one-hot encoded, then a logistic regression
    with string labels: skl2onnx gives one graph input per column."""
    rng = np.random.default_rng(1)
    rows = 80
    frame = pd.DataFrame(
        {
            "height": rng.normal(170, 10, rows).astype(np.float32),
            "weight": rng.normal(70, 8, rows).astype(np.float32),
            "city": NAMES[rng.integers(0, 4, rows)],
        }
    )
    labels = np.where(frame["height"] + 3 * (frame["city"] == "cat") > 171, "tall", "short")
    columns = compose.ColumnTransformer(
        [
            ("numbers", preprocessing.StandardScaler(), ["height", "weight"]),
            ("words", preprocessing.OneHotEncoder(handle_unknown="ignore"), ["city"]),
        ]
    )
    estimator = pipeline.Pipeline(
        [("columns", columns), ("classifier", linear_model.LogisticRegression())]
    ).fit(frame, labels)
    types = [
        ("height", FloatTensorType([None, 1])),
        ("weight", FloatTensorType([None, 1])),
        ("city", StringTensorType([None, 1])),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = convert_sklearn(estimator, initial_types=types, options={"zipmap": False})
    feeds = {
        "height": frame[["height"]].to_numpy(),
        "weight": frame[["weight"]].to_numpy(),
        "city": frame[["city"]].to_numpy().astype(object),
    }
    return estimator, model, frame, feeds


def test_column_transformer_over_numbers_and_strings(mixed_pipeline):
    estimator, model, frame, feeds = mixed_pipeline
    got, expected = run_both(model, feeds)
    np.testing.assert_array_equal(got[0], estimator.predict(frame))
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], estimator.predict_proba(frame), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got[1], expected[1], rtol=RTOL, atol=ATOL)


def test_numbers_fed_to_a_string_input_name_the_input(mixed_pipeline):
    _, model, _, feeds = mixed_pipeline
    rep = sonnx.prepare(model)
    with pytest.raises(BadInputError, match=r"input 'city' expects string.*received float"):
        rep.run({**feeds, "city": feeds["height"]})


def test_a_missing_column_is_named(mixed_pipeline):
    _, model, _, feeds = mixed_pipeline
    rep = sonnx.prepare(model)
    with pytest.raises(BadInputError, match=r"no value given for input\(s\) \['weight'\]"):
        rep.run({k: v for k, v in feeds.items() if k != "weight"})
