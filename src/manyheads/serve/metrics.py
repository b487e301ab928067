"""Prometheus metrics of the service (one registry per app)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import require
from .batcher import Pass

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
WORK_BUCKETS = tuple(2**k for k in range(4, 21))  # 16, 32, ... 1,048,576
NO_LABEL = "(none)"  # a multilabel answer with no label


class ServiceMetrics:
    """Request counts and latencies, trunk-pass sizes, queue depth, head updates and
    per-head predicted-label counters (a shift in a head's answers shows there)."""

    def __init__(self, queue_depth: Callable[[], float], n_heads: Callable[[], float]) -> None:
        prom = require("prometheus_client", "serve")
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.requests = prom.Counter(
            "manyheads_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=r,
        )

        def histogram(name: str, doc: str, buckets: tuple, labels: tuple = ()) -> Any:
            return prom.Histogram(name, doc, list(labels), buckets=buckets, registry=r)

        self.latency = histogram(
            "manyheads_request_seconds",
            "Time to answer an HTTP request",
            LATENCY_BUCKETS,
            ("method", "route"),
        )
        self.batch_texts = histogram(
            "manyheads_batch_texts", "Texts per trunk pass (after micro-batching)", BATCH_BUCKETS
        )
        self.batch_requests = histogram(
            "manyheads_batch_requests", "Requests merged into one trunk pass", BATCH_BUCKETS
        )
        self.batch_seconds = histogram(
            "manyheads_batch_seconds", "Time of one trunk pass with every head", LATENCY_BUCKETS
        )
        self.batch_work = histogram(
            "manyheads_batch_work",
            "Trunk work of one trunk pass: tokens for a trunk that reads token windows, "
            "characters for others",
            WORK_BUCKETS,
        )
        self.steps = prom.Counter(
            "manyheads_text_steps",
            "Trunk passes that read a step of one text too long to share a pass",
            registry=r,
        )
        self.texts = prom.Counter("manyheads_texts", "Texts classified", registry=r)
        self.labels = prom.Counter(
            "manyheads_predicted_labels",
            "Answers per head and label",
            ["head", "label"],
            registry=r,
        )
        self.updates = prom.Counter(
            "manyheads_head_updates", "Head changes applied", ["action"], registry=r
        )
        self.feedback = prom.Counter(
            "manyheads_feedback_rows", "Corrections kept, per head", ["head"], registry=r
        )
        self.reloads = prom.Counter(
            "manyheads_bundle_reloads", "Bundle reloads after a change on disk", registry=r
        )
        depth = prom.Gauge("manyheads_queue_depth", "Requests waiting for a trunk pass", registry=r)
        depth.set_function(queue_depth)
        heads = prom.Gauge("manyheads_heads", "Heads being served", registry=r)
        heads.set_function(n_heads)
        # the label series that exist, and the heads and labels being served: a deleted
        # head's series go, and a pass still answering with it makes no new ones
        self._series: set[tuple[str, str]] = set()
        self._serving: dict[str, set[str]] | None = None
        self._series_lock = threading.Lock()

    def keep_heads(self, heads: Mapping[str, Iterable[str]]) -> None:
        """The heads served from now on, with their labels: every label series of
        another head or label is removed."""
        with self._series_lock:
            self._serving = {h: {*labels, NO_LABEL} for h, labels in heads.items()}
            for head, label in list(self._series):
                if label not in self._serving.get(head, ()):
                    self._series.discard((head, label))
                    self.labels.remove(head, label)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def observe_pass(self, done: Pass) -> None:
        """Called from the worker thread after each trunk pass (a long text's step too:
        its answer counts with its last step)."""
        answers = done.answers
        if done.step:
            self.steps.inc()
        else:
            self.batch_texts.observe(len(answers))
            self.batch_requests.observe(done.requests)
        self.batch_seconds.observe(done.seconds)
        self.batch_work.observe(done.work)
        self.texts.inc(len(answers))
        counts: Counter[tuple[str, str]] = Counter()
        for answer in answers:
            for head, out in answer.items():
                if out.get("label") is not None:
                    counts[head, str(out["label"])] += 1
                elif out.get("labels"):
                    for label in out["labels"]:
                        counts[head, str(label)] += 1
                else:
                    counts[head, NO_LABEL] += 1
        with self._series_lock:
            for (head, label), n in counts.items():
                if self._serving is not None and label not in self._serving.get(head, ()):
                    continue  # a head changed or removed while this pass ran
                self._series.add((head, label))
                self.labels.labels(head, label).inc(n)

    def watch_drift(self, report: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        """Gauges of each head's drift, read from ``report()`` (the drift table) at each
        scrape."""
        self.registry.register(_DriftCollector(report))

    def render(self) -> tuple[bytes, str]:
        return self._prom.generate_latest(self.registry), self._prom.CONTENT_TYPE_LATEST


# the drift table's columns as gauges: (column, name, help)
DRIFT_GAUGES = (
    ("psi", "psi", "Population stability index of the head's labels, window vs reference"),
    ("js", "js", "Jensen-Shannon distance of the head's labels, window vs reference"),
    ("confidence_psi", "confidence_psi", "Population stability index of the confidence"),
    ("confidence_change", "confidence_change", "Mean confidence, window minus reference"),
    ("no_label_share", "no_label_share", "Share of the window's answers with no label"),
    ("inputs_t2", "inputs_t2", "Hotelling's T2 of the window's trunk vectors vs reference"),
    ("window", "window", "Answers in the head's drift window"),
    ("alarm", "alarm", "1 when the head's drift is over its threshold"),
)


class _DriftCollector:
    """``manyheads_drift_*`` gauges, one series per head, from the drift table."""

    def __init__(self, report: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._family = require("prometheus_client.core", "serve").GaugeMetricFamily
        self._report = report

    def describe(self) -> list[Any]:
        return [self._family(f"manyheads_drift_{name}", doc, labels=["head"])
                for _, name, doc in DRIFT_GAUGES]  # fmt: skip

    def collect(self) -> Iterable[Any]:
        rows = self._report()
        for column, name, doc in DRIFT_GAUGES:
            family = self._family(f"manyheads_drift_{name}", doc, labels=["head"])
            for head, row in rows.items():
                value = row.get(column)
                if value is not None:
                    family.add_metric([head], float(value))
            yield family
