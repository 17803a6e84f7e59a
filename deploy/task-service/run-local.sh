#!/usr/bin/env bash
# Three task servers on this machine behind one client, as in the seed:
#
#   PYTHONPATH=examples/gaia deploy/task-service/run-local.sh gaia_agent=gaia_agent:build_gaia_agent [STORE_URL]
#   .venv/bin/python deploy/task-service/example_client.py --agent gaia_agent "What is 2+2?"
#
# The servers listen on 127.0.0.1:9299, :9399 and :9499. STORE_URL defaults to one SQLite file
# the three share (a shared queue on one machine: if one server dies, the others finish its
# tasks); give postgresql://user:pw@host/db to share the queue between machines. Extra server
# flags go in AWORLD_TASK_* variables (e.g. AWORLD_TASK_CONCURRENCY=16, AWORLD_TASK_TOKEN=...).
# Ctrl-C stops the three (running tasks go back to the queue).
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
AGENTS="$1"
WORK="${AWORLD_LOCAL_DIR:-$PWD/aworld-local}"
STORE="${2:-sqlite:///$WORK/tasks.sqlite}"
# the repository's environment when run from its root, else python3 (override with PYTHON=...)
PYTHON="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
mkdir -p "$WORK"

pids=()
stop() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT INT TERM

for port in 9299 9399 9499; do
    "$PYTHON" -m aworld_service.serve --port "$port" --agents "$AGENTS" --store "$STORE" \
        >"$WORK/server-$port.log" 2>&1 &
    pids+=("$!")
done

for port in 9299 9399 9499; do
    for _ in $(seq 1 100); do
        if "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
            echo "task server ready on 127.0.0.1:$port (log: $WORK/server-$port.log)"
            break
        fi
        sleep 0.2
    done
done
echo "store: $STORE. Ctrl-C stops the servers."
wait
