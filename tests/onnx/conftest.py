"""Shared fixtures of the ONNX tests (the conformance summary line is
tests/onnx/conformance_summary.py, a plugin of the root conftest)."""

import pytest

from sonnx.engine import operator


@pytest.fixture(autouse=True)
def computed_values_not_kept(request, monkeypatch):
    """Export suites run with no computed value kept by the operators reading it, so every
    op's export is shown to need only the records (creator, shape, dtype) of computed inputs,
    as with inputs larger than ``KEPT_VALUE_SIZE``."""
    if request.module.__name__.split(".")[-1].startswith("test_export"):
        monkeypatch.setattr(operator, "KEPT_VALUE_SIZE", 0)
