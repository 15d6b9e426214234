"""What else a user does with a converted scikit-learn model: wrap it in SONNXModel for
inference, re-export it with ``to_onnx`` (its own graph comes back, strings and ZipMap
included, and onnxruntime runs it), and try to train it (a clear error naming the operator)."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from skl2onnx import to_onnx
from sklearn import linear_model, tree

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor
from tests.onnx.test_sklearn import classification, regression

NAMES = np.array(["bird", "cat", "dog"], dtype=object)


def converted(estimator, x, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, x[:1], options=options or None)


@pytest.fixture(scope="module")
def string_classifier():
    x, y = classification(3)
    estimator = linear_model.LogisticRegression().fit(x, NAMES[y])
    return estimator, converted(estimator, x, zipmap=False), x


def test_sonnx_model_runs_a_string_label_classifier(string_classifier):
    estimator, model, x = string_classifier
    wrapped = sonnx.SONNXModel(model)
    wrapped.eval()
    labels, probabilities = wrapped(Tensor(data=x, requires_grad=False))
    np.testing.assert_array_equal(labels.numpy(), estimator.predict(x))
    np.testing.assert_allclose(probabilities.numpy(), estimator.predict_proba(x), rtol=1e-5)


def test_to_onnx_gives_back_the_classifier_graph(string_classifier):
    estimator, model, x = string_classifier
    rep = sonnx.prepare(model)
    inputs = Tensor(data=x, requires_grad=False, name="X")
    labels, probabilities = rep.run([inputs])
    exported = sonnx.to_onnx([inputs], [labels, probabilities])
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in model.graph.node]
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    got_labels, got_probabilities = session.run(None, {session.get_inputs()[0].name: x[:7]})
    np.testing.assert_array_equal(got_labels, estimator.predict(x[:7]))
    np.testing.assert_allclose(got_probabilities, estimator.predict_proba(x[:7]), rtol=1e-5)


def test_training_a_tree_names_the_inference_only_operator():
    x, y = regression(rows=40)
    model = converted(tree.DecisionTreeRegressor(max_depth=3).fit(x, y), x)
    rep = sonnx.prepare(model)
    autograd.training = True
    try:
        prediction = rep.run([x])[0]
        loss = autograd.mse_loss(prediction, Tensor(data=y.reshape(-1, 1).astype(np.float32)))
        with pytest.raises(BadInputError, match=r"inference-only operators.*TreeEnsembleRegressor"):
            list(autograd.backward(loss))
    finally:
        autograd.training = False
