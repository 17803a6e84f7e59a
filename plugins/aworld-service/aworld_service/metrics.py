"""What ``/metrics`` reports, through ``prometheus_client`` (its text format and escaping).

Counters and the duration histogram are this host's (since it started); the ``aworld_tasks``
gauge is the store's count per status, so with a shared PostgreSQL store it is the cluster's.
Each server keeps its own registry, so several servers in one process (tests) do not mix.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# counter attribute (what ``bump`` names) -> (metric name without _total, help)
_COUNTERS = {
    "submitted": ("aworld_submitted", "Tasks this host accepted (new ids)."),
    "duplicates": ("aworld_submitted_duplicate", "Submissions of an id already stored."),
    "rejected_full": ("aworld_rejected_queue_full", "Submissions refused with 429."),
    "fenced": ("aworld_fenced_writes", "Results refused because this host's lease had expired."),
    "lease_lost": ("aworld_lease_lost", "Runs stopped because their lease was lost."),
    "released": ("aworld_released", "Runs handed back to the queue at shutdown."),
    "store_errors": ("aworld_store_errors", "Store operations that failed."),
}


class ServiceMetrics:
    """The metrics one server keeps; :meth:`render` writes them with the store's gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # render sets the gauges, then reads them all
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self._tasks = Gauge("aworld_tasks", "Tasks in the store per status (queued = init).", ["status"], registry=reg)
        self._queued = Gauge("aworld_tasks_queued", "Tasks waiting to run (status init).", registry=reg)
        self._running = Gauge("aworld_host_running", "Tasks this host runs now.", ["host"], registry=reg)
        self._concurrency = Gauge(
            "aworld_host_concurrency", "Most tasks this host runs at once.", ["host"], registry=reg
        )
        self._counters = {
            attr: Counter(name, help_text, registry=reg) for attr, (name, help_text) in _COUNTERS.items()
        }
        self._finished = Counter(
            "aworld_finished",
            "Runs this host finished, per final status (done = success, failed, timeout, cancelled).",
            ["status"],
            registry=reg,
        )
        self._durations = Histogram(
            "aworld_task_duration_seconds",
            "Run time of finished tasks, per status.",
            ["status"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )

    def count_finished(self, status: str, duration_s: float | None) -> None:
        self._finished.labels(status=status).inc()
        if duration_s is not None:
            self._durations.labels(status=status).observe(duration_s)

    def bump(self, name: str, by: int = 1) -> None:
        self._counters[name].inc(by)

    def count(self, name: str) -> int:
        """A counter's value (``bump``'s names: ``submitted``, ``duplicates``, ...)."""
        value = self.registry.get_sample_value(f"{_COUNTERS[name][0]}_total")
        return int(value or 0)

    @property
    def submitted(self) -> int:
        return self.count("submitted")

    @property
    def duplicates(self) -> int:
        return self.count("duplicates")

    def render(
        self, *, store_counts: Mapping[str, int], running: int, concurrency: int, host: str
    ) -> str:
        with self._lock:
            self._tasks.clear()  # a status no longer in the store disappears from the gauge
            for status, n in store_counts.items():
                self._tasks.labels(status=status).set(n)
            self._queued.set(store_counts.get("init", 0))
            self._running.clear()
            self._running.labels(host=host).set(running)
            self._concurrency.clear()
            self._concurrency.labels(host=host).set(concurrency)
            return generate_latest(self.registry).decode("utf-8")
