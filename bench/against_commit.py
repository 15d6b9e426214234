"""One benchmark, at an earlier commit and at the working tree, side by side in one run.

    python bench/against_commit.py 2492103 -- bench/overhead.py
    python bench/against_commit.py 2492103 --rounds 3 -- bench/infer.py --models zoo --repeats 11

A refactor of the run side must not cost speed. This runs the same benchmark script (any of
``bench/``'s, which print one JSON object with ``--json``) at ``REV``, from a temporary git
worktree of that commit with its own ``src`` on ``PYTHONPATH``, and at the working tree, in
turn for ``--rounds`` rounds (old, new, new, old, ...), so that both see the same machine. Each
round is a fresh process.

For every case the table gives each side's sonnx median (the median over rounds of the
per-round medians), the spread of those over rounds, ``new/old``, and each side's ratio to
the script's own reference (onnxruntime, or torch), which the script measured in the same
process: where the machine drifts between rounds, that ratio drifts less than the times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_side(tree: Path, script: list[str]) -> dict[str, Any]:
    """The script's JSON report, run from ``tree`` with ``tree/src`` first on the path.

    :param tree: a checkout of the repository.
    :param script: the script's path (relative to the repository root) and its arguments.
    :returns: the parsed report.
    """
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, *script, "--json"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(script)} failed in {tree}:\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{' '.join(script)} printed no JSON report in {tree}")
    return json.loads(lines[-1])


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['case']} [{r['reference']}]": r for r in report["rows"]}


def summarise(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[list[str]]:
    """One table line per case both sides measured (see the module).

    :param old: the earlier commit's reports, one per round.
    :param new: the working tree's reports, one per round.
    :returns: the table's lines, cells as text.
    """
    lines = []
    olds, news = [_rows(r) for r in old], [_rows(r) for r in new]
    for case in olds[0]:
        if not all(case in rows for rows in olds + news):
            continue
        o = [rows[case]["sonnx_s"] * 1e3 for rows in olds]
        n = [rows[case]["sonnx_s"] * 1e3 for rows in news]
        o_ref = statistics.median(rows[case]["ratio"] for rows in olds)
        n_ref = statistics.median(rows[case]["ratio"] for rows in news)
        om, nm = statistics.median(o), statistics.median(n)
        lines.append(
            [
                case,
                f"{om:.3f} ± {(max(o) - min(o)) / 2:.3f}",
                f"{nm:.3f} ± {(max(n) - min(n)) / 2:.3f}",
                f"{nm / om:.3f}",
                f"{o_ref:.3f}",
                f"{n_ref:.3f}",
            ]
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s REV [--rounds N] -- SCRIPT [ARGS]"
    )
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rounds", type=int, default=3, help="processes per side (default 3)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, script = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not script:
        parser.error("name the benchmark after --, e.g. -- bench/overhead.py")
    with tempfile.TemporaryDirectory(prefix="sonnx-bench-") as tmp:
        tree = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.rev],
            check=True,
        )
        try:
            old: list[dict[str, Any]] = []
            new: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                sides = [(old, tree), (new, ROOT)]
                for reports, where in sides if round_ % 2 == 0 else sides[::-1]:
                    reports.append(run_side(where, script))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
            )
    head = ["case [reference]", f"{args.rev} ms", "now ms", "now/old", "old/ref", "now/ref"]
    print(f"== {' '.join(script)}: {args.rev} against the working tree, {args.rounds} rounds ==")
    print("machine: " + json.dumps(new[-1]["machine"]))
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for line in summarise(old, new):
        print("| " + " | ".join(line) + " |")


if __name__ == "__main__":
    main()
