"""Send questions to the task servers, wait for the answers, save the trajectories.

    .venv/bin/python deploy/task-service/example_client.py --agent gaia_agent \\
        --hosts localhost:9299,localhost:9399,localhost:9499 "What is 2+2?" "Who wrote Hamlet?"

The seed's usage: ``AworldTaskClient(know_hosts=[...])``, ``submit_task(AworldTask(...))``,
``get_task_state(task_id=...)``. Task ids are derived from the questions, so running this twice
does not submit anything twice.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib

from aworld_core.schemas import AworldTask
from aworld_service.client import AworldTaskClient


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--agent", required=True, help="agent_id, as the servers' --agents names it")
    parser.add_argument("--hosts", default="localhost:9299,localhost:9399,localhost:9499")
    parser.add_argument("--token", default=None, help="bearer token (default: AWORLD_TASK_TOKEN)")
    parser.add_argument("--out", default="trajectories.jsonl")
    args = parser.parse_args()

    async with AworldTaskClient(know_hosts=args.hosts.split(","), token=args.token) as client:
        tasks = [
            AworldTask(
                task_id=f"q-{hashlib.sha1(q.encode()).hexdigest()[:16]}",
                agent_id=args.agent,
                agent_input=q,
                session_id="example",
                user_id="SYSTEM",
            )
            for q in args.questions
        ]
        for task in tasks:
            await client.submit_task(task)
        for task in tasks:
            state = await client.wait(task.task_id)
            print(f"{task.task_id} [{state.status.value}] {state.answer!r} {state.error or ''}")
        count = await client.download_trajectories(args.out, task_ids=[t.task_id for t in tasks])
        print(f"{count} trajectories written to {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
