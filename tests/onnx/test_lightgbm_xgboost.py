"""LightGBM and XGBoost models converted by onnxmltools run in sonnx: labels equal the
models' ``predict``, probabilities and values match ``predict_proba``/``predict`` and
onnxruntime."""

from __future__ import annotations

import warnings

import lightgbm
import numpy as np
import onnxmltools
import pytest
import xgboost
from onnxmltools.convert.common.data_types import FloatTensorType

from tests.onnx.test_sklearn import classification, regression, run_both

TYPES = [("X", FloatTensorType([None, 6]))]


def convert(estimator, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(estimator, (lightgbm.LGBMClassifier, lightgbm.LGBMRegressor)):
            return onnxmltools.convert_lightgbm(estimator, initial_types=TYPES, **options)
        return onnxmltools.convert_xgboost(estimator, initial_types=TYPES, **options)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize(
    "make",
    [
        lambda: lightgbm.LGBMClassifier(n_estimators=30, verbose=-1),
        lambda: xgboost.XGBClassifier(n_estimators=30, max_depth=4),
    ],
    ids=["lightgbm", "xgboost"],
)
def test_boosted_classifiers(make, classes):
    x, y = classification(classes, rows=300)
    estimator = make().fit(x, y)
    options = {"zipmap": False} if isinstance(estimator, lightgbm.LGBMClassifier) else {}
    got, expected = run_both(convert(estimator, **options), x)
    np.testing.assert_array_equal(got[0], estimator.predict(x))
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], estimator.predict_proba(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: lightgbm.LGBMRegressor(n_estimators=30, verbose=-1),
        lambda: xgboost.XGBRegressor(n_estimators=30, max_depth=4),
    ],
    ids=["lightgbm", "xgboost"],
)
def test_boosted_regressors(make):
    x, y = regression(rows=300)
    estimator = make().fit(x, y)
    got, expected = run_both(convert(estimator), x)
    scale = np.abs(expected[0]).max()
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6 * scale)
    np.testing.assert_allclose(got[0].ravel(), estimator.predict(x), rtol=1e-4, atol=1e-5 * scale)
