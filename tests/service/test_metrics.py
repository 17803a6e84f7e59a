"""``/metrics`` scraped from a real server and read back with prometheus_client's own parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from test_server import config

from aworld_core.schemas import AworldTask
from aworld_service.client import AworldTaskClient


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_the_endpoint_parses_and_keeps_the_metric_names(serve: Any, tmp_path: Path) -> None:
    async with serve(config(tmp_path)) as (host, server), AworldTaskClient(know_hosts=[host]) as client:
        tasks = [AworldTask(task_id=f"m{i}", agent_id="echo", agent_input=str(i)) for i in range(3)]
        await client.submit_tasks(tasks)
        await client.submit_task(tasks[0])  # a duplicate
        await client.wait([t.task_id for t in tasks], timeout=20)
        async with aiohttp.ClientSession() as http, http.get(f"http://{host}/metrics") as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()

    got = samples(text)
    owner = (("host", server.config.owner),)
    assert got[("aworld_tasks", (("status", "success"),))] == 3
    assert got[("aworld_tasks_queued", ())] == 0
    assert got[("aworld_host_running", owner)] == 0
    assert got[("aworld_host_concurrency", owner)] == 4
    assert got[("aworld_submitted_total", ())] == 3 and server.metrics.submitted == 3
    assert got[("aworld_submitted_duplicate_total", ())] == 1 and server.metrics.duplicates == 1
    assert got[("aworld_finished_total", (("status", "success"),))] == 3
    assert got[("aworld_task_duration_seconds_count", (("status", "success"),))] == 3
    assert got[("aworld_task_duration_seconds_bucket", (("le", "+Inf"), ("status", "success")))] == 3
    for name in (
        "aworld_rejected_queue_full_total",
        "aworld_fenced_writes_total",
        "aworld_lease_lost_total",
        "aworld_released_total",
        "aworld_store_errors_total",
    ):
        assert got[(name, ())] == 0, name


def test_a_status_gone_from_the_store_leaves_the_gauge() -> None:
    from aworld_service.metrics import ServiceMetrics

    metrics = ServiceMetrics()
    first = metrics.render(store_counts={"init": 2, "running": 1}, running=1, concurrency=2, host='a"b')
    assert samples(first)[("aworld_host_running", (("host", 'a"b'),))] == 1  # label escaped and read back
    second = samples(metrics.render(store_counts={"success": 3}, running=0, concurrency=2, host='a"b'))
    assert ("aworld_tasks", (("status", "running"),)) not in second
    assert second[("aworld_tasks", (("status", "success"),))] == 3 and second[("aworld_tasks_queued", ())] == 0
