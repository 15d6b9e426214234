"""What an operator class offers as a SINGA-named function (``relu``, ``leakyrelu(x, a=0.01)``).

An :class:`~sonnx.engine.operator.Operator` subclass lists the functions that build and call it
in its ``singa_functions`` class attribute, next to the class: each is a
:class:`SingaFunction` naming the function, its tensor inputs, the attributes it exposes as
keywords under SINGA's names, and the text of its docstring. ``python -m
sonnx.operators.singa_codegen`` writes each function's source from that declaration at the end
of the class's module, so a function is declared once and never written by hand.

A keyword's default and type hint come from the ONNX schema (``onnx.defs``) unless the
declaration gives SINGA's own (``softmax``'s axis 1, ``leakyrelu``'s ``a``); an input is
optional (``None`` by default) where the schema says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _Marker:
    """A keyword default that is not a value: take the schema's, or have none."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The default of a :class:`Keyword` that takes the ONNX schema's default (the usual case).
SCHEMA: Any = _Marker("SCHEMA")
#: The default of a :class:`Keyword` that has none: the caller must pass it.
REQUIRED: Any = _Marker("REQUIRED")


@dataclass(frozen=True)
class Input:
    """A positional input of the function, passed to the operator as one of its inputs.

    :param name: the parameter's name.
    :param doc: what it is, for the docstring's ``:param name:`` line.
    :param annotation: its type hint (``"Any"`` where numbers and arrays are accepted).
    :param optional: whether it defaults to None; None reads it from the ONNX schema.
    :param variadic: it takes all remaining arguments (``max(*xs)``); the last input only.
    """

    name: str
    doc: str
    annotation: str = "Tensor"
    optional: bool | None = None
    variadic: bool = False


@dataclass(frozen=True)
class Keyword:
    """A keyword of the function that sets one ONNX attribute of the operator.

    :param name: SINGA's name for it (``a`` for LeakyRelu's ``alpha``).
    :param doc: what it is, for the docstring's ``:param name:`` line.
    :param attr: the ONNX attribute it sets ("": the same as ``name``).
    :param default: SINGA's default; :data:`SCHEMA` for the schema's, :data:`REQUIRED` for none.
    :param annotation: its type hint ("": from the schema's attribute type).
    :param convert: ``"float"`` or ``"int"`` to set the attribute to ``float(value)`` or
        ``int(value)`` ("": as given), so that an exported attribute has the schema's type
        (``align_corners=True`` is written as the INT 1).
    """

    name: str
    doc: str
    attr: str = ""
    default: Any = SCHEMA
    annotation: str = ""
    convert: str = ""

    @property
    def onnx_name(self) -> str:
        """The ONNX attribute this keyword sets."""
        return self.attr or self.name


@dataclass(frozen=True)
class SingaFunction:
    """One SINGA-named function that builds its operator with keywords and calls it on inputs.

    :param name: the function's name (``relu``).
    :param summary: the docstring's first paragraph.
    :param inputs: the positional inputs, in the function's order.
    :param returns: the docstring's ``:returns:`` text.
    :param keywords: the attributes exposed as keywords, in the function's order.
    :param raises: (exception class name, when) pairs for the docstring's ``:raises:`` lines.
    :param details: a further docstring paragraph, after the summary ("" for none).
    :param result: the return type hint.
    :param call_order: the inputs' names in the operator's input order, where it differs from
        the function's (SINGA's ``where(x, y, condition)`` against ONNX's condition first).
    :param aliases: other names bound to the same function (``negative`` for ``neg``).
    """

    name: str
    summary: str
    inputs: tuple[Input, ...]
    returns: str
    keywords: tuple[Keyword, ...] = ()
    raises: tuple[tuple[str, str], ...] = ()
    details: str = ""
    result: str = "Tensor"
    call_order: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def operator_inputs(self) -> tuple[str, ...]:
        """The inputs' names in the order the operator takes them."""
        return self.call_order or tuple(i.name for i in self.inputs)


# The texts many element-wise functions share.
#: ``x``, a floating-point tensor.
FLOAT_X = Input("x", "a floating-point tensor.")
#: The result of an element-wise function of ``x``.
LIKE_X = "a tensor of ``x``'s shape and dtype."
#: What a function of a floating-point ``x`` raises.
NOT_FLOAT = (("BadInputError", "``x`` is not floating-point."),)


def float_function(name: str, summary: str, *keywords: Keyword) -> SingaFunction:
    """The declaration of a function of one floating-point ``x`` that returns a tensor of its
    shape and dtype (the activations, the trigonometric and most unary functions).

    :param name: the function's name.
    :param summary: the docstring's first paragraph.
    :param keywords: the attributes it exposes as keywords.
    :returns: the declaration, with :data:`FLOAT_X`, :data:`LIKE_X` and :data:`NOT_FLOAT`.
    """
    return SingaFunction(
        name, summary, inputs=(FLOAT_X,), returns=LIKE_X, keywords=keywords, raises=NOT_FLOAT
    )
