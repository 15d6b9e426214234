"""Every registered operator decides the traits its ONNX schema says matter.

An operator's traits (:class:`sonnx.engine.operator.Operator`) have safe defaults, but a
default taken by omission is a decision nobody made: this walks the registry and fails on a
class that leaves a trait undecided where its schema shows it matters, so adding an operator
means declaring them next to its class. Its since-versions are declared there too: the registry
holds a class for exactly the versions it declares, each a since-version of its operator in
``onnx.defs`` where onnx has a schema for it.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import onnx
import onnx.defs
import pytest

import sonnx  # noqa: F401  (registers every converter)
from sonnx.engine.operator import Operator, OutputShape, Randomness
from sonnx.errors import SonnxError
from sonnx.onnx.registry import (
    REGISTRY,
    NodeInfo,
    OperatorConverter,
    operator_class,
    register_operators,
)
from sonnx.operators.training.gradient import Gradient

#: Schema input names that configure an operation rather than carry its data or weights.
PARAMETER_NAMES = frozenset(
    {"shape", "axes", "pads", "scales", "sizes", "roi", "repeats", "starts", "ends",
     "steps", "split", "depth", "axis", "dft_length", "frame_step", "frame_length", "window",
     "image_shape", "block_shape", "output_shape", "size", "min", "max", "ratio",
     "training_mode", "target_type", "start", "limit", "delta", "num_mel_bins", "sample_rate",
     "lower_edge_hertz", "upper_edge_hertz", "max_output_boxes_per_class", "iou_threshold",
     "score_threshold", "constant_value", "cos_cache", "sin_cache"}
)  # fmt: skip
_INTEGERS = {"tensor(int32)", "tensor(int64)"}


def _classes() -> list[tuple[str, str, type[Operator]]]:
    found = []
    for domain, op_type in REGISTRY.operators():
        cls = REGISTRY.operator_class(domain, op_type)
        if cls is not Operator:
            found.append((domain, op_type, cls))
    return found


CLASSES = _classes()


def _own_versions() -> dict[type[Operator], list[tuple[str, int]]]:
    """Each class the registry runs as its own converter -> the (domain, since-version) keys
    it is registered at."""
    found: dict[type[Operator], list[tuple[str, int]]] = defaultdict(list)
    for domain, op_type in REGISTRY.operators():
        for version in REGISTRY.versions(op_type, domain):
            _, convert = REGISTRY.lookup(domain, op_type, version)
            if isinstance(convert, OperatorConverter):
                found[convert.operator_class].append((domain, version))
    return found


OWN_VERSIONS = _own_versions()


def _onnx_since_versions() -> dict[tuple[str, str], set[int]]:
    found: dict[tuple[str, str], set[int]] = defaultdict(set)
    for schema in onnx.defs.get_all_schemas_with_history():
        found[(schema.domain, schema.name)].add(schema.since_version)
    return found


ONNX_SINCE_VERSIONS = _onnx_since_versions()


def _declares(cls: type[Operator], trait: str) -> bool:
    """Whether the class or a family base below the contract sets ``trait``."""
    return any(trait in base.__dict__ for base in cls.__mro__ if base is not Operator)


def _schemas(domain: str, op_type: str) -> list[onnx.defs.OpSchema]:
    schemas = []
    for version in REGISTRY.versions(op_type, domain):
        # com.microsoft has no schemas in onnx
        with contextlib.suppress(onnx.defs.SchemaError):
            schemas.append(onnx.defs.get_schema(op_type, version, domain))
    return schemas


def _allowed(schema: onnx.defs.OpSchema, formal: onnx.defs.OpSchema.FormalParameter) -> set[str]:
    for constraint in schema.type_constraints:
        if constraint.type_param_str == formal.type_str:
            return set(constraint.allowed_type_strs)
    return {formal.type_str}


def _label(item: tuple[str, str, type[Operator]]) -> str:
    return f"{item[0] or 'ai.onnx'}.{item[1]}"


def _class_label(cls: type[Operator]) -> str:
    return f"{cls.domain or 'ai.onnx'}.{cls.op_type}"


@pytest.mark.parametrize(
    "cls", sorted({c for *_, c in CLASSES} | set(OWN_VERSIONS), key=_class_label), ids=_class_label
)
def test_the_registry_holds_each_class_at_the_since_versions_it_declares(cls) -> None:
    """Sorted, in the class's own domain; () for a class only function converters build
    (BatchNormalization, whose converter reads the version itself)."""
    held = OWN_VERSIONS.get(cls, [])
    assert {domain for domain, _ in held} <= {cls.domain}
    assert cls.since_versions == tuple(v for _, v in held), (
        f"{cls.__qualname__}.since_versions is {cls.since_versions}; the registry holds it at "
        f"{[v for _, v in held]}"
    )


SCHEMA_CLASSES = [cls for cls in OWN_VERSIONS if (cls.domain, cls.op_type) in ONNX_SINCE_VERSIONS]


@pytest.mark.parametrize("cls", sorted(SCHEMA_CLASSES, key=_class_label), ids=_class_label)
def test_declared_since_versions_are_the_operators_since_versions_in_onnx(cls) -> None:
    """Where onnx has the operator (the default domain, ai.onnx.ml, the training domain), each
    declared version is one at which its schema changed: a made-up one would serve opsets the
    class was not written for. (com.microsoft operators have no schema in onnx.)"""
    real = ONNX_SINCE_VERSIONS[(cls.domain, cls.op_type)]
    assert set(cls.since_versions) <= real, (
        f"{cls.__qualname__}: since_versions {cls.since_versions}, onnx.defs has {sorted(real)}"
    )


def test_the_since_version_walk_covers_the_onnx_and_ml_operators() -> None:
    domains = {cls.domain for cls in SCHEMA_CLASSES}
    assert {"", "ai.onnx.ml"} <= domains and len(SCHEMA_CLASSES) > 150


def test_a_class_registered_without_its_own_since_versions_is_refused() -> None:
    class Undeclared(Operator):
        op_type = "Undeclared"
        domain = "com.example.test"

    class Inheriting(Undeclared):
        since_versions = (1,)

    class Borrowing(Inheriting):
        op_type = "Borrowing"

    for cls in (Undeclared, Borrowing):
        with pytest.raises(SonnxError, match=f"{cls.__qualname__}.*declares no since_versions"):
            register_operators(cls)
        assert REGISTRY.versions(cls.op_type, cls.domain) == []


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_every_operator_declares_how_its_output_shape_is_decided(item) -> None:
    _domain, op_type, cls = item
    assert _declares(cls, "output_shape"), f"{cls.__qualname__} does not declare output_shape"
    if cls.output_shape is OutputShape.VALUE_SIZED:
        assert not cls.shape_inputs, f"{op_type}: a value-sized operator lists shape inputs"


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_inputs_the_schema_names_as_parameters_are_parameterising(item) -> None:
    domain, op_type, cls = item
    for schema in _schemas(domain, op_type):
        for position, formal in enumerate(schema.inputs):
            name = formal.name
            if name in PARAMETER_NAMES or name.endswith(("_scale", "_zero_point")):
                assert position in cls.parameterising_inputs, (
                    f"{op_type}-{schema.since_version}: input {position} ({name}) parameterises "
                    f"the operation; {cls.__qualname__}.parameterising_inputs lacks it"
                )


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_operators_with_integer_inputs_decide_which_parameterise_them(item) -> None:
    """An integer input is an index, a length or a count: data of each call (Gather's indices)
    or part of the operation (TopK's k). Either way the class says which."""
    domain, op_type, cls = item
    for schema in _schemas(domain, op_type):
        integer = [f.name for f in schema.inputs if _allowed(schema, f) <= _INTEGERS]
        if integer:
            assert _declares(cls, "parameterising_inputs"), (
                f"{op_type}-{schema.since_version}: integer input(s) {integer}; "
                f"{cls.__qualname__} does not declare parameterising_inputs"
            )


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_operators_that_may_draw_random_numbers_declare_it(item) -> None:
    domain, op_type, cls = item
    seeded = any("seed" in schema.attributes for schema in _schemas(domain, op_type))
    if seeded or "Random" in op_type:
        assert _declares(cls, "random"), f"{cls.__qualname__} does not declare random"
        assert cls.random is not Randomness.NONE


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_operators_the_schema_lets_take_strings_say_how(item) -> None:
    """Strings in and out (one type parameter for the first input and output that allows
    them) are characters the operator reads (``takes_strings``) or elements it moves
    (``moves_elements_only``, declared False where it refuses them)."""
    domain, op_type, cls = item
    for schema in _schemas(domain, op_type):
        if not schema.inputs or not schema.outputs:
            continue
        first, out = schema.inputs[0], schema.outputs[0]
        if first.type_str == out.type_str and "tensor(string)" in _allowed(schema, first):
            assert _declares(cls, "takes_strings") or _declares(cls, "moves_elements_only"), (
                f"{op_type}-{schema.since_version} may take strings; {cls.__qualname__} "
                "declares neither takes_strings nor moves_elements_only"
            )


@pytest.mark.parametrize("item", CLASSES, ids=_label)
def test_special_inputs_nest_and_exist(item) -> None:
    """Size inputs are shape inputs, shape inputs parameterise, and all are positions the
    class's own operator has (Upsample borrows Resize's)."""
    _domain, op_type, cls = item
    assert cls.size_inputs <= cls.shape_inputs <= cls.parameterising_inputs, op_type
    most = max((s.max_input for s in _schemas(cls.domain, cls.op_type)), default=None)
    if most is not None:
        assert all(p < most for p in cls.parameterising_inputs), op_type


def test_the_ml_operators_are_inference_only() -> None:
    ml = [cls for domain, _, cls in CLASSES if domain == "ai.onnx.ml"]
    assert ml and all(cls.inference_only for cls in ml)
    assert not any(cls.inference_only for domain, _, cls in CLASSES if domain != "ai.onnx.ml")


#: A node of an operator that runs a graph (its forward graph) and declares no traits of its own.
_GRADIENT = NodeInfo("Gradient", "ai.onnx.preview.training", "grad", 1, 17, 1)


def test_an_operator_that_declares_nothing_has_the_safe_defaults() -> None:
    class Fresh(Operator):
        op_type = "Fresh"

    assert not _declares(Fresh, "output_shape")  # what the walk above fails on
    for traits in (Fresh, operator_class(_GRADIENT)):
        assert traits.output_shape is OutputShape.VALUE_SIZED
        assert traits.random is Randomness.NONE
        assert not traits.parameterising_inputs and not traits.size_inputs
        assert not traits.moves_elements_only and not traits.inference_only
    assert operator_class(_GRADIENT) is Gradient


def test_a_function_converter_has_the_traits_of_the_class_it_builds() -> None:
    assert REGISTRY.operator_class("", "Upsample").op_type == "Resize"
    assert REGISTRY.operator_class("", "Identity").moves_elements_only
    assert REGISTRY.operator_class("", "Scatter").op_type == "ScatterElements"
