"""ai.onnx.ml Binarizer, ArrayFeatureExtractor and TreeEnsemble: forward against onnx.reference
(and onnxruntime for TreeEnsemble's post transforms), ArrayFeatureExtractor's gradient, bad
inputs and the exported domain import."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx import autograd
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.ml import tree_engine as ml_tree_engine
from sonnx.tensor import Tensor
from tests.helpers import check_grad

ML = "ai.onnx.ml"
RNG = np.random.default_rng(0)


def _t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def _model(op_type: str, inputs: list[np.ndarray], **attrs):
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, inputs, strict=True)
        ],
        # Each op here returns its first input's element type.
        [
            helper.make_tensor_value_info(
                "y", helper.np_dtype_to_tensor_dtype(inputs[0].dtype), None
            )
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10), dict(
        zip(names, inputs, strict=True)
    )


def reference(op_type: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    model, feeds = _model(op_type, inputs, **attrs)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def onnxruntime(op_type: str, inputs: list[np.ndarray], **attrs) -> np.ndarray:
    model, feeds = _model(op_type, inputs, **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


# ---- Binarizer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("threshold", [0.0, 1.5])
def test_binarizer_matches_reference(dtype, threshold):
    x = (RNG.standard_normal((3, 4)) * 3).astype(dtype)
    got = autograd.binarizer(_t(x), threshold).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, reference("Binarizer", [x], threshold=threshold))


def test_binarizer_rejects_other_types():
    with pytest.raises(
        BadInputError, match=r"Binarizer: input X must be float32, .* received uint8"
    ):
        autograd.binarizer(_t(np.ones(3, np.uint8)))


# ---- ArrayFeatureExtractor ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "indices"),
    [
        ((5,), np.array([4, 0, 2])),
        ((3, 5), np.array([1, 1, 3])),
        ((3, 5), np.array([[0, 4]])),
        ((2, 3, 5), np.array([[0, 1], [4, 2]])),
        ((2, 4), np.array(3)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_array_feature_extractor_matches_reference(shape, indices, dtype):
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    got = autograd.ArrayFeatureExtractor()(_t(x), _t(indices.astype(np.int64))).numpy()
    np.testing.assert_array_equal(got, reference("ArrayFeatureExtractor", [x, indices]))


def test_array_feature_extractor_gradient():
    x = RNG.standard_normal((3, 4))
    check_grad(lambda a: autograd.array_feature_extractor(a, [3, 0, 3]), [x])


def test_array_feature_extractor_bad_inputs():
    x = _t(np.ones((2, 3), np.float32))
    with pytest.raises(BadInputError, match=r"indices Y must be in \[0, 2\].*received \[3\]"):
        autograd.array_feature_extractor(x, [3])
    with pytest.raises(BadInputError, match=r"Y must be int64 indices, received int32"):
        autograd.ArrayFeatureExtractor()(x, _t(np.array([0], np.int32)))
    with pytest.raises(BadInputError, match="input X must have at least 1 dimension"):
        autograd.array_feature_extractor(_t(np.float32(1.0)), [0])


# ---- TreeEnsemble ---------------------------------------------------------------------------

VALUES = [1.0, 2.0, 3.0, 4.0, 5.0]  # no 0.0: onnx.reference stops a membership set at a zero


def random_ensemble(rng, n_trees: int, n_features: int, n_targets: int) -> dict:
    """Random trees with every node mode; nodes in depth-first order (as the sets are read)."""
    nodes: dict[str, list] = {
        k: []
        for k in (
            "featureids",
            "modes",
            "splits",
            "truenodeids",
            "trueleafs",
            "falsenodeids",
            "falseleafs",
            "missing_value_tracks_true",
        )
    }
    leaf_targets: list[int] = []
    leaf_weights: list[float] = []
    members: list[float] = []

    def build(depth: int, force_node: bool = False) -> tuple[int, int]:
        if not force_node and (depth == 0 or rng.random() < 0.25):
            leaf_targets.append(int(rng.integers(0, n_targets)))
            leaf_weights.append(float(rng.uniform(-5, 5)))
            return len(leaf_targets) - 1, 1
        i = len(nodes["modes"])
        mode = int(rng.integers(0, 7))
        nodes["featureids"].append(int(rng.integers(0, n_features)))
        nodes["modes"].append(mode)
        nodes["splits"].append(math.nan if mode == 6 else float(rng.choice(VALUES)) + 0.5 * (i % 2))
        nodes["missing_value_tracks_true"].append(int(rng.integers(0, 2)))
        if mode == 6:
            members.extend([*rng.choice(VALUES, int(rng.integers(1, 4)), replace=False), math.nan])
        for key in ("truenodeids", "trueleafs", "falsenodeids", "falseleafs"):
            nodes[key].append(0)
        nodes["truenodeids"][i], nodes["trueleafs"][i] = build(depth - 1)
        nodes["falsenodeids"][i], nodes["falseleafs"][i] = build(depth - 1)
        return i, 0

    roots = [build(4, force_node=True)[0] for _ in range(n_trees)]
    attrs = {f"nodes_{k}": v for k, v in nodes.items()}
    attrs.update(tree_roots=roots, leaf_targetids=leaf_targets, n_targets=n_targets)
    attrs["nodes_modes"] = np.array(nodes["modes"], np.uint8)
    attrs["nodes_splits"] = np.array(nodes["splits"], np.float32)
    attrs["leaf_weights"] = np.array(leaf_weights, np.float32)
    if members:
        attrs["membership_values"] = np.array(members, np.float32)
    return attrs


def _features(rng, n: int, f: int) -> np.ndarray:
    x = rng.choice([*VALUES, 2.5, 4.5, math.nan], (n, f)).astype(np.float32)
    return x


def _tensor_attrs(attrs: dict) -> dict:
    """Array attributes as the TensorProto attributes onnx.helper needs for a node."""
    return {
        k: helper.make_tensor(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape, v.ravel())
        if isinstance(v, np.ndarray)
        else v
        for k, v in attrs.items()
    }


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_ensemble_matches_reference(aggregate, seed):
    rng = np.random.default_rng(seed)
    attrs = random_ensemble(rng, n_trees=4, n_features=3, n_targets=3)
    x = _features(rng, 40, 3)
    got = autograd.TreeEnsemble(aggregate_function=aggregate, **attrs)(_t(x)).numpy()
    expected = reference(
        "TreeEnsemble", [x], aggregate_function=aggregate, **_tensor_attrs(attrs)
    ).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


def test_tree_ensemble_in_stages_matches_reference(monkeypatch):
    """Every mode, membership sets and NaNs through several one-level stages of the engine."""
    monkeypatch.setattr(ml_tree_engine, "PADDED_LEVELS", 1)
    monkeypatch.setattr(ml_tree_engine, "STAGE_LEVELS", 1)
    rng = np.random.default_rng(4)
    attrs = random_ensemble(rng, n_trees=4, n_features=3, n_targets=3)
    x = _features(rng, 40, 3)
    got = autograd.TreeEnsemble(aggregate_function=1, **attrs)(_t(x)).numpy()
    expected = reference("TreeEnsemble", [x], aggregate_function=1, **_tensor_attrs(attrs))
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-6, atol=1e-5)


# onnxruntime 1.31 numbers the transforms 1 LOGISTIC, 2 SOFTMAX, where the ONNX schema says
# 1 SOFTMAX, 2 LOGISTIC (sonnx follows the schema); its PROBIT approximates erfinv to ~1e-4.
@pytest.mark.parametrize(
    ("transform", "ort_transform", "rtol"), [(1, 2, 1e-5), (2, 1, 1e-5), (3, 3, 1e-5), (4, 4, 1e-3)]
)
def test_tree_ensemble_post_transforms_match_onnxruntime(transform, ort_transform, rtol):
    rng = np.random.default_rng(7)
    attrs = random_ensemble(rng, n_trees=3, n_features=2, n_targets=4)
    attrs["leaf_weights"] = rng.uniform(0.05, 0.3, attrs["leaf_weights"].shape).astype(np.float32)
    x = _features(rng, 30, 2)
    got = autograd.TreeEnsemble(post_transform=transform, **attrs)(_t(x)).numpy()
    expected = onnxruntime(
        "TreeEnsemble", [x], post_transform=ort_transform, **_tensor_attrs(attrs)
    )
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("n_targets", [1, 4])
@pytest.mark.parametrize(("transform", "ort_transform"), [(1, 2), (2, 1), (3, 3), (4, 4)])
def test_tree_ensemble_post_transforms_with_zero_scores_and_one_target_match_onnxruntime(
    n_targets, transform, ort_transform
):
    """Half the leaves weigh exactly 0, so SOFTMAX_ZERO meets zero scores; with one target only
    PROBIT changes the scores (onnxruntime's write_scores, as every other ai.onnx.ml op does)."""
    rng = np.random.default_rng(11)
    attrs = random_ensemble(rng, n_trees=3, n_features=2, n_targets=n_targets)
    weights = rng.uniform(0.05, 0.3, attrs["leaf_weights"].shape).astype(np.float32)
    weights[::2] = 0.0
    attrs["leaf_weights"] = weights
    x = _features(rng, 30, 2)
    got = autograd.TreeEnsemble(post_transform=transform, **attrs)(_t(x)).numpy()
    expected = onnxruntime(
        "TreeEnsemble", [x], post_transform=ort_transform, **_tensor_attrs(attrs)
    )
    if n_targets > 1:  # SOFTMAX_ZERO's case: some targets score exactly 0
        assert (autograd.TreeEnsemble(**attrs)(_t(x)).numpy() == 0).any()
    np.testing.assert_allclose(got, expected, rtol=1e-3 if transform == 4 else 1e-5, atol=1e-6)


def test_tree_ensemble_softmax_and_logistic_follow_the_schema_numbering():
    rng = np.random.default_rng(3)
    attrs = random_ensemble(rng, n_trees=3, n_features=2, n_targets=4)
    x = _features(rng, 10, 2)
    raw = autograd.TreeEnsemble(**attrs)(_t(x)).data.double()
    softmax = autograd.TreeEnsemble(post_transform=1, **attrs)(_t(x)).numpy()
    logistic = autograd.TreeEnsemble(post_transform=2, **attrs)(_t(x)).numpy()
    np.testing.assert_allclose(softmax, raw.softmax(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(logistic, raw.sigmoid().numpy(), rtol=1e-6)


def test_tree_ensemble_function_single_leaf_tree_and_float64():
    x = np.array([[1.0], [7.0]])
    y = autograd.tree_ensemble(
        _t(x),
        tree_roots=[0, 1],
        nodes_featureids=[0, 0],
        nodes_modes=[0, 0],
        nodes_splits=[3.0, 0.0],
        nodes_truenodeids=[0, 2],
        nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[1, 2],
        nodes_falseleafs=[1, 1],
        leaf_targetids=[0, 1, 1],
        leaf_weights=[1.5, -2.0, 10.0],
        n_targets=2,
    )
    # Tree 2 is the single leaf 2 (both branches of its root lead there).
    assert y.numpy().dtype == np.float64
    np.testing.assert_array_equal(y.numpy(), [[1.5, 10.0], [0.0, 8.0]])


def _stump(**changes) -> dict:
    attrs = dict(
        tree_roots=[0],
        nodes_featureids=[0],
        nodes_modes=np.array([0], np.uint8),
        nodes_splits=np.array([1.0], np.float32),
        nodes_truenodeids=[0],
        nodes_trueleafs=[1],
        nodes_falsenodeids=[1],
        nodes_falseleafs=[1],
        leaf_targetids=[0, 1],
        leaf_weights=np.array([1.0, 2.0], np.float32),
        n_targets=2,
    )
    attrs.update(changes)
    return attrs


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes_featureids": [0, 1]}, "every nodes_\\* attribute must have one value per node"),
        (
            {"nodes_featureids": [5]},
            r"X has 2 features but nodes_featureids refers to features \[5\]",
        ),
        ({"nodes_modes": np.array([9], np.uint8)}, "nodes_modes must hold values 0 to 6"),
        ({"nodes_modes": np.array([6], np.uint8)}, "one NaN-terminated set per set membership"),
        ({"leaf_targetids": [0, 2]}, r"leaf_targetids must be in \[0, 1\]"),
        ({"leaf_weights": np.ones(3, np.float32)}, "leaf_targetids and leaf_weights must have"),
        ({"aggregate_function": 7}, "aggregate_function must be one of"),
        ({"post_transform": 5}, "post_transform must be one of"),
        ({"tree_roots": [3]}, r"tree_roots must name nodes in \[0, 0\]"),
        ({"nodes_trueleafs": [0], "nodes_falsenodeids": [0], "nodes_falseleafs": [0]}, "cycle"),
        (
            {"nodes_trueleafs": [0], "nodes_truenodeids": [2]},
            r"branch leads to node 2, not in \[0, 0\]",
        ),
        ({"nodes_falsenodeids": [4]}, "a branch leads to leaf 4, but only 2 leaves"),
    ],
)
def test_tree_ensemble_bad_attributes(changes, message):
    x = _t(np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
    with pytest.raises(BadInputError, match=f"TreeEnsemble: .*{message}"):
        autograd.TreeEnsemble(**_stump(**changes))(x)


def test_tree_ensemble_bad_inputs():
    op = autograd.TreeEnsemble(**_stump())
    with pytest.raises(BadInputError, match="input X must be float16, float32 or float64"):
        op(_t(np.ones((2, 2), np.int64)))
    with pytest.raises(BadInputError, match=r"input X must be 2-D \(N, features\)"):
        op(_t(np.ones(2, np.float32)))


def test_export_imports_the_ml_domain_at_the_ops_version():
    x = Tensor(data=np.ones((2, 2), np.float32), requires_grad=False, name="x")
    y = autograd.tree_ensemble(
        autograd.binarizer(x, 0.5), **{k: v for k, v in _stump().items() if k != "n_targets"}
    )
    model = to_onnx([x], [y])
    assert {o.domain: o.version for o in model.opset_import}[ML] == 5
    model = to_onnx([x], [autograd.binarizer(x)])
    assert {o.domain: o.version for o in model.opset_import}[ML] == 1
