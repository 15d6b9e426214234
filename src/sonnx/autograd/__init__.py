"""Automatic differentiation: the ``training`` flag, ``backward`` and every operation.

Set ``sonnx.autograd.training = True`` before a forward pass whose gradients you want; the
gradients come from torch autograd. Each operation is an :class:`Operator` named as its ONNX
operator, plus a lower-case function with SINGA's name (``relu``, ``conv2d``, …).

``training`` is SINGA's module attribute, kept per thread like torch's grad mode (see
:mod:`sonnx.run_state`): setting it changes it for the thread (the context) that sets it,
from that point on. Another thread, or a server's worker, keeps its own value; a new thread
starts with False, an asyncio task with its creator's value at the time it was created.
``from sonnx.autograd import training`` copies the value at import, as it always did; read
``autograd.training`` to see the flag.
"""

import sys
import types

from sonnx.engine.backward import backward, gradients, trainable_tensors
from sonnx.engine.operator import Operator

# The operations, by the module that defines them: every name is written out so that a reader
# (and a type checker) sees where each comes from, and __all__ below is the namespace.
# isort: off
# fmt: off
from sonnx.operators.activation.functions import (
    Celu, Elu, HardSigmoid, LeakyRelu, PRelu, Relu, Selu, Shrink, Sigmoid, Softplus, Softsign, Tanh,
    ThresholdedRelu, celu, elu, hardsigmoid, leakyrelu, prelu, relu, selu, shrink, sigmoid,
    softplus, softsign, tanh, thresholded_relu,
)
from sonnx.operators.activation.gated import (
    Gelu, HardSwish, Mish, SwiGLU, Swish, gelu, hardswish, mish, swiglu, swish,
)
from sonnx.operators.activation.softmax import (
    Hardmax, LogSoftmax, Softmax, hardmax, log_softmax, softmax,
)
from sonnx.operators.attention.attention import (
    Attention, CausalConvWithState, LinearAttention, RotaryEmbedding, attention,
    causal_conv_with_state, linear_attention, rotary_embedding,
)
from sonnx.operators.conv.conv import (
    Col2Im, Conv, ConvInteger, ConvTranspose, DeformConv, col2im, conv1d, conv2d, conv3d,
    conv_transpose1d, conv_transpose2d, conv_transpose3d, deform_conv2d,
)
from sonnx.operators.elementwise import (
    Abs, Acos, Acosh, Add, And, Asin, Asinh, Atan, Atanh, BitShift, BitwiseAnd, BitwiseNot,
    BitwiseOr, BitwiseXor, Ceil, Clip, Cos, Cosh, Div, Equal, Erf, Exp, Floor, Greater,
    GreaterOrEqual, IsInf, IsNaN, Less, LessOrEqual, Log, Max, Mean, Min, Mod, Mul, Neg, Not, Or,
    Pow, Reciprocal, Round, Sign, Sin, Sinh, Sqrt, Sub, Sum, Tan, Where, Xor, _and, _not, _or, _xor,
    abs, acos, acosh, add, add_bias, asin, asinh, atan, atanh, bitshift, bitwise_and, bitwise_not,
    bitwise_or, bitwise_xor, ceil, clip, cos, cosh, div, equal, erf, exp, floor, greater,
    greater_equal, isinf, isnan, less, less_equal, log, max, mean, min, mod, mul, neg, negative,
    pow, reciprocal, round, sign, sin, sinh, sqrt, sub, sum, tan, where,
)
from sonnx.operators.elementwise.cast import (
    BitCast, Cast, CastLike, bitcast, cast, cast_like,
)
from sonnx.operators.image.decode import (
    ImageDecoder, image_decoder,
)
from sonnx.operators.image.resize import (
    AffineGrid, GridSample, Resize, RoiAlign, affine_grid, grid_sample, resize, roi_align, upsample,
)
from sonnx.operators.indexing.gather_scatter import (
    ArgMax, ArgMin, Gather, GatherElements, GatherND, NonMaxSuppression, ScatterElements, ScatterND,
    TensorScatter, TopK, Unique, argmax, argmin, gather, gather_elements, gather_nd,
    non_max_suppression, scatter_elements, scatter_nd, tensor_scatter, topk, unique,
)
from sonnx.operators.indexing.masks import (
    Compress, NonZero, OneHot, compress, nonzero, onehot,
)
from sonnx.operators.linalg.products import (
    CumProd, CumSum, Det, Einsum, Gemm, MatMul, MatMulInteger, QLinearMatMul, cumprod, cumsum, det,
    einsum, gemm, matmul, matmul_integer, qlinear_matmul,
)
from sonnx.operators.loss import (
    BinaryCrossEntropy, CrossEntropy, MeanSquareError, NegativeLogLikelihoodLoss,
    SoftmaxCrossEntropy, SoftmaxCrossEntropyLoss, binary_cross_entropy, cross_entropy, mse_loss,
    nll_loss, softmax_cross_entropy, softmax_cross_entropy_loss,
)
from sonnx.operators.ml.transforms import (
    ArrayFeatureExtractor, Binarizer, TreeEnsemble, array_feature_extractor, binarizer,
    tree_ensemble,
)
from sonnx.operators.normalization.batch import (
    BatchNormalization, Dropout, GroupNormalization, InstanceNormalization, LRN, LayerNormalization,
    LpNormalization, MeanVarianceNormalization, RMSNormalization, batch_norm, batchnorm_2d, dropout,
    group_norm, instance_norm, layer_norm, lp_norm, lrn, mean_variance_norm, rms_norm,
)
from sonnx.operators.pooling.windowed import (
    AveragePool, GlobalAveragePool, GlobalLpPool, GlobalMaxPool, LpPool, MaxPool, MaxUnpool,
    avg_pool1d, avg_pool2d, avg_pool3d, globalaveragepool, globallppool, globalmaxpool, lp_pool2d,
    max_pool1d, max_pool2d, max_pool3d, max_unpool,
)
from sonnx.operators.quantize.linear import (
    DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear, dequantize_linear,
    dynamic_quantize_linear, quantize_linear,
)
from sonnx.operators.quantize.qlinear_conv import (
    QLinearConv, qlinear_conv,
)
from sonnx.operators.randomness.generators import (
    Bernoulli, Multinomial, RandomNormal, RandomNormalLike, RandomUniform, RandomUniformLike,
    bernoulli, multinomial, random_normal, random_normal_like, random_uniform, random_uniform_like,
)
from sonnx.operators.reduce.reductions import (
    ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceMax, ReduceMean, ReduceMin, ReduceProd,
    ReduceSum, ReduceSumSquare, reduce_l1, reduce_l2, reduce_log_sum, reduce_log_sum_exp,
    reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum, reduce_sum_square,
)
from sonnx.operators.rnn.recurrent import (
    GRU, LSTM, RNN, gru, lstm, rnn,
)
from sonnx.operators.shape import (
    CenterCropPad, Concat, Constant, ConstantOfShape, DepthToSpace, Expand, EyeLike, Flatten,
    Identity, Pad, Range, Reshape, ReverseSequence, Shape, Size, Slice, SpaceToDepth, Split,
    Squeeze, Tile, Transpose, Trilu, Unsqueeze, cat, center_crop_pad, concat, constant_of_shape,
    depth_to_space, expand, eye_like, flatten, identity, pad, range, reshape, reverse_sequence,
    shape, size, slice, space_to_depth, split, squeeze, tile, transpose, trilu, unsqueeze,
)
from sonnx.operators.singa.layers import (
    AvgPool2d, BatchNorm2d, Conv2d, Linear, MaxPool2d,
)
from sonnx.operators.spectral.transforms import (
    BlackmanWindow, DFT, HammingWindow, HannWindow, MelWeightMatrix, STFT, blackman_window, dft,
    hamming_window, hann_window, mel_weight_matrix, stft,
)
from sonnx.operators.text.features import (
    TfIdfVectorizer, Tokenizer, tfidf_vectorizer, tokenizer,
)
from sonnx.operators.text.strings import (
    RegexFullMatch, StringConcat, StringNormalizer, StringSplit, regex_full_match, string_concat,
    string_normalizer, string_split,
)
from sonnx.operators.training.updates import (
    Adagrad, Adam, Momentum, adagrad, adam, momentum,
)
# fmt: on
# isort: on
from sonnx.run_state import TRAINING


class _AutogradModule(types.ModuleType):
    """This module, with ``training`` read from and written to this thread's run state."""

    @property
    def training(self) -> bool:
        return TRAINING.get()

    @training.setter
    def training(self, value: bool) -> None:
        TRAINING.set(bool(value))


#: Every public name: the gradient entry points, the Operator contract, and each operation's
#: class (named as its ONNX operator) and SINGA-named function.
# fmt: off
__all__ = [
    "DFT", "GRU", "LRN", "LSTM", "RNN", "STFT", "Abs", "Acos", "Acosh", "Adagrad", "Adam", "Add",
    "AffineGrid", "And", "ArgMax", "ArgMin", "ArrayFeatureExtractor", "Asin", "Asinh", "Atan",
    "Atanh", "Attention", "AveragePool", "AvgPool2d", "BatchNorm2d", "BatchNormalization",
    "Bernoulli", "Binarizer", "BinaryCrossEntropy", "BitCast", "BitShift", "BitwiseAnd",
    "BitwiseNot", "BitwiseOr", "BitwiseXor", "BlackmanWindow", "Cast", "CastLike",
    "CausalConvWithState", "Ceil", "Celu", "CenterCropPad", "Clip", "Col2Im", "Compress", "Concat",
    "Constant", "ConstantOfShape", "Conv", "Conv2d", "ConvInteger", "ConvTranspose", "Cos", "Cosh",
    "CrossEntropy", "CumProd", "CumSum", "DeformConv", "DepthToSpace", "DequantizeLinear", "Det",
    "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand",
    "EyeLike", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm",
    "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample",
    "GroupNormalization", "HammingWindow", "HannWindow", "HardSigmoid", "HardSwish", "Hardmax",
    "Identity", "ImageDecoder", "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization",
    "LeakyRelu", "Less", "LessOrEqual", "Linear", "LinearAttention", "Log", "LogSoftmax",
    "LpNormalization", "LpPool", "MatMul", "MatMulInteger", "Max", "MaxPool", "MaxPool2d",
    "MaxUnpool", "Mean", "MeanSquareError", "MeanVarianceNormalization", "MelWeightMatrix", "Min",
    "Mish", "Mod", "Momentum", "Mul", "Multinomial", "Neg", "NegativeLogLikelihoodLoss",
    "NonMaxSuppression", "NonZero", "Not", "OneHot", "Operator", "Or", "PRelu", "Pad", "Pow",
    "QLinearConv", "QLinearMatMul", "QuantizeLinear", "RMSNormalization", "RandomNormal",
    "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range", "Reciprocal", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare", "RegexFullMatch", "Relu", "Reshape", "Resize",
    "ReverseSequence", "RoiAlign", "RotaryEmbedding", "Round", "ScatterElements", "ScatterND",
    "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax",
    "SoftmaxCrossEntropy", "SoftmaxCrossEntropyLoss", "Softplus", "Softsign", "SpaceToDepth",
    "Split", "Sqrt", "Squeeze", "StringConcat", "StringNormalizer", "StringSplit", "Sub", "Sum",
    "SwiGLU", "Swish", "Tan", "Tanh", "TensorScatter", "TfIdfVectorizer", "ThresholdedRelu", "Tile",
    "Tokenizer", "TopK", "Transpose", "TreeEnsemble", "Trilu", "Unique", "Unsqueeze", "Where",
    "Xor", "_and", "_not", "_or", "_xor", "abs", "acos", "acosh", "adagrad", "adam", "add",
    "add_bias", "affine_grid", "argmax", "argmin", "array_feature_extractor", "asin", "asinh",
    "atan", "atanh", "attention", "avg_pool1d", "avg_pool2d", "avg_pool3d", "backward",
    "batch_norm", "batchnorm_2d", "bernoulli", "binarizer", "binary_cross_entropy", "bitcast",
    "bitshift", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "blackman_window",
    "cast", "cast_like", "cat", "causal_conv_with_state", "ceil", "celu", "center_crop_pad", "clip",
    "col2im", "compress", "concat", "constant_of_shape", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cos", "cosh", "cross_entropy",
    "cumprod", "cumsum", "deform_conv2d", "depth_to_space", "dequantize_linear", "det", "dft",
    "div", "dropout", "dynamic_quantize_linear", "einsum", "elu", "equal", "erf", "exp", "expand",
    "eye_like", "flatten", "floor", "gather", "gather_elements", "gather_nd", "gelu", "gemm",
    "globalaveragepool", "globallppool", "globalmaxpool", "gradients", "greater", "greater_equal",
    "grid_sample", "group_norm", "gru", "hamming_window", "hann_window", "hardmax", "hardsigmoid",
    "hardswish", "identity", "image_decoder", "instance_norm", "isinf", "isnan", "layer_norm",
    "leakyrelu", "less", "less_equal", "linear_attention", "log", "log_softmax", "lp_norm",
    "lp_pool2d", "lrn", "lstm", "matmul", "matmul_integer", "max", "max_pool1d", "max_pool2d",
    "max_pool3d", "max_unpool", "mean", "mean_variance_norm", "mel_weight_matrix", "min", "mish",
    "mod", "momentum", "mse_loss", "mul", "multinomial", "neg", "negative", "nll_loss",
    "non_max_suppression", "nonzero", "onehot", "pad", "pow", "prelu", "qlinear_conv",
    "qlinear_matmul", "quantize_linear", "random_normal", "random_normal_like", "random_uniform",
    "random_uniform_like", "range", "reciprocal", "reduce_l1", "reduce_l2", "reduce_log_sum",
    "reduce_log_sum_exp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
    "reduce_sum_square", "regex_full_match", "relu", "reshape", "resize", "reverse_sequence",
    "rms_norm", "rnn", "roi_align", "rotary_embedding", "round", "scatter_elements", "scatter_nd",
    "selu", "shape", "shrink", "sigmoid", "sign", "sin", "sinh", "size", "slice", "softmax",
    "softmax_cross_entropy", "softmax_cross_entropy_loss", "softplus", "softsign", "space_to_depth",
    "split", "sqrt", "squeeze", "stft", "string_concat", "string_normalizer", "string_split", "sub",
    "sum", "swiglu", "swish", "tan", "tanh", "tensor_scatter", "tfidf_vectorizer",
    "thresholded_relu", "tile", "tokenizer", "topk", "trainable_tensors", "transpose",
    "tree_ensemble", "trilu", "unique", "unsqueeze", "upsample", "where",
]
# fmt: on

sys.modules[__name__].__class__ = _AutogradModule
