"""Run fuzz cases in worker processes with a time limit each, and count the outcomes.

    python -m tests.fuzz.run --cases 10000 --jobs 2 --save /tmp/fuzz-failures
    python -m tests.fuzz.run --case 0:1234          # one case, in this process, traceback shown

Every case must end in a successful run or a typed sonnx error within ``--timeout`` seconds.
Outcomes: ``ok``, ``typed:<error class>``, and the failures ``untyped:<exception class>``
(a raw Python or torch exception reached the user), ``hang`` (no answer in time: the worker is
killed and replaced), ``crash`` (the worker died) and ``escaped`` (a case that must fail, an
external-data reference leaving the model's directory, ran or failed for another reason).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.external import write_case
from tests.fuzz.mutations import Case, make_case

ROOT = Path(__file__).resolve().parents[2]
FAILURES = ("untyped", "hang", "crash", "escaped")
STARTUP_SECONDS = 120.0


@dataclass
class Outcome:
    case: Case
    kind: str  # ok, typed, untyped, hang, crash, escaped
    error: str = ""
    message: str = ""
    where: str = ""
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.error}" if self.error else self.kind

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


class Worker:
    """One ``tests.fuzz.worker`` process, replaced whenever it hangs or dies."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None
        self._buffer = b""

    def _start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzz.worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._buffer = b""
        if self._line(STARTUP_SECONDS) != "ready":
            self.stop()
            raise RuntimeError(f"fuzz worker did not start; see {self.log}")

    def _line(self, timeout: float) -> str | None:
        """The next answer line, or None on timeout or end of output."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def run(self, case: Case, timeout: float) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        with tempfile.TemporaryDirectory(prefix="sonnx-fuzz-") as tmp:
            source = str(write_case(Path(tmp), case.files)) if case.files else case.model
            payload = pickle.dumps((source, case.feeds))
            started = time.monotonic()
            try:
                self.proc.stdin.write(struct.pack("<I", len(payload)) + payload)
                self.proc.stdin.flush()
                line = self._line(timeout)
            except BrokenPipeError:
                line = None
            seconds = time.monotonic() - started
        if line is None:
            return self._lost(case, seconds)
        answer = json.loads(line)
        outcome = Outcome(
            case, answer["outcome"], answer["error"], answer["message"], answer.get("where", "")
        )
        outcome.seconds = seconds
        if case.must_fail and (outcome.kind == "ok" or "external" not in outcome.message):
            outcome.kind = "escaped"
        return outcome

    def _lost(self, case: Case, seconds: float) -> Outcome:
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            self.stop()
            return Outcome(case, "hang", seconds=seconds)
        self.proc = None
        return Outcome(case, "crash", f"exit {code}", seconds=seconds)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def run_cases(
    seed: int, count: int, jobs: int = 1, timeout: float = 10.0, start: int = 0
) -> list[Outcome]:
    """Cases ``start .. start + count - 1`` of run ``seed``, spread over ``jobs`` workers."""
    outcomes: list[Outcome | None] = [None] * count
    logs = tempfile.mkdtemp(prefix="sonnx-fuzz-logs-")
    errors: list[BaseException] = []

    def drive(worker_index: int) -> None:
        worker = Worker(Path(logs) / f"worker{worker_index}.log")
        try:
            for i in range(worker_index, count, jobs):
                outcomes[i] = worker.run(make_case(seed, start + i), timeout)
        except BaseException as e:  # re-raised by the caller's thread
            errors.append(e)
        finally:
            worker.stop()

    threads = [threading.Thread(target=drive, args=(j,)) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    missing = [i for i, o in enumerate(outcomes) if o is None]
    if missing:
        raise RuntimeError(f"fuzz cases {missing[:5]} were not run; see the logs in {logs}")
    return [o for o in outcomes if o is not None]


def summary(outcomes: list[Outcome]) -> str:
    """Counts per outcome, then the first failures of each kind with what reproduces them."""
    counts = Counter(o.label for o in outcomes)
    lines = [f"{len(outcomes)} cases in {sum(o.seconds for o in outcomes):.1f} s of case time"]
    lines += [f"  {label:<40} {n}" for label, n in sorted(counts.items())]
    shown: Counter[str] = Counter()
    for o in outcomes:
        if o.failed and shown[o.label] < 3:
            shown[o.label] += 1
            lines.append(f"\n{o.label} in case {o.case.case_id} ({o.case.description}):")
            lines.append(f"  {o.message[:500]}")
            if o.where:
                lines.append("  " + o.where.strip().replace("\n", "\n  "))
    return "\n".join(lines)


def save_failures(outcomes: list[Outcome], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        if o.failed:
            name = o.case.case_id.replace(":", "_")
            (directory / f"{name}.pkl").write_bytes(pickle.dumps(o.case))
            (directory / f"{name}.txt").write_text(
                f"{o.label}\n{o.case.description}\n{o.message}\n{o.where}"
            )


def _debug_one(case_id: str) -> None:
    """Run one case in this process and show the full traceback of whatever it raises."""
    import sonnx

    seed, index = (int(p) for p in case_id.split(":"))
    case = make_case(seed, index)
    print(case.description)
    with tempfile.TemporaryDirectory() as tmp:
        source = str(write_case(Path(tmp), case.files)) if case.files else case.model
        rep = sonnx.prepare(source)
        print([o.shape for o in rep.run(case.feeds)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=int(os.environ.get("SONNX_FUZZ_CASES", 300)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--save", type=Path, default=None, help="where to write failing cases")
    parser.add_argument("--case", default=None, help="run one case SEED:INDEX in this process")
    args = parser.parse_args()
    if args.case:
        _debug_one(args.case)
        return
    started = time.monotonic()
    outcomes = run_cases(args.seed, args.cases, args.jobs, args.timeout, args.start)
    print(summary(outcomes))
    print(f"wall time {time.monotonic() - started:.1f} s")
    if args.save:
        save_failures(outcomes, args.save)
    sys.exit(1 if any(o.failed for o in outcomes) else 0)


if __name__ == "__main__":
    main()
