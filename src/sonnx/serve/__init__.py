"""``sonnx serve``: ONNX models over the Open Inference Protocol (KServe v2, HTTP).

One responsibility per module:

- :mod:`~sonnx.serve.config` — a model's ``config.json`` (batching, queue, timeout, shapes)
- :mod:`~sonnx.serve.repository` — the Triton-layout model repository, load / unload
- :mod:`~sonnx.serve.signature` — a model's inputs and outputs in KServe terms; request checks
- :mod:`~sonnx.serve.datatypes` — KServe datatypes <-> NumPy dtypes <-> ONNX element types
- :mod:`~sonnx.serve.codec` — tensors as JSON and as binary tensor data
- :mod:`~sonnx.serve.batcher` — the bounded per-model queue and dynamic batching
- :mod:`~sonnx.serve.metrics` — Prometheus metrics in a per-app registry
- :mod:`~sonnx.serve.logs` / :mod:`~sonnx.serve.auth` — JSON logs, access log, API key
- :mod:`~sonnx.serve.app` — the routes (and why Starlette); :mod:`~sonnx.serve.server` — uvicorn

Needs the ``serve`` extra (``pip install sonnx[serve]``): starlette, uvicorn, prometheus_client.
"""

from sonnx.serve.app import create_app
from sonnx.serve.server import run_server

__all__ = ["create_app", "run_server"]
