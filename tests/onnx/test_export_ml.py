"""The ai.onnx.ml operators built from sonnx (not imported) export: a tiny model per op passes
the ONNX checker and onnxruntime matches sonnx at batch 2 and 5. Imported scikit-learn models
export their own graphs (tests/onnx/test_sklearn.py); these cases cover each operator's own
``export``."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx.operators.ml.linear import (
    FeatureVectorizer,
    Imputer,
    LinearClassifier,
    LinearRegressor,
    Normalizer,
    OneHotEncoder,
    Scaler,
)
from sonnx.operators.ml.lookup import CategoryMapper, LabelEncoder
from sonnx.operators.ml.svm import SVMClassifier, SVMRegressor
from sonnx.operators.ml.trees import TreeEnsembleClassifier, TreeEnsembleRegressor
from tests.onnx.export_check import export_check, rng_inputs
from tests.onnx.test_export_strings import words

F = np.float32
COEFFICIENTS = [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, 0.1, -0.3]  # 3 classes x 3 features
SUPPORT = [0.1, 0.2, -0.3, 1.0, -0.5, 0.4, -1.0, 0.3, 0.2]  # 3 support vectors x 3 features

# One depth-2 tree over 3 features: node 0 splits x0 <= 0.1, node 1 splits x2 < -0.2.
TREE = {
    "nodes_treeids": [0, 0, 0, 0, 0],
    "nodes_nodeids": [0, 1, 2, 3, 4],
    "nodes_featureids": [0, 2, 0, 0, 0],
    "nodes_modes": ["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF"],
    "nodes_values": [0.1, -0.2, 0.0, 0.0, 0.0],
    "nodes_truenodeids": [1, 3, 0, 0, 0],
    "nodes_falsenodeids": [2, 4, 0, 0, 0],
}


def features(width: int = 3):
    return rng_inputs(((width,), F))


def case(id_: str, build, make=None, **opts):
    return pytest.param(build, make or features(), opts, id=id_)


ML = [
    case(
        "linear_regressor",
        lambda x: LinearRegressor(coefficients=[0.5, -1.0, 2.0], intercepts=[0.25])(x),
    ),
    case(
        "linear_classifier_softmax",
        lambda x: LinearClassifier(
            coefficients=COEFFICIENTS,
            intercepts=[0.1, 0.0, -0.1],
            classlabels_ints=[3, 5, 7],
            post_transform="SOFTMAX",
        )(x),
    ),
    case("scaler", lambda x: Scaler(offset=[0.5, -0.5, 0.0], scale=[2.0, 1.0, 0.5])(x)),
    case("normalizer_l2", lambda x: Normalizer(norm="L2")(x)),
    case(
        "imputer",
        lambda x: Imputer(imputed_value_floats=[1.0, 2.0, 3.0], replaced_value_float=0.0)(x),
    ),
    case(
        "feature_vectorizer",
        lambda x, y: FeatureVectorizer(inputdimensions=[3, 2])(x, y),
        rng_inputs(((3,), F), ((2,), F)),
    ),
    case(
        "one_hot_encoder",
        lambda x: OneHotEncoder(cats_int64s=[0, 1, 2, 3], zeros=1)(x),
        rng_inputs(((3,), lambda r, s: r.integers(0, 4, s).astype(np.int64))),
    ),
    case(
        "svm_classifier_rbf_probabilities",
        lambda x: SVMClassifier(
            classlabels_ints=[0, 1],
            coefficients=[0.7, -0.4, -0.3],
            kernel_params=[0.5, 0.0, 3.0],
            kernel_type="RBF",
            prob_a=[-1.2],
            prob_b=[0.1],
            rho=[0.05],
            support_vectors=SUPPORT,
            vectors_per_class=[1, 2],
        )(x),
        rtol=1e-4,
    ),
    case(
        "svm_regressor_linear",
        lambda x: SVMRegressor(
            coefficients=[0.7, -0.4, 0.3],
            kernel_params=[0.0, 0.0, 0.0],  # onnxruntime requires the attribute
            kernel_type="LINEAR",
            n_supports=3,
            rho=[0.2],
            support_vectors=SUPPORT,
        )(x),
        rtol=1e-4,
    ),
    case(
        "label_encoder_strings_to_floats",
        lambda x: LabelEncoder(
            version=2, keys_strings=["cat", "dog"], values_floats=[0.5, -1.0], default_float=7.0
        )(x),
        words(3),
    ),
    case(
        "category_mapper_strings_to_ints",
        lambda x: CategoryMapper(cats_strings=["cat", "dog"], cats_int64s=[3, 4])(x),
        words(),
    ),
    case(
        "tree_ensemble_regressor",
        lambda x: TreeEnsembleRegressor(
            **TREE,
            n_targets=1,
            target_treeids=[0, 0, 0],
            target_nodeids=[2, 3, 4],
            target_ids=[0, 0, 0],
            target_weights=[1.5, -2.0, 4.0],
        )(x),
    ),
    case(
        "tree_ensemble_classifier",
        lambda x: TreeEnsembleClassifier(
            **TREE,
            classlabels_int64s=[10, 20, 30],
            class_treeids=[0, 0, 0],
            class_nodeids=[2, 3, 4],
            class_ids=[0, 1, 2],
            class_weights=[1.0, 1.0, 1.0],
            post_transform="SOFTMAX",
        )(x),
    ),
]


@pytest.mark.parametrize(("build", "make", "opts"), ML)
def test_ml_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
