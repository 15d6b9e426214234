"""Every ```bash, ```sh and ```console block of README.md and docs/**/*.md runs, and exits 0.

A page's shell blocks run in order, one command line after the other, in one process of their
own started in a fresh directory holding the files the pages assume (:mod:`tests.docs.pages`).
A plain ``sonnx ...`` line (no pipes, redirections or variables) runs in that process through
``sonnx.cli.main``, so a page pays for importing sonnx once; any other line runs in bash, with
``python`` and ``sonnx`` on its ``PATH`` meaning this interpreter and this checkout's sonnx. A
```console block's commands are its ``$ `` lines. A block that cannot run here (installs
packages, serves until stopped, needs a GPU) says why on its fence line,
```` ```bash {data-skip="installs packages"} ````.

A model's ``config.json`` that a page's commands write into a model repository must be one
``sonnx serve`` accepts: :func:`sonnx.serve.config.load_config` reads each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sonnx.serve.config import load_config
from sonnx.serve.errors import ConfigError
from tests.docs.pages import (
    PAGES,
    SHELL,
    Fence,
    command_lines,
    environment,
    fences,
    lay_out,
    name,
    page_fences,
)


def commands(fences_: list[Fence]) -> list[tuple[str, str]]:
    """(page:line, command) for every line of the shell blocks that run, in order."""
    return [
        (f"{fence.where}:{fence.line}", line)
        for fence in fences_
        if fence.lang in SHELL and fence.skip_reason is None
        for line in command_lines(fence)
    ]


PAGES_WITH_COMMANDS = [p for p in PAGES if commands(page_fences(p))]

# Runs one page's command lines in order; stops at the first that fails, naming its block.
DRIVER = r"""
import json, re, subprocess, sys, traceback

SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~{}\\'\"]")
for where, line in json.load(open(sys.argv[1])):
    print(f"$ {line}", flush=True)
    command = line.split("#")[0]
    if command.split()[:1] == ["sonnx"] and not SHELL_SYNTAX.search(command):
        from sonnx.cli import main
        try:
            code = main(command.split()[1:])
        except SystemExit as stop:  # argparse's --help, --version and usage errors
            code = stop.code or 0
        except Exception:  # what the console script would show, then the page stops
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
    else:
        code = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", line]).returncode
    if code != 0:
        sys.exit(f"{where}: {line!r} exited with {code}")
"""


def run_commands(directory: Path, lines: list[tuple[str, str]]) -> subprocess.CompletedProcess:
    """Run the command lines in ``directory`` as the module docstring says."""
    bin_dir = directory / ".bin"
    bin_dir.mkdir()
    for program, exec_line in [
        ("python", f'exec "{sys.executable}" "$@"'),
        ("sonnx", f'exec "{sys.executable}" -m sonnx "$@"'),
    ]:
        (bin_dir / program).write_text(f"#!/bin/sh\n{exec_line}\n")
        (bin_dir / program).chmod(0o755)
    env = environment(directory)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    (directory / ".commands.json").write_text(json.dumps(lines))
    return subprocess.run(
        [sys.executable, "-c", DRIVER, ".commands.json"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def written_model_configs(directory: Path) -> list[Path]:
    """The ``config.json`` files of model directories (a directory beside a numbered version
    directory) under ``directory``."""
    return [
        path
        for path in sorted(directory.rglob("config.json"))
        if any(child.is_dir() and child.name.isdigit() for child in path.parent.iterdir())
    ]


def check_commands(directory: Path, lines: list[tuple[str, str]]) -> None:
    """Run the command lines in ``directory``; each must exit 0 and each model ``config.json``
    they write must load."""
    done = run_commands(directory, lines)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for config in written_model_configs(directory):
        load_config(config)  # raises ConfigError naming the file and key


@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=name)
def test_page_commands_run(page: Path, tmp_path: Path, model_onnx: bytes, tiny_llm: Path) -> None:
    lay_out(tmp_path, model_onnx, tiny_llm)
    check_commands(tmp_path, commands(page_fences(page)))


def test_a_failing_command_fails_its_page(tmp_path: Path) -> None:
    """The runner itself, on a made-up page: the in-process and bash paths both run, and the
    first command that fails stops the page, named by its block."""
    text = "\n".join(
        [
            "```console",
            "$ sonnx --version",
            "sonnx 0.1.0",
            "```",
            "```bash",
            "echo '{}' > made.json  # bash",
            "sonnx info missing.onnx",
            "```",
        ]
    )
    done = run_commands(tmp_path, commands(fences(text, "fake.md")))
    assert done.returncode != 0
    assert "$ sonnx --version\nsonnx " in done.stdout
    assert (tmp_path / "made.json").read_text() == "{}\n"
    assert "fake.md:5: 'sonnx info missing.onnx' exited with 2" in done.stderr


def test_a_written_config_sonnx_serve_rejects_fails_its_page(tmp_path: Path) -> None:
    """A model config.json a page writes must be one sonnx serve loads."""
    text = "```bash\nmkdir -p m/1 && echo '{\"max_batchsize\": 8}' > m/config.json\n```"
    with pytest.raises(ConfigError, match=r"m/config\.json: unknown key\(s\) \['max_batchsize'\]"):
        check_commands(tmp_path, commands(fences(text, "fake.md")))
