"""scikit-learn models converted by skl2onnx run in sonnx: labels equal ``predict`` exactly,
probabilities and values match sklearn and onnxruntime. Linear models, SVMs, neighbours,
naive Bayes, MLP and preprocessing here; tree ensembles in test_sklearn_trees.py.

The helpers below are shared with test_sklearn_trees.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from skl2onnx import to_onnx
from sklearn import (
    decomposition,
    impute,
    linear_model,
    naive_bayes,
    neighbors,
    neural_network,
    preprocessing,
    svm,
)
from sklearn.datasets import make_classification, make_regression

import sonnx
from sonnx import autograd
from sonnx.engine.backward import gradients
from sonnx.errors import BadInputError
from sonnx.onnx.values import MapSequence
from sonnx.tensor import Tensor

RTOL = 1e-5
ATOL = 1e-5


def classification(classes: int, rows: int = 120, seed: int = 0, dtype=np.float32):
    x, y = make_classification(
        rows, 6, n_informative=4, n_classes=classes, n_clusters_per_class=1, random_state=seed
    )
    return x.astype(dtype), y


def regression(rows: int = 120, seed: int = 0, dtype=np.float32):
    x, y = make_regression(rows, 6, noise=0.1, random_state=seed)
    return x.astype(dtype), y


def convert(estimator, x, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, x[:1], options=options or None)


def run_both(model, x) -> tuple[list, list]:
    """(sonnx outputs as arrays / lists of dicts, onnxruntime outputs)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})
    got = [v.numpy() if isinstance(v, Tensor) else v for v in sonnx.prepare(model).run([x])]
    return got, expected


def proba_matrix(maps: list[dict], classes) -> np.ndarray:
    return np.array([[row[c] for c in classes] for row in maps])


def check_classifier(estimator, x, y, zipmap: bool = False, proba: bool = True):
    """Fit, convert, run; labels == predict, scores == predict_proba and onnxruntime."""
    estimator.fit(x, y)
    options = {"zipmap": zipmap} if proba else {}
    got, expected = run_both(convert(estimator, x, **options), x)
    assert got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], estimator.predict(x))
    np.testing.assert_array_equal(got[0], expected[0])
    if zipmap:
        assert isinstance(got[1], MapSequence) and len(got[1]) == len(x)
        assert all(set(row) == set(estimator.classes_.tolist()) for row in got[1])
        scores = proba_matrix(got[1], estimator.classes_)
        reference = proba_matrix(expected[1], estimator.classes_)
    else:
        scores, reference = got[1], expected[1]
        assert scores.dtype == reference.dtype and scores.shape == reference.shape
    if proba:
        np.testing.assert_allclose(scores, estimator.predict_proba(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(scores, reference, rtol=RTOL, atol=ATOL)
    return got


def check_values(estimator, x, y=None, expected_values=None, dtype=None):
    """Fit, convert, run; the one output equals ``predict``/``transform`` and onnxruntime."""
    estimator.fit(x, y) if y is not None else estimator.fit(x)
    got, expected = run_both(convert(estimator, x), x)
    value = got[0]
    assert value.dtype == (dtype or x.dtype) and value.shape == expected[0].shape
    wanted = estimator.predict(x) if expected_values is None else expected_values(estimator)
    np.testing.assert_allclose(value.reshape(np.shape(wanted)), wanted, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(value, expected[0], rtol=RTOL, atol=ATOL)


# ---- linear models -----------------------------------------------------------------------


@pytest.mark.parametrize("estimator", [linear_model.LinearRegression(), linear_model.Ridge()])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_regressors(estimator, dtype):
    x, y = regression(dtype=dtype)
    check_values(estimator, x, y)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("zipmap", [False, True])
def test_logistic_regression(classes, zipmap):
    x, y = classification(classes)
    y = y * 10 + 3  # int labels that are not 0..k-1
    check_classifier(linear_model.LogisticRegression(), x, y, zipmap=zipmap)


def test_logistic_regression_double():
    x, y = classification(3, dtype=np.float64)
    got = check_classifier(linear_model.LogisticRegression(), x, y)
    assert got[1].dtype == np.float64


@pytest.mark.parametrize("classes", [2, 3])
def test_linear_svc(classes):
    x, y = classification(classes)
    estimator = svm.LinearSVC()
    check_classifier(estimator, x, y, proba=False)
    got, _ = run_both(convert(estimator, x), x)
    decision = estimator.decision_function(x).reshape(len(x), -1)
    np.testing.assert_allclose(got[1], decision, rtol=RTOL, atol=ATOL)


# ---- support vector machines -------------------------------------------------------------


@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("kernel", ["rbf", "poly", "sigmoid", "linear"])
def test_svc_with_probabilities(classes, kernel):
    x, y = classification(classes, rows=90)
    estimator = svm.SVC(kernel=kernel, probability=True, random_state=0)
    check_classifier(estimator, x, y, zipmap=(kernel == "rbf"))


@pytest.mark.parametrize("classes", [2, 3])
def test_svc_decision_values(classes):
    x, y = classification(classes, rows=90)
    estimator = svm.SVC(kernel="rbf").fit(x, y)
    got, expected = run_both(convert(estimator, x, zipmap=False), x)
    np.testing.assert_array_equal(got[0], estimator.predict(x))
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=RTOL, atol=1e-5)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly"])
def test_svr(kernel):
    x, y = regression(rows=80)
    check_values(svm.SVR(kernel=kernel, C=10.0), x, y)


# ---- neighbours, naive Bayes, MLP --------------------------------------------------------


def test_kneighbors_classifier():
    x, y = classification(3)
    check_classifier(neighbors.KNeighborsClassifier(n_neighbors=5), x, y)


def test_kneighbors_regressor():
    x, y = regression()
    check_values(neighbors.KNeighborsRegressor(n_neighbors=5), x, y)


def test_gaussian_nb():
    x, y = classification(3)
    check_classifier(naive_bayes.GaussianNB(), x, y, zipmap=True)


def test_mlp_classifier():
    x, y = classification(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged: irrelevant to the comparison
        estimator = neural_network.MLPClassifier((16,), max_iter=60, random_state=0).fit(x, y)
    check_classifier(estimator, x, y)


# ---- preprocessing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "estimator",
    [
        decomposition.PCA(3),
        preprocessing.StandardScaler(),
        preprocessing.MinMaxScaler(),
        preprocessing.Normalizer("l1"),
        preprocessing.Normalizer("l2"),
        preprocessing.Normalizer("max"),
    ],
    ids=lambda e: repr(e),
)
def test_transformers(estimator):
    x, _ = regression()
    if getattr(estimator, "norm", None) == "max":
        # ONNX's MAX norm divides by the row's maximum, sklearn's by its largest magnitude
        # (onnxruntime agrees with sonnx): they coincide on non-negative rows.
        x = np.abs(x)
    check_values(estimator, x, expected_values=lambda e: e.transform(x))


def test_simple_imputer_replaces_nans():
    x, _ = regression()
    x[::7, 1] = np.nan
    x[::5, 4] = np.nan
    estimator = impute.SimpleImputer(strategy="mean")
    check_values(estimator, x, expected_values=lambda e: e.transform(x))


def test_one_hot_encoder_int_categories():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(40, 3)).astype(np.int64) * np.array([1, 10, 100])
    estimator = preprocessing.OneHotEncoder(sparse_output=False).fit(x)
    got, expected = run_both(convert(estimator, x), x)
    np.testing.assert_array_equal(got[0], estimator.transform(x))
    np.testing.assert_array_equal(got[0], expected[0])


# ---- bad inputs and gradients ------------------------------------------------------------


@pytest.fixture(scope="module")
def logistic_rep():
    x, y = classification(3)
    estimator = linear_model.LogisticRegression().fit(x, y)
    return sonnx.prepare(convert(estimator, x, zipmap=False)), x


def test_strings_fed_to_a_float_input_name_the_input(logistic_rep):
    rep, x = logistic_rep
    with pytest.raises(BadInputError, match=r"input 'X'.*(str|<U)"):
        rep.run([np.array([["a"] * x.shape[1]])])


def test_wrong_feature_count_names_expected_and_received(logistic_rep):
    rep, x = logistic_rep
    with pytest.raises(BadInputError, match=r"input 'X' expects .*6\).*received shape \(5, 4\)"):
        rep.run([x[:5, :4]])


def test_wrong_dtype_is_refused(logistic_rep):
    rep, x = logistic_rep
    with pytest.raises(BadInputError, match=r"input 'X' expects float32.*received float64"):
        rep.run([x.astype(np.float64)])


def test_smooth_scores_carry_a_gradient_in_x():
    """LinearRegressor is differentiable in X: d(sum y)/dX is the coefficient row."""
    x, y = regression(rows=30)
    estimator = linear_model.LinearRegression().fit(x, y)
    rep = sonnx.prepare(convert(estimator, x))
    autograd.training = True
    inputs = Tensor(data=x, requires_grad=True, stores_grad=True)
    out = rep.run([inputs])[0]
    [(param, grad)] = gradients(out, torch.ones_like(out.data))
    assert param is inputs
    np.testing.assert_allclose(grad.numpy(), np.tile(estimator.coef_, (30, 1)), rtol=1e-5)
