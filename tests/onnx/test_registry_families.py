"""Each operator family lists its classes (``OPERATORS``) and the importer registers them in one
loop (sonnx.onnx.converters.families): a class is registered as its own converter exactly when
its family lists it, so adding one is its class, its family's list and its test."""

from __future__ import annotations

import pkgutil
from collections import Counter

import sonnx.onnx.converters  # registers every converter
import sonnx.operators
from sonnx.engine.operator import Operator
from sonnx.onnx.converters.families import FAMILIES
from sonnx.onnx.registry import REGISTRY, OperatorConverter


def _registered_as_themselves() -> set[type[Operator]]:
    found = set()
    for domain, op_type in REGISTRY.operators():
        for version in REGISTRY.versions(op_type, domain):
            _, convert = REGISTRY.lookup(domain, op_type, version)
            if isinstance(convert, OperatorConverter):
                found.add(convert.operator_class)
    return found


def test_every_family_package_is_registered() -> None:
    packages = {m.name for m in pkgutil.iter_modules(sonnx.operators.__path__) if m.ispkg}
    assert {family.__name__.rsplit(".", 1)[1] for family in FAMILIES} == packages


def test_each_listed_class_is_its_own_converter_at_exactly_its_since_versions() -> None:
    for family in FAMILIES:
        for cls in family.OPERATORS:
            assert cls.__module__.startswith(family.__name__ + "."), (
                f"{cls.__qualname__} ({cls.__module__}) is listed by {family.__name__}"
            )
            for version in cls.since_versions:
                found = REGISTRY.lookup(cls.domain, cls.op_type, version)
                assert found is not None and found[0] == version
                assert isinstance(found[1], OperatorConverter)
                assert found[1].operator_class is cls


def test_no_class_is_registered_as_itself_outside_its_familys_list() -> None:
    listed = [cls for family in FAMILIES for cls in family.OPERATORS]
    assert not [cls for cls, n in Counter(listed).items() if n > 1]
    assert _registered_as_themselves() == set(listed)
    assert len(listed) > 250  # the families together, not a few of them
