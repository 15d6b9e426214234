"""Shared fixtures of the ONNX tests and the conformance summary line."""

import pytest

from sonnx.engine import operator


def pytest_terminal_summary(terminalreporter):
    from tests.onnx.test_conformance import RESULTS

    if RESULTS:
        passed = sum(RESULTS.values())
        terminalreporter.write_line(
            f"ONNX conformance: {passed}/{len(RESULTS)} official node cases passed "
            f"({100.0 * passed / len(RESULTS):.1f} %)"
        )


@pytest.fixture(autouse=True)
def computed_values_not_kept(request, monkeypatch):
    """Export suites run with no computed value kept by the operators reading it, so every
    op's export is shown to need only the records (creator, shape, dtype) of computed inputs,
    as with inputs larger than ``KEPT_VALUE_SIZE``."""
    if request.module.__name__.split(".")[-1].startswith("test_export"):
        monkeypatch.setattr(operator, "KEPT_VALUE_SIZE", 0)
