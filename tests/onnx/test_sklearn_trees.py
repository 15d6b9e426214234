"""scikit-learn tree ensembles converted by skl2onnx run in sonnx (TreeEnsembleClassifier and
TreeEnsembleRegressor on sonnx's tree engine, in one padded stage and in several): labels
equal ``predict``, scores match ``predict_proba``/``predict`` and onnxruntime, NaNs follow the
learned missing-value branch."""

from __future__ import annotations

import numpy as np
import pytest
import skl2onnx.common.tree_ensemble as skl2onnx_trees
import torch
from sklearn import ensemble, tree

import sonnx
from sonnx import autograd
from sonnx.engine.backward import gradients
from sonnx.errors import BadInputError
from sonnx.operators.ml import tree_engine as ml_tree_engine
from sonnx.tensor import Tensor
from tests.onnx.test_sklearn import (
    ATOL,
    RTOL,
    check_classifier,
    classification,
    convert,
    regression,
    run_both,
)


@pytest.fixture(autouse=True)
def skl2onnx_missing_tracks_as_ints(monkeypatch):
    """skl2onnx 1.20 writes HistGradientBoosting's missing-value flags as a mix of bools and
    ints, which onnx 1.23's make_attribute refuses; pass them on as ints."""
    add_node = skl2onnx_trees.add_node

    def as_ints(*args, nodes_missing_value_tracks_true=0, **kwargs):
        flag = int(nodes_missing_value_tracks_true)
        return add_node(*args, nodes_missing_value_tracks_true=flag, **kwargs)

    monkeypatch.setattr(skl2onnx_trees, "add_node", as_ints)


def check_regressor(estimator, x, y):
    estimator.fit(x, y)
    got, expected = run_both(convert(estimator, x), x)
    assert got[0].dtype == np.float32 and got[0].shape == (len(x), 1)
    np.testing.assert_allclose(got[0][:, 0], estimator.predict(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got[0], expected[0], rtol=RTOL, atol=ATOL)


CLASSIFIERS = {
    "decision_tree": lambda: tree.DecisionTreeClassifier(max_depth=6, random_state=0),
    "stump_forest": lambda: ensemble.RandomForestClassifier(8, max_depth=2, random_state=0),
    # an odd count of fully grown trees: no probability ties at 0.5 (where float32 and float64
    # sums may round to different sides)
    "random_forest": lambda: ensemble.RandomForestClassifier(11, random_state=0),
    "extra_trees": lambda: ensemble.ExtraTreesClassifier(12, max_depth=7, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingClassifier(
        n_estimators=15, max_depth=3, random_state=0
    ),
    "hist_gradient_boosting": lambda: ensemble.HistGradientBoostingClassifier(
        max_iter=15, random_state=0
    ),
}
REGRESSORS = {
    "decision_tree": lambda: tree.DecisionTreeRegressor(max_depth=3, random_state=0),
    "random_forest": lambda: ensemble.RandomForestRegressor(12, random_state=0),
    "extra_trees": lambda: ensemble.ExtraTreesRegressor(12, max_depth=7, random_state=0),
    "gradient_boosting": lambda: ensemble.GradientBoostingRegressor(
        n_estimators=15, max_depth=3, random_state=0
    ),
    "hist_gradient_boosting": lambda: ensemble.HistGradientBoostingRegressor(
        max_iter=15, random_state=0
    ),
}


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
@pytest.mark.parametrize("classes", [2, 3])
def test_tree_classifiers(name, classes):
    x, y = classification(classes, rows=150)
    check_classifier(CLASSIFIERS[name](), x, y * 7 + 1, zipmap=(classes == 3))


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_tree_regressors(name):
    x, y = regression(rows=150)
    check_regressor(REGRESSORS[name](), x, y)


def test_deep_trees_go_in_stages(monkeypatch):
    """Trees padded in stages of a few levels give the same results as padded whole."""
    x, y = classification(3, rows=150)
    estimator = ensemble.RandomForestClassifier(5, random_state=0).fit(x, y)
    model = convert(estimator, x, zipmap=False)
    padded = sonnx.prepare(model)
    whole = padded.run([x])
    monkeypatch.setattr(ml_tree_engine, "PADDED_LEVELS", 2)
    monkeypatch.setattr(ml_tree_engine, "STAGE_LEVELS", 2)
    staged = sonnx.prepare(model)
    for a, b in zip(whole, staged.run([x]), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    stages = []
    for rep in (padded, staged):
        [op] = [s.op for s in rep.steps if s.info.op_type == "TreeEnsembleClassifier"]
        [forest] = op.__dict__["_forests"].values()
        stages.append(len(forest.stages))
    assert forest.depth > 4 and stages[1] > stages[0]


def _with_nans(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    rng = np.random.default_rng(1)
    x[rng.random(x.shape) < 0.15] = np.nan
    return x


@pytest.mark.parametrize("classes", [2, 3])
def test_hist_gradient_boosting_classifier_with_nans(classes):
    x, y = classification(classes, rows=200)
    x = _with_nans(x)
    estimator = ensemble.HistGradientBoostingClassifier(max_iter=20, random_state=0)
    check_classifier(estimator, x, y)


def test_hist_gradient_boosting_regressor_with_nans():
    x, y = regression(rows=200)
    check_regressor(ensemble.HistGradientBoostingRegressor(max_iter=20), _with_nans(x), y)


def test_rows_go_in_chunks(monkeypatch):
    """A chunk smaller than the batch gives the same results as one chunk."""
    x, y = classification(3, rows=150)
    estimator = ensemble.RandomForestClassifier(10, random_state=0).fit(x, y)
    model = convert(estimator, x, zipmap=False)
    whole = sonnx.prepare(model).run([x])
    monkeypatch.setattr(ml_tree_engine, "CHUNK_ELEMENTS", 70)
    chunked = sonnx.prepare(model).run([x])
    for a, b in zip(whole, chunked, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_too_few_features_name_what_the_trees_read():
    x, y = regression(rows=60)
    estimator = tree.DecisionTreeRegressor(max_depth=4, random_state=0).fit(x, y)
    model = convert(estimator, x)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "F"  # any width passes
    with pytest.raises(BadInputError, match=r"TreeEnsembleRegressor.*at least \d+ features"):
        sonnx.prepare(model).run([x[:, :1]])


def test_trees_record_no_gradient():
    """Piecewise constant: a backward from the scores names the operator that stops it."""
    x, y = classification(2, rows=60)
    estimator = ensemble.RandomForestClassifier(4, max_depth=3, random_state=0).fit(x, y)
    rep = sonnx.prepare(convert(estimator, x, zipmap=False))
    autograd.training = True
    try:
        _, scores = rep.run([Tensor(data=x, requires_grad=True, stores_grad=True)])
        assert not scores.requires_grad
        with pytest.raises(BadInputError, match=r"inference-only.*TreeEnsembleClassifier"):
            gradients(scores, torch.ones_like(scores.data))
    finally:
        autograd.training = False
