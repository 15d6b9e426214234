"""Serving: ``sonnx serve`` under 1, 8 and 32 concurrent clients, with and without dynamic
batching, beside the in-process ``SingaRep.run`` throughput it is built on.

    python bench/serve.py                           # 30 s per case, 6 cases (~5 min)
    python bench/serve.py --seconds 5 --image 112   # a quick look
    python bench/serve.py --clients 1 8 --json

The model is ``sonnx.testing.torch_models.ResNet18`` (ResNet-18's layout, BatchNorm folded, a
dynamic batch dim) exported once and served twice from a temporary repository: ``plain``
(``max_batch_size`` 0: one request per run) and ``batched`` (``max_batch_size`` 32,
``max_queue_delay_ms`` 2). The server is a real ``python -m sonnx serve`` process on a free
127.0.0.1 port; each client is a thread with a keep-alive connection sending one image per
request as binary tensor data and waiting for the answer before sending the next, for
``--seconds`` per case (and at most ``--max-requests``). Clients and server share the machine's
cores, so on a small machine the clients' own CPU use is part of what is measured.

The in-process column is ``SingaRep.run`` on the same bytes, batch 1 for ``plain`` and batch
``min(clients, 32)`` for ``batched``, as images/s: images run over time taken, for at least
``--repeats`` runs and ``--in-process-seconds``, timed right before *and* right after each
served case (the server idle) and averaged, so that both sides of a ratio see the same
background load on a shared machine. ``ratio`` = served images/s / in-process images/s, i.e.
how much of the engine's throughput survives HTTP, JSON headers, queueing and batching;
``batch`` is the mean rows per model run on the server (from its metrics) and ``load`` the
1-minute load average at the end of the case, to tell a noisy row from a slow one.

On a machine shared with other CPU-heavy jobs, run both sides with ``OMP_WAIT_POLICY=PASSIVE``
(it must be in the environment before torch loads; the server inherits it): torch's OpenMP
threads otherwise spin at every barrier while a descheduled peer holds it up, which cost 2-4x
in throughput, in-process and served alike, at a load average of 5 on 2 cores.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from common import machine_facts, pin_threads, time_once
from prometheus_client.parser import text_string_to_metric_families

import sonnx
from sonnx import autograd
from sonnx.testing import torch_models

OPSET = 17
MAX_BATCH = 32


def modes(delay_ms: float) -> dict[str, dict[str, float]]:
    """The two served copies of the model and their ``config.json``."""
    return {
        "plain": {"max_queue_size": 1024},
        "batched": {
            "max_batch_size": MAX_BATCH,
            "max_queue_delay_ms": delay_ms,
            "max_queue_size": 1024,
        },
    }


def build_repository(root: Path, image: int, delay_ms: float) -> bytes:
    """Write the model once per mode; the ONNX bytes for the in-process side."""
    torch.manual_seed(0)
    example = torch.randn(1, 3, image, image)
    proto = torch_models.export(torch_models.ResNet18(), (example,), OPSET, ["input"])
    for mode, config in modes(delay_ms).items():
        folder = root / mode / "1"
        folder.mkdir(parents=True)
        onnx.save(proto, folder / "model.onnx")
        (root / mode / "config.json").write_text(json.dumps(config))
    return proto.SerializeToString()


class Server:
    """``python -m sonnx serve`` on a free loopback port, stopped with SIGTERM."""

    def __init__(self, repository: Path, startup_s: float = 300.0) -> None:
        command = [sys.executable, "-m", "sonnx", "serve", "--model-repository", str(repository)]
        command += ["--host", "127.0.0.1", "--http-port", "0", "--log-level", "info"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("SONNX_API_KEY", None)
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = self._wait_for("listening", startup_s)["port"]
        self._wait_for("models_loaded", startup_s)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if '"event"' in line:
                self.events.put(json.loads(line))
        self.events.put(None)

    def _wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            entry = self.events.get(timeout=remaining)
            if entry is None:
                raise RuntimeError(f"sonnx serve exited with {self.proc.wait()}")
            if entry.get("event") == event:
                return entry
        raise TimeoutError(f"sonnx serve logged no {event!r} in {timeout} s")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def request_body(image: np.ndarray) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": list(image.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": image.nbytes},
                }
            ],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    return header + image.tobytes(), headers


def client(
    port: int, path: str, body: bytes, headers: dict[str, str], stop_at: float, limit: int
) -> tuple[list[float], int]:
    """Send requests back to back until ``stop_at``; latencies (s) of the 200s, error count."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.connect()
    # As urllib3 and geventhttpclient do: without it, Nagle holds the body's last segment
    # until the server's delayed ACK (~40 ms per request on Linux).
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    latencies: list[float] = []
    errors = 0
    try:
        for _ in range(limit):
            if time.perf_counter() >= stop_at:
                break
            start = time.perf_counter()
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                latencies.append(time.perf_counter() - start)
            else:
                errors += 1
    finally:
        conn.close()
    return latencies, errors


def batches(port: int, mode: str) -> tuple[float, float]:
    """The server's (runs, rows) so far for ``mode``, from its Prometheus metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    found = {"count": 0.0, "sum": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            kind = sample.name.removeprefix("sonnx_serve_batch_size_")
            if kind in found and sample.labels.get("model") == mode:
                found[kind] = sample.value
    return found["count"], found["sum"]


def load(port: int, mode: str, clients: int, seconds: float, limit: int, body, headers) -> dict:
    """``clients`` threads for ``seconds``, after a short untimed warm-up."""
    path = f"/v2/models/{mode}/infer"
    warm_until = time.perf_counter() + min(2.0, seconds)
    _run_clients(port, path, body, headers, clients, warm_until, limit)
    runs_before, rows_before = batches(port, mode)
    start = time.perf_counter()
    latencies, errors = _run_clients(port, path, body, headers, clients, start + seconds, limit)
    elapsed = time.perf_counter() - start
    runs_after, rows_after = batches(port, mode)
    runs, rows = runs_after - runs_before, rows_after - rows_before
    latencies.sort()
    return {
        "mode": mode,
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "mean_batch": rows / runs if runs else float("nan"),
        "req_per_s": len(latencies) / elapsed,
        "p50_ms": 1e3 * latencies[len(latencies) // 2] if latencies else float("nan"),
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else float("nan"),
    }


def _run_clients(port, path, body, headers, clients, stop_at, limit) -> tuple[list[float], int]:
    results: list[tuple[list[float], int]] = [([], 0)] * clients

    def work(i: int) -> None:
        results[i] = client(port, path, body, headers, stop_at, limit // clients + 1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for lat, _ in results for x in lat], sum(e for _, e in results)


def in_process(rep: sonnx.SingaRep, image: int, batch: int, repeats: int, seconds: float) -> float:
    """images/s of ``SingaRep.run`` (NumPy in, NumPy out) at ``batch``: at least ``repeats``
    runs and ``seconds``, after one untimed run."""
    x = np.random.default_rng(batch).standard_normal((batch, 3, image, image), np.float32)
    rep.run([x])
    runs, spent = 0, 0.0
    while runs < repeats or spent < seconds:
        spent += time_once(lambda: [t.numpy() for t in rep.run([x])])[1]
        runs += 1
    return batch * runs / spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="timed seconds per case")
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--image", type=int, default=224, help="input side")
    parser.add_argument("--max-requests", type=int, default=200_000, help="cap per case")
    parser.add_argument("--repeats", type=int, default=7, help="in-process timed runs, at least")
    parser.add_argument(
        "--in-process-seconds", type=float, default=5.0, help="in-process time, at least"
    )
    parser.add_argument("--threads", type=int, default=None, help="in-process intra-op threads")
    parser.add_argument(
        "--delay-ms", type=float, default=2.0, help="max_queue_delay_ms of the batched model"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=["plain", "batched"], default=["plain", "batched"]
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    autograd.training = False
    image = np.random.default_rng(0).standard_normal((1, 3, args.image, args.image), np.float32)
    body, headers = request_body(image)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rep = sonnx.prepare(build_repository(Path(tmp), args.image, args.delay_ms))
        server = Server(Path(tmp))
        try:
            for mode in args.modes:
                for clients in args.clients:
                    batch = 1 if mode == "plain" else min(clients, MAX_BATCH)
                    side = (rep, args.image, batch, args.repeats, args.in_process_seconds)
                    before = in_process(*side)
                    row = load(
                        server.port, mode, clients, args.seconds, args.max_requests, body, headers
                    )
                    row["load"] = os.getloadavg()[0]
                    rate = (before + in_process(*side)) / 2
                    row["in_process_batch"] = batch
                    row["in_process_img_per_s"] = rate
                    row["ratio"] = row["req_per_s"] / rate
                    rows.append(row)
        finally:
            exit_code = server.stop()
    report(rows, machine_facts(threads), vars(args), exit_code)


def report(rows: list[dict], facts: dict, settings: dict, exit_code: int) -> None:
    if settings["json"]:
        print(
            json.dumps(
                {
                    "benchmark": "serve",
                    "machine": facts,
                    "settings": settings,
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                    "rows": rows,
                    "server_exit_code": exit_code,
                }
            )
        )
        return
    print("== serve: sonnx serve (KServe v2 over HTTP, binary tensors) vs in-process run ==")
    print("machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items() if k != "json"))
    print(f"environment: OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print(
        f"{'mode':<8} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
        f"{'batch':>5} {'in-proc img/s':>14} {'(batch)':>7} {'ratio':>6} {'load':>5}"
    )
    for r in rows:
        print(
            f"{r['mode']:<8} {r['clients']:>7} {r['req_per_s']:>8.1f} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['errors']:>6} {r['mean_batch']:>5.1f} "
            f"{r['in_process_img_per_s']:>14.1f} "
            f"{r['in_process_batch']:>7} {r['ratio']:>6.2f} {r['load']:>5.1f}"
        )
    by = {(r["mode"], r["clients"]): r for r in rows}
    for clients in sorted({r["clients"] for r in rows}):
        if ("plain", clients) in by and ("batched", clients) in by:
            gain = by[("batched", clients)]["req_per_s"] / by[("plain", clients)]["req_per_s"]
            print(f"note: {clients} clients: batched / plain throughput = {gain:.2f}")
    print("note: ratio = served images/s / in-process SingaRep.run images/s at that batch")
    print(f"note: server exit code after SIGTERM: {exit_code}")


if __name__ == "__main__":
    main()
