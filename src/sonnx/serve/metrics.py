"""Prometheus metrics of one server, in a registry of its own.

A per-app :class:`~prometheus_client.CollectorRegistry` (not the process-global one) lets
tests and embedders run several apps in one process without "duplicated timeseries" errors,
and keeps Python's process metrics out unless asked for. Labels carry only names of models in
the repository (requests for unknown names count under ``_unknown``), so a client cannot grow
the label set without bound. Requests, failures and latency also carry the ``protocol``
(``http`` or ``grpc``); a failure's ``code`` is the HTTP status or the gRPC status name.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

UNKNOWN_MODEL = "_unknown"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServeMetrics:
    """The server's counters, gauges and histograms; ``render`` gives the /metrics body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sonnx_serve_requests",
            "Inference requests received",
            ["model", "protocol"],
            registry=r,
        )
        self.failures = Counter(
            "sonnx_serve_request_failures",
            "Inference requests answered with an error, by HTTP status or gRPC status name",
            ["model", "protocol", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "sonnx_serve_request_duration_seconds",
            "Inference request latency: body read to response built",
            ["model", "protocol"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "sonnx_serve_requests_in_flight",
            "Inference requests being handled (queued or running)",
            ["model"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "sonnx_serve_queue_depth",
            "Requests waiting in the model's queue",
            ["model"],
            registry=r,
        )
        self.batch_size = Histogram(
            "sonnx_serve_batch_size",
            "Rows (dim 0) per model run; above 1 when dynamic batching merged requests",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "sonnx_serve_batch_requests",
            "Requests per model run",
            ["model"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.inference = Histogram(
            "sonnx_serve_inference_duration_seconds",
            "Time of one model run (merge, run, split), in its worker thread",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def request(self, model: str, protocol: str) -> RequestRecord:
        """Count one inference request now; call ``done`` on the result when it is answered."""
        return RequestRecord(self, model, protocol)

    def observer(self, model: str) -> ModelObserver:
        """The batcher's view of these metrics for ``model``."""
        return ModelObserver(self, model)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class RequestRecord:
    """One inference request in the metrics: counted and in flight from creation, answered at
    :meth:`done`."""

    def __init__(self, metrics: ServeMetrics, model: str, protocol: str) -> None:
        self._metrics, self._labels = metrics, (model, protocol)
        self._start = time.perf_counter()
        metrics.requests.labels(model, protocol).inc()
        self._in_flight = metrics.in_flight.labels(model)
        self._in_flight.inc()

    def done(self, failure_code: str | None = None) -> None:
        """The request was answered: successfully, or with ``failure_code``."""
        self._in_flight.dec()
        if failure_code is not None:
            self._metrics.failures.labels(*self._labels, failure_code).inc()
        elapsed = time.perf_counter() - self._start
        self._metrics.latency.labels(*self._labels).observe(elapsed)


class ModelObserver:
    """Implements :class:`sonnx.serve.batcher.BatchObserver` for one model."""

    def __init__(self, metrics: ServeMetrics, model: str) -> None:
        self._depth = metrics.queue_depth.labels(model)
        self._rows = metrics.batch_size.labels(model)
        self._requests = metrics.batch_requests.labels(model)
        self._inference = metrics.inference.labels(model)

    def queue_depth(self, depth: int) -> None:
        self._depth.set(depth)

    def batch(self, rows: int, requests: int, seconds: float) -> None:
        self._rows.observe(rows)
        self._requests.observe(requests)
        self._inference.observe(seconds)
