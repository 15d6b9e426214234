"""The SINGA-named functions generated from the classes' ``singa_functions`` declarations.

The committed code is what the generator writes now; every function builds its class with the
attributes it was given (and the declared or schema defaults) and calls it on its inputs in the
operator's order; a sample of them computes what calling the class directly computes.
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
import pytest
import torch

import sonnx.autograd
from sonnx.engine.operator import Operator
from sonnx.engine.singa_functions import REQUIRED, SCHEMA, Input, Keyword, SingaFunction
from sonnx.operators import singa_codegen
from sonnx.proto.attributes import schema_defaults
from sonnx.tensor import Tensor

DECLARED = [
    pair
    for module in singa_codegen.operator_modules()
    for pair in singa_codegen.declarations(module)
]


def _function(cls: type[Operator], fn: SingaFunction):
    return getattr(sys.modules[cls.__module__], fn.name)


def test_generated_code_is_fresh():
    stale = singa_codegen.stale_modules()
    assert not stale, f"stale generated functions in {stale}: run {singa_codegen.COMMAND}"


def test_every_function_is_exported_by_its_module_and_autograd():
    # The places SINGA's functions were imported from before they were generated (a module
    # without __all__, such as pooling.whole, is re-exported by its family's front module).
    for cls, fn in DECLARED:
        module = sys.modules[cls.__module__]
        for name in (fn.name, *fn.aliases):
            assert getattr(module, name) is _function(cls, fn)
            assert name in vars(module).get("__all__", (name,)), f"{module.__name__}: {name}"
            assert getattr(sonnx.autograd, name) is _function(cls, fn)


class _RecordedCallError(Exception):
    """Raised by the patched Operator.__call__ with what the function built and passed."""

    def __init__(self, op: Operator, inputs: tuple) -> None:
        self.op, self.inputs = op, inputs


@pytest.fixture
def recording(monkeypatch):
    def record(self: Operator, *inputs):
        raise _RecordedCallError(self, inputs)

    monkeypatch.setattr(Operator, "__call__", record)


# What a keyword is given, and what its attribute must then hold: a marker object as it is,
# and for a converting keyword a value of another type (an int for a float, a bool for an int).
_GIVEN = {"": (None, None), "float": (2, 2.0), "int": (True, 1)}


def _given(keyword: Keyword) -> tuple[object, object]:
    value, expected = _GIVEN[keyword.convert]
    if value is None:
        marker = object()
        return marker, marker
    return value, expected


def _call(func, *args, **kwargs) -> _RecordedCallError:
    with pytest.raises(_RecordedCallError) as caught:
        func(*args, **kwargs)
    return caught.value


@pytest.mark.parametrize(("cls", "fn"), DECLARED, ids=[fn.name for _, fn in DECLARED])
def test_function_builds_its_class_with_the_given_attributes(recording, cls, fn):
    func = _function(cls, fn)
    inputs = {i.name: object() for i in fn.inputs}
    given = {k.name: _given(k) for k in fn.keywords}
    seen = _call(func, *inputs.values(), **{name: pair[0] for name, pair in given.items()})
    assert type(seen.op) is cls
    wanted = {k.onnx_name: given[k.name][1] for k in fn.keywords}
    assert seen.op.attrs == wanted
    assert [type(v) for v in seen.op.attrs.values()] == [type(v) for v in wanted.values()]
    assert seen.inputs == tuple(inputs[name] for name in fn.operator_inputs)


@pytest.mark.parametrize(("cls", "fn"), DECLARED, ids=[fn.name for _, fn in DECLARED])
def test_defaults_are_the_declared_or_the_schema_ones(recording, cls, fn):
    func = _function(cls, fn)
    params = inspect.signature(func).parameters
    required = {
        k.name: _given(k)[0]
        for k in fn.keywords
        if params[k.name].default is inspect.Parameter.empty
    }
    optional_inputs = [i for i in fn.inputs if params[i.name].default is None]
    seen = _call(func, *(object() for i in fn.inputs if i not in optional_inputs), **required)
    schema = schema_defaults(cls.op_type, None, cls.domain)
    for keyword in fn.keywords:
        value = seen.op.attrs[keyword.onnx_name]
        if keyword.name in required:
            assert keyword.default is REQUIRED or keyword.onnx_name not in schema
        elif keyword.default is SCHEMA and keyword.onnx_name in schema:
            # a float32 schema value is written in its shortest spelling (0.2, not 0.2000...03)
            wanted = schema[keyword.onnx_name]
            assert (np.float32(value) if isinstance(value, float) else value) == wanted
        elif keyword.default is not SCHEMA:
            assert value == keyword.default
        if keyword.convert:
            assert type(value).__name__ == keyword.convert
    assert all(x is None for x in seen.inputs[len(seen.inputs) - len(optional_inputs) :])


# Functions of float tensors (a variadic one on two), run against their class called directly.
_FLOAT_SAMPLE = {
    "relu": {},
    "leakyrelu": {"a": 0.3},
    "hardsigmoid": {"alpha": 0.25, "gamma": 0.4},
    "selu": {},
    "shrink": {"bias": 0.1, "lambd": 0.2},
    "softmax": {"axis": 0},
    "log_softmax": {},
    "gelu": {"approximate": "tanh"},
    "isinf": {"detect_negative": 0},
    "flatten": {"axis": 0},
    "argmax": {"axis": 1, "keepdims": 0},
    "lp_norm": {"axis": 0, "p": 1},
    "max": {},
}


@pytest.mark.parametrize("name", sorted(_FLOAT_SAMPLE))
def test_function_equals_its_class_called_directly(name):
    (cls, fn) = next(pair for pair in DECLARED if pair[1].name == name)
    x = Tensor(data=torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))
    given = _FLOAT_SAMPLE[name]
    params = inspect.signature(_function(cls, fn)).parameters
    attrs = {k.onnx_name: given.get(k.name, params[k.name].default) for k in fn.keywords}
    inputs = (x,) * len(fn.inputs) if not fn.inputs[-1].variadic else (x, x.data.flip(0))
    got = _function(cls, fn)(*inputs, **given)
    want = cls(**attrs)(*inputs)
    torch.testing.assert_close(got.data, want.data, rtol=0, atol=0)


def test_where_takes_singa_argument_order():
    x = Tensor(data=torch.tensor([1.0, 2.0]))
    y = Tensor(data=torch.tensor([5.0, 6.0]))
    condition = Tensor(data=torch.tensor([True, False]))
    assert sonnx.autograd.where(x, y, condition).data.tolist() == [1.0, 6.0]


class _Toy(Operator):
    op_type = "LeakyRelu"


def test_a_required_keyword_after_a_default_is_refused():
    fn = SingaFunction(
        "toy",
        "A toy.",
        inputs=(Input("x", "a tensor."), Input("y", "a tensor.", optional=True)),
        returns="a tensor.",
        keywords=(Keyword("a", "a slope.", attr="alpha", default=REQUIRED),),
    )
    with pytest.raises(singa_codegen.DeclarationError, match="toy: parameter a has no default"):
        singa_codegen.function_source(_Toy, fn)


def test_a_keyword_with_no_schema_attribute_needs_an_annotation():
    fn = SingaFunction(
        "toy",
        "A toy.",
        inputs=(Input("x", "a tensor."),),
        returns="a tensor.",
        keywords=(Keyword("k", "no such attribute.", default=1),),
    )
    with pytest.raises(singa_codegen.DeclarationError, match="keyword k needs an annotation"):
        singa_codegen.function_source(_Toy, fn)


def test_schema_defaults_and_types_fill_the_signature():
    fn = SingaFunction(
        "toy",
        "A toy.",
        inputs=(Input("x", "a tensor."),),
        returns="a tensor.",
        keywords=(Keyword("a", "the slope (ONNX's ``alpha``).", attr="alpha"),),
    )
    source = singa_codegen.function_source(_Toy, fn)
    assert source.startswith("def toy(x: Tensor, a: float = 0.01) -> Tensor:\n")
    assert "    :param a: the slope (ONNX's ``alpha``).\n" in source
    assert source.endswith("    return _Toy(alpha=a)(x)\n")


def test_a_variadic_input_before_keywords_is_refused():
    fn = SingaFunction(
        "toy",
        "A toy.",
        inputs=(Input("xs", "tensors.", variadic=True),),
        returns="a tensor.",
        keywords=(Keyword("a", "the slope.", attr="alpha"),),
    )
    with pytest.raises(singa_codegen.DeclarationError, match="only the last input"):
        singa_codegen.function_source(_Toy, fn)


def test_a_conversion_other_than_float_or_int_is_refused():
    fn = SingaFunction(
        "toy",
        "A toy.",
        inputs=(Input("x", "a tensor."),),
        returns="a tensor.",
        keywords=(Keyword("a", "the slope.", attr="alpha", convert="str"),),
    )
    with pytest.raises(singa_codegen.DeclarationError, match="converts to float or int"):
        singa_codegen.function_source(_Toy, fn)
