"""ai.onnx.ml LinearRegressor, LinearClassifier, Scaler, Normalizer, Imputer,
FeatureVectorizer, OneHotEncoder, SVMClassifier/Regressor, TreeEnsembleClassifier/Regressor
and ZipMap on hand-written nodes against onnxruntime: the attribute combinations skl2onnx does
not produce (post transforms, aggregates, branch modes, base values), and bad attributes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

ML = "ai.onnx.ml"
RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 3)).astype(np.float32)


def _model(op_type: str, outputs: list[tuple[str, int]], x: np.ndarray, **attrs):
    node = helper.make_node(op_type, ["x"], [n for n, _ in outputs], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def compare(op_type, outputs, x=X, rtol=1e-5, atol=1e-6, **attrs):
    model = _model(op_type, outputs, x, **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})
    got = [v.numpy() for v in sonnx.prepare(model).run([x])]
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return got


CLASSIFIER_OUT = [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)]
FLOAT_OUT = [("y", TensorProto.FLOAT)]
TRANSFORMS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("rows", [1, 3])
def test_linear_classifier(transform, rows):
    coefficients = RNG.normal(size=rows * 3).tolist()
    labels = [4, 9] if rows == 1 else [4, 9, 2]
    intercepts = RNG.normal(size=rows).tolist()
    compare(
        "LinearClassifier",
        CLASSIFIER_OUT,
        coefficients=coefficients,
        intercepts=intercepts,
        classlabels_ints=labels,
        post_transform=transform,
    )


def test_linear_regressor_two_targets_and_input_types():
    attrs = dict(coefficients=RNG.normal(size=6).tolist(), intercepts=[0.5, -1.0], targets=2)
    [expected] = compare("LinearRegressor", FLOAT_OUT, **attrs)
    # onnxruntime only takes float32 here: other types must give what their float32 gives.
    for x in (X.astype(np.float64), np.round(X * 4).astype(np.int64)):
        [got] = sonnx.prepare(_model("LinearRegressor", FLOAT_OUT, x, **attrs)).run([x])
        [same] = compare("LinearRegressor", FLOAT_OUT, x=x.astype(np.float32), **attrs)
        np.testing.assert_allclose(got.numpy(), same, rtol=1e-6)
    assert expected.shape == (len(X), 2)


def test_scaler_normalizer_imputer_feature_vectorizer():
    compare("Scaler", FLOAT_OUT, offset=[1.0, 2.0, 3.0], scale=[0.5, 2.0, -1.0])
    for norm in ("MAX", "L1", "L2"):
        compare("Normalizer", FLOAT_OUT, norm=norm)
    holes = X.copy()
    holes[::3, 1] = np.nan
    compare(
        "Imputer",
        FLOAT_OUT,
        x=holes,
        imputed_value_floats=[7.0, 8.0, 9.0],
        replaced_value_float=float("nan"),
    )
    ints = RNG.integers(-2, 3, size=(8, 3)).astype(np.int64)
    compare(
        "Imputer",
        [("y", TensorProto.INT64)],
        x=ints,
        imputed_value_int64s=[5],
        replaced_value_int64=0,
    )
    compare("FeatureVectorizer", FLOAT_OUT, inputdimensions=[5])


def test_one_hot_encoder_unknown_values():
    x = np.array([[1, 5], [3, 2]], dtype=np.int64)
    got = compare("OneHotEncoder", FLOAT_OUT, x=x, cats_int64s=[1, 2, 3], zeros=1)
    assert got[0].shape == (2, 2, 3)
    model = _model("OneHotEncoder", FLOAT_OUT, x, cats_int64s=[1, 2, 3], zeros=0)
    with pytest.raises(BadInputError, match=r"zeros=0 .*received \[5\]"):
        sonnx.prepare(model).run([x])


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
def test_svm_regressor_kernels_and_one_class(kernel):
    vectors = RNG.normal(size=(4, 3))
    attrs = dict(
        support_vectors=vectors.reshape(-1).tolist(),
        coefficients=RNG.normal(size=4).tolist(),
        rho=[0.25],
        n_supports=4,
        kernel_type=kernel,
        kernel_params=[0.3, 0.1, 3.0],
    )
    compare("SVMRegressor", FLOAT_OUT, rtol=1e-4, **attrs)
    compare("SVMRegressor", FLOAT_OUT, one_class=1, **attrs)


def test_svm_classifier_liblinear_mode():
    compare(
        "SVMClassifier",
        CLASSIFIER_OUT,
        coefficients=RNG.normal(size=9).tolist(),
        rho=[0.1],
        classlabels_ints=[0, 1, 2],
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
    )


# ---- trees: two trees of depth 2 over 3 features, with every branch mode --------------------


def _trees(modes: list[str], tracks: list[int], prefix: str, ids: list[int]) -> dict:
    """Tree 0: node 0 splits on feature 0 into nodes 1 (leaf) and 2 (a split on feature 1
    into leaves 3 and 4); tree 1 is a single split on feature 2 into leaves 1 and 2."""
    leaves = [(0, 1), (0, 3), (0, 4), (1, 1), (1, 2)]
    return {
        "nodes_treeids": [0, 0, 0, 0, 0, 1, 1, 1],
        "nodes_nodeids": [0, 1, 2, 3, 4, 0, 1, 2],
        "nodes_featureids": [0, 0, 1, 0, 0, 2, 0, 0],
        "nodes_values": [0.1, 0, -0.2, 0, 0, 0.3, 0, 0],
        "nodes_modes": [modes[0], "LEAF", modes[1], "LEAF", "LEAF", modes[2], "LEAF", "LEAF"],
        "nodes_truenodeids": [1, 0, 3, 0, 0, 1, 0, 0],
        "nodes_falsenodeids": [2, 0, 4, 0, 0, 2, 0, 0],
        "nodes_missing_value_tracks_true": [tracks[0], 0, tracks[1], 0, 0, tracks[2], 0, 0],
        f"{prefix}_treeids": [t for t, _ in leaves for _ in ids],
        f"{prefix}_nodeids": [n for _, n in leaves for _ in ids],
        f"{prefix}_ids": ids * len(leaves),
        f"{prefix}_weights": RNG.normal(size=len(leaves) * len(ids)).round(3).tolist(),
    }


TREE_X = np.concatenate([X, [[np.nan, 0.0, np.nan], [0.1, -0.2, 0.3]]]).astype(np.float32)
MODE_SETS = [
    ["BRANCH_LEQ", "BRANCH_LEQ", "BRANCH_LEQ"],
    ["BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"],
    ["BRANCH_EQ", "BRANCH_NEQ", "BRANCH_LT"],
]


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("modes", MODE_SETS)
def test_tree_regressor_aggregates_modes_and_missing_values(aggregate, modes):
    attrs = _trees(modes, [1, 0, 1], "target", [0, 1])
    compare(
        "TreeEnsembleRegressor",
        FLOAT_OUT,
        x=TREE_X,
        n_targets=2,
        aggregate_function=aggregate,
        base_values=[0.5, -0.5],
        **attrs,
    )


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(
    ("ids", "labels", "base"),
    [
        ([0, 1, 2], [10, 20, 30], [0.1, 0.2, 0.3]),  # multiclass with base values
        # binary, both classes weighted: onnxruntime labels 1 and 0 whatever the class
        # labels (sonnx takes the labels), so they are 1 and 0 here
        ([0, 1], [0, 1], []),
        ([0], [3, 5], [0.2]),  # binary case: one class weighted, one base value
        ([0], [3, 5], []),
    ],
)
def test_tree_classifier_scores_and_binary_rules(transform, ids, labels, base):
    attrs = _trees(MODE_SETS[0], [0, 1, 0], "class", ids)
    if base:
        attrs["base_values"] = base
    compare(
        "TreeEnsembleClassifier",
        CLASSIFIER_OUT,
        x=TREE_X,
        classlabels_int64s=labels,
        post_transform=transform,
        **attrs,
    )


def test_zipmap_lists_a_dict_per_row():
    model = _model("ZipMap", [], X)
    del model.graph.node[:]
    node = helper.make_node("ZipMap", ["x"], ["maps"], domain=ML, classlabels_int64s=[7, 8, 9])
    model.graph.node.append(node)
    out_type = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(1, None))
    )
    model.graph.output.append(helper.make_value_info("maps", out_type))
    maps = sonnx.prepare(model).run([X])[0]
    assert [list(m) for m in maps] == [[7, 8, 9]] * len(X)
    np.testing.assert_allclose([list(m.values()) for m in maps], X)


def test_bad_attributes_and_inputs_are_named():
    model = _model("LinearRegressor", FLOAT_OUT, X, coefficients=[1.0, 2.0], targets=1)
    with pytest.raises(BadInputError, match="coefficients must hold a multiple of the 3"):
        sonnx.prepare(model).run([X])
    trees = _trees(MODE_SETS[0], [0, 0, 0], "target", [0])
    trees["nodes_truenodeids"][0] = 42
    model = _model("TreeEnsembleRegressor", FLOAT_OUT, TREE_X, n_targets=1, **trees)
    with pytest.raises(BadInputError, match="nodes_truenodeids names a node that does not"):
        sonnx.prepare(model).run([TREE_X])
    op = sonnx.operators.ml.linear.Scaler(offset=[1.0, 2.0], scale=[1.0])
    with pytest.raises(BadInputError, match=r"offset must hold 1 or 3 values.*received 2"):
        op(Tensor(data=X, requires_grad=False))
