"""A reader who runs only the install line a section names can run that section's code: what
each python and shell block of README.md and docs/**/*.md imports or calls is installed by the
``pip install ...`` line of its section, or by ``pip install .`` where it names none
(:mod:`tests.docs.requirements` says how both sides are read). Offline and static: nothing is
installed or run."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.docs.pages import PAGES, RUNNABLE, fences, name
from tests.docs.requirements import fence_needs, install_lines, installed_by, pyproject, unmet


def problems(text: str, where: str, project: Mapping[str, Any] | None = None) -> list[str]:
    """What the page's blocks need that their section's install line does not install."""
    blocks = fences(text, where)
    lines = install_lines(text, blocks)
    found = []
    for fence in blocks:
        if fence.lang in RUNNABLE:
            args = lines[fence.line]
            for missing in unmet(fence_needs(fence), installed_by(args, project)):
                found.append(f"{missing}, not installed by `pip install {' '.join(args)}`")
    return found


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_install_line_installs_what_the_section_uses(page: Path) -> None:
    assert problems(page.read_text(encoding="utf-8"), name(page)) == []


SKLEARN_PAGE = """# Classical ML

{install}

```python
from skl2onnx import to_onnx
```
"""


def test_a_section_using_a_package_its_install_line_lacks_fails() -> None:
    page = SKLEARN_PAGE.format(install="Convert a model first.")
    assert problems(page, "fake.md") == [
        "fake.md:5: imports skl2onnx (skl2onnx), not installed by `pip install .`"
    ]
    page = SKLEARN_PAGE.format(install='Needs `pip install ".[demo]" skl2onnx`.')
    assert problems(page, "fake.md") == []


SERVE_PAGE = """# Serving

Needs `pip install ".[serve]"`.

```bash {{data-skip="serves until stopped"}}
sonnx serve --model-repository models
```

## The Python client

```python
import tritonclient.{protocol} as client
```

# Next page

```python
import sonnx.serve.config
```
"""


def test_an_extra_that_drops_a_package_its_section_uses_fails() -> None:
    page = SERVE_PAGE.format(protocol="grpc")
    found = problems(page, "fake.md")
    # The install line holds for its section and the subsection, not for the next page's.
    assert [p for p in found if not p.startswith("fake.md:17:")] == []
    missing = "fake.md:17: imports starlette.types (starlette), not installed by `pip install .`"
    assert missing in found

    project = copy.deepcopy(pyproject())
    extras = project["project"]["optional-dependencies"]
    extras["serve"] = [r for r in extras["serve"] if not r.startswith("starlette")]
    assert [p for p in problems(page, "fake.md", project) if not p.startswith("fake.md:17:")] == [
        "fake.md:5: imports starlette.types (starlette), not installed by `pip install .[serve]`"
    ]


def test_a_submodule_named_as_an_extra_needs_what_the_extra_adds() -> None:
    """tritonclient.http needs tritonclient[http]; the serve extra installs tritonclient[grpc]."""
    found = problems(SERVE_PAGE.format(protocol="http"), "fake.md")
    assert [p for p in found if p.startswith("fake.md:11:")] == [
        "fake.md:11: imports tritonclient.http (tritonclient[http]), not installed by "
        "`pip install .[serve]`"
    ]
