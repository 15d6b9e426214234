"""Every official ONNX node case through sonnx (see tests/onnx/conformance.py).

Cases listed in conformance_exclusions.txt are expected to fail (strict: a newly passing case
must be removed from the list). The pass rate is printed at the end of the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.onnx.conformance import all_cases, run_case

EXCLUSIONS_FILE = Path(__file__).with_name("conformance_exclusions.txt")


def _exclusions() -> dict[str, str]:
    excluded = {}
    for line in EXCLUSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        excluded[name.strip()] = reason.strip()
    return excluded


EXCLUDED = _exclusions()
RESULTS: dict[str, bool] = {}


def _params():
    for name in sorted(all_cases()):
        marks = []
        if name in EXCLUDED:
            marks.append(pytest.mark.xfail(reason=EXCLUDED[name], strict=True))
        yield pytest.param(name, marks=marks, id=name)


def test_exclusions_name_real_cases():
    unknown = sorted(set(EXCLUDED) - set(all_cases()))
    assert not unknown, f"exclusion list names cases that do not exist: {unknown}"


@pytest.mark.parametrize("case_name", _params())
def test_node_case(case_name: str) -> None:
    problem = run_case(all_cases()[case_name])
    RESULTS[case_name] = problem is None
    assert problem is None, problem
