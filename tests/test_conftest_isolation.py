"""The test suite's own isolation (tests/conftest.py): a module's fixtures start in inference
mode even where an earlier module's fixture left ``autograd.training`` on. A leaked flag made
graph mode compile nothing in a later module's fixture, in whichever worker ran the two."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_LEAKS = """
import pytest
import sonnx.autograd as autograd

@pytest.fixture(scope="module")
def trained():
    autograd.training = True  # a module fixture that trains and never turns the flag off
    return 1

def test_uses_the_trained_fixture(trained):
    assert trained == 1
"""

_READS = """
import pytest
import sonnx.autograd as autograd

@pytest.fixture(scope="module")
def flag_at_setup():
    return autograd.training

def test_the_next_modules_fixture_starts_in_inference(flag_at_setup):
    assert flag_at_setup is False
"""


def test_a_flag_leaked_by_one_modules_fixture_does_not_reach_the_next(
    pytester: pytest.Pytester,
) -> None:
    conftest = Path(__file__).with_name("conftest.py").read_text()
    pytester.makeconftest(
        conftest.replace('pytest_plugins = ["tests.onnx.conformance_summary"]', "")
    )
    pytester.makepyfile(test_a_leaks=_LEAKS, test_b_reads=_READS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
