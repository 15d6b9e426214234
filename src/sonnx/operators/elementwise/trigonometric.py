"""The trigonometric and hyperbolic functions and their inverses, element-wise: Sin, Cos,
Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh. Each is a :class:`FloatUnary` (in
:mod:`sonnx.operators.elementwise.unary`, with the other one-input operators): float-only, one
torch function, differentiable.
"""

from __future__ import annotations

import torch

from sonnx.engine.singa_functions import (
    FLOAT_X,
    LIKE_X,
    NOT_FLOAT,
    SingaFunction,
)
from sonnx.operators.elementwise.unary import FloatUnary
from sonnx.tensor import Tensor

__all__ = [
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Cos",
    "Cosh",
    "Sin",
    "Sinh",
    "Tan",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "sin",
    "sinh",
    "tan",
]


class Sin(FloatUnary):
    """ONNX ``Sin``: the sine element-wise, for floating-point tensors."""

    op_type = "Sin"
    since_versions = (7, 22)
    fn = staticmethod(torch.sin)

    singa_functions = (
        SingaFunction(
            "sin",
            "The sine element-wise (ONNX ``Sin``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Cos(FloatUnary):
    """ONNX ``Cos``: the cosine element-wise, for floating-point tensors."""

    op_type = "Cos"
    since_versions = (7, 22)
    fn = staticmethod(torch.cos)

    singa_functions = (
        SingaFunction(
            "cos",
            "The cosine element-wise (ONNX ``Cos``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Tan(FloatUnary):
    """ONNX ``Tan``: the tangent element-wise, for floating-point tensors."""

    op_type = "Tan"
    since_versions = (7, 22)
    fn = staticmethod(torch.tan)

    singa_functions = (
        SingaFunction(
            "tan",
            "The tangent element-wise (ONNX ``Tan``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Asin(FloatUnary):
    """ONNX ``Asin``: the arcsine element-wise, for floating-point tensors."""

    op_type = "Asin"
    since_versions = (7, 22)
    fn = staticmethod(torch.asin)

    singa_functions = (
        SingaFunction(
            "asin",
            "The arcsine element-wise (ONNX ``Asin``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Acos(FloatUnary):
    """ONNX ``Acos``: the arccosine element-wise, for floating-point tensors."""

    op_type = "Acos"
    since_versions = (7, 22)
    fn = staticmethod(torch.acos)

    singa_functions = (
        SingaFunction(
            "acos",
            "The arccosine element-wise (ONNX ``Acos``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Atan(FloatUnary):
    """ONNX ``Atan``: the arctangent element-wise, for floating-point tensors."""

    op_type = "Atan"
    since_versions = (7, 22)
    fn = staticmethod(torch.atan)

    singa_functions = (
        SingaFunction(
            "atan",
            "The arctangent element-wise (ONNX ``Atan``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Sinh(FloatUnary):
    """ONNX ``Sinh``: the hyperbolic sine element-wise, for floating-point tensors."""

    op_type = "Sinh"
    since_versions = (9, 22)
    fn = staticmethod(torch.sinh)

    singa_functions = (
        SingaFunction(
            "sinh",
            "The hyperbolic sine element-wise (ONNX ``Sinh``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Cosh(FloatUnary):
    """ONNX ``Cosh``: the hyperbolic cosine element-wise, for floating-point tensors."""

    op_type = "Cosh"
    since_versions = (9, 22)
    fn = staticmethod(torch.cosh)

    singa_functions = (
        SingaFunction(
            "cosh",
            "The hyperbolic cosine element-wise (ONNX ``Cosh``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Asinh(FloatUnary):
    """ONNX ``Asinh``: the inverse hyperbolic sine element-wise, for floating-point tensors."""

    op_type = "Asinh"
    since_versions = (9, 22)
    fn = staticmethod(torch.asinh)

    singa_functions = (
        SingaFunction(
            "asinh",
            "The inverse hyperbolic sine element-wise (ONNX ``Asinh``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Acosh(FloatUnary):
    """ONNX ``Acosh``: the inverse hyperbolic cosine element-wise, for floating-point tensors."""

    op_type = "Acosh"
    since_versions = (9, 22)
    fn = staticmethod(torch.acosh)

    singa_functions = (
        SingaFunction(
            "acosh",
            "The inverse hyperbolic cosine element-wise (ONNX ``Acosh``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


class Atanh(FloatUnary):
    """ONNX ``Atanh``: the inverse hyperbolic tangent element-wise, for floating-point tensors."""

    op_type = "Atanh"
    since_versions = (9, 22)
    fn = staticmethod(torch.atanh)

    singa_functions = (
        SingaFunction(
            "atanh",
            "The inverse hyperbolic tangent element-wise (ONNX ``Atanh``).",
            inputs=(FLOAT_X,),
            returns=LIKE_X,
            raises=NOT_FLOAT,
        ),
    )


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def sin(x: Tensor) -> Tensor:
    """The sine element-wise (ONNX ``Sin``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Sin()(x)


def cos(x: Tensor) -> Tensor:
    """The cosine element-wise (ONNX ``Cos``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Cos()(x)


def tan(x: Tensor) -> Tensor:
    """The tangent element-wise (ONNX ``Tan``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Tan()(x)


def asin(x: Tensor) -> Tensor:
    """The arcsine element-wise (ONNX ``Asin``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Asin()(x)


def acos(x: Tensor) -> Tensor:
    """The arccosine element-wise (ONNX ``Acos``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Acos()(x)


def atan(x: Tensor) -> Tensor:
    """The arctangent element-wise (ONNX ``Atan``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Atan()(x)


def sinh(x: Tensor) -> Tensor:
    """The hyperbolic sine element-wise (ONNX ``Sinh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Sinh()(x)


def cosh(x: Tensor) -> Tensor:
    """The hyperbolic cosine element-wise (ONNX ``Cosh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Cosh()(x)


def asinh(x: Tensor) -> Tensor:
    """The inverse hyperbolic sine element-wise (ONNX ``Asinh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Asinh()(x)


def acosh(x: Tensor) -> Tensor:
    """The inverse hyperbolic cosine element-wise (ONNX ``Acosh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Acosh()(x)


def atanh(x: Tensor) -> Tensor:
    """The inverse hyperbolic tangent element-wise (ONNX ``Atanh``).

    :param x: a floating-point tensor.
    :returns: a tensor of ``x``'s shape and dtype.
    :raises BadInputError: ``x`` is not floating-point.
    """
    return Atanh()(x)
