"""The ai.onnx.ml operators (transforms, linear, svm, trees and lookup). ZipMap,
DictVectorizer and CastMap, whose inputs or outputs are maps rather than tensors, are
converter functions in :mod:`sonnx.onnx.converters.ml`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.ml import linear, lookup, svm, transforms, trees

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    transforms.ArrayFeatureExtractor,
    transforms.Binarizer,
    transforms.TreeEnsemble,
    linear.FeatureVectorizer,
    linear.Imputer,
    linear.LinearClassifier,
    linear.LinearRegressor,
    linear.Normalizer,
    linear.OneHotEncoder,
    linear.Scaler,
    svm.SVMClassifier,
    svm.SVMRegressor,
    lookup.LabelEncoder,
    lookup.CategoryMapper,
    trees.TreeEnsembleClassifier,
    trees.TreeEnsembleRegressor,
)
