#!/usr/bin/env bash
# make test-wheels: the distributions install *by name* from built wheels, as a user's would.
#
#   scripts/test-wheels.sh [BUILD_PYTHON]     (BUILD_PYTHON: a Python with build + hatchling;
#                                               default .venv/bin/python)
#
# 1. builds an sdist and a wheel (from that sdist) of every distribution -- core, plugins/aworld-*,
#    the example packages -- into build/wheelhouse;
# 2. makes a fresh virtual environment (pip upgraded, then the local CPU torch first) and installs
#    aworld-core, aworld-trl, aworld-gaia-env, the demo and the other plugins BY NAME with
#    --find-links build/wheelhouse (their own dependencies come from the index / pip's cache);
# 3. from a directory outside the sources, in a network namespace with only loopback
#    (scripts/offline-run.sh; steps 1-2 need the index, this one nothing beyond 127.0.0.1):
#    aworld --list, a --dry-run per backend, a real launch of a backend whose framework is
#    absent (exit 2 with its install hint), a tiny --eval against a stub LLM on 127.0.0.1 and
#    `aworld serve` (aworld-service's command and its SQLite store, both found through the
#    installed entry points) answering one task from AworldTaskClient.
# The framework plugins (verl, AReaL, ms-swift) are installed without their frameworks here: their
# --dry-run plans the job without them; make test-verl/-areal/-swift test them with the framework.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CHECKS_ONLY=0
if [ "${1:-}" = --checks ]; then  # step 3 (run by this script itself, through offline-run.sh)
    CHECKS_ONLY=1
    shift
fi
BUILD_PY="${1:-.venv/bin/python}"
PY="${PYTHON:-python3}"
TORCH="${TORCH:-torch==2.13.0}"
HOUSE="$ROOT/build/wheelhouse"
ENV="$ROOT/build/wheel-venv"
WORK="$ROOT/build/wheel-check"
started="${AWORLD_WHEELS_STARTED:-$(date +%s)}"
step() { echo "== test-wheels [$(( $(date +%s) - started ))s] $*"; }

build_and_install() {
DISTS=(core plugins/aworld-* examples/*/)
rm -rf "$HOUSE" "$WORK"
mkdir -p "$HOUSE" "$WORK"
for dist in "${DISTS[@]}"; do
    dist="${dist%/}"
    [ -f "$dist/pyproject.toml" ] || continue
    step "building the sdist and wheel of $dist"
    "$BUILD_PY" -m build --no-isolation --outdir "$HOUSE" "$dist" >"$WORK/build-$(basename "$dist").log" 2>&1 \
        || { cat "$WORK/build-$(basename "$dist").log"; exit 1; }
done
ls "$HOUSE"
n_wheels=$(ls "$HOUSE"/*.whl | wc -l)
n_sdists=$(ls "$HOUSE"/*.tar.gz | wc -l)
[ "$n_wheels" -eq "$n_sdists" ] || { echo "wheels ($n_wheels) and sdists ($n_sdists) differ"; exit 1; }

if [ -d "$ENV" ]; then
    step "removing the previous $ENV"
    rm -rf "$ENV"
fi
step "fresh environment $ENV (pip upgraded, then $TORCH)"
"$PY" -m venv "$ENV"
"$ENV/bin/python" -m pip install -q -U pip
# --no-compile: no .pyc for the thousands of modules never imported here (a third of the time)
"$ENV/bin/python" -m pip install -q --no-compile "$TORCH"
NAMES=(aworld-core aworld-trl aworld-gaia-env aworld-cpu-grpo-demo aworld-verl aworld-areal aworld-swift
       aworld-reinforce-backend aworld-echo-backend aworld-service)
step "pip install --find-links build/wheelhouse ${NAMES[*]}"
"$ENV/bin/python" -m pip install -q --no-compile --find-links "$HOUSE" "${NAMES[@]}"
"$ENV/bin/python" -c "import torch; assert torch.__version__.startswith('${TORCH#torch==}'), torch.__version__"
}

checks() {
cd "$WORK"  # nothing of the sources is importable from here
step "every aworld module comes from the installed wheels"
"$ENV/bin/python" - "$ENV" <<'EOF'
import importlib, sys
for name in ("aworld_core", "aworld_trl", "aworld_gaia_env", "aworld_cpu_grpo_demo", "aworld_verl",
             "aworld_areal", "aworld_swift", "aworld_reinforce_backend", "aworld_echo_backend", "aworld_service"):
    path = importlib.import_module(name).__file__
    assert path.startswith(sys.argv[1]) and "site-packages" in path, (name, path)
EOF

step "aworld --list"
"$ENV/bin/aworld" --list | tee list.txt
for backend in trl verl areal swift reinforce echo; do
    grep -q "^  $backend " list.txt || { echo "backend $backend missing from --list"; exit 1; }
done
sed -n '/^Commands:/,/^[A-Z]/p' list.txt | grep -q "^  serve .*aworld-service" \
    || { echo "aworld-service's serve command missing from --list"; exit 1; }

# a job of the demo's parts (its calculator environment, arith data, exact_answer reward), with
# its output here
cat >job.yaml <<'EOF'
name: wheel-check
model: {path: ./model, build: "aworld_cpu_grpo_demo.build:build_model", tool_parser: hermes}
environment: {name: calculator}
agent: {name: calculator-agent, max_steps: 3}
train_dataset: {name: arith, options: {n: 16, seed: 0}}
test_dataset: {name: arith, split: test, options: {n: 3, seed: 0}}
reward: {name: exact_answer}
backends:
  trl: {max_steps: 1, per_device_train_batch_size: 4, num_generations: 4}
EOF
for backend in trl reinforce echo; do  # frameworks present: the plan must come
    step "aworld --backend $backend --dry-run"
    "$ENV/bin/aworld" --config job.yaml --backend "$backend" --dry-run output_dir="out-$backend" \
        >"dry-$backend.txt" || { cat "dry-$backend.txt"; exit 1; }
    grep -q "^backend: $backend" "dry-$backend.txt" || { cat "dry-$backend.txt"; exit 1; }
done
# frameworks absent: today the plan comes (a plan needs no framework); a dry-run that refuses
# as the real launch does must exit 2 naming the plugin's install command
for backend in verl areal swift; do
    step "aworld --backend $backend --dry-run (framework not installed)"
    set +e
    "$ENV/bin/aworld" --config job.yaml --backend "$backend" --dry-run output_dir="out-$backend" \
        >"dry-$backend.txt" 2>&1
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
        grep -q "^backend: $backend" "dry-$backend.txt" || { cat "dry-$backend.txt"; exit 1; }
    else
        [ "$rc" -eq 2 ] && grep -q "pip install 'aworld-$backend\[$backend\]'" "dry-$backend.txt" \
            || { cat "dry-$backend.txt"; exit 1; }
    fi
done

step "a real launch of verl without the framework: exit 2 with the install hint"
set +e
"$ENV/bin/aworld" --config job.yaml --backend verl output_dir=out-verl-real 2>verl-real.txt
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "pip install 'aworld-verl\[verl\]'" verl-real.txt || { cat verl-real.txt; exit 1; }

step "aworld --eval against a stub LLM on 127.0.0.1 (3 tasks, no tools)"
port=$("$ENV/bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$ENV/bin/python" "$ROOT/benchmarks/_stub_llm.py" --port "$port" --latency-ms 0 >stub.log 2>&1 &
stub=$!
trap 'kill "$stub" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
    grep -q "listening" stub.log && break
    sleep 0.1
done
cat >eval.yaml <<EOF
name: wheel-eval
agent: {name: plain, max_steps: 1, llm_base_url: "http://127.0.0.1:$port/v1", llm_model_name: bench-model}
test_dataset: {name: arith, split: test, options: {n: 3, seed: 0}}
reward: {name: exact_answer}
EOF
"$ENV/bin/aworld" --config eval.yaml --eval --limit 3 output_dir=out-eval | tee eval.txt
grep -q "^evaluated 3 tasks" eval.txt || { echo "--eval did not evaluate 3 tasks"; exit 1; }
[ "$(wc -l <"$WORK/out-eval/eval.jsonl")" -eq 3 ] || { echo "eval.jsonl does not hold 3 episodes"; exit 1; }

step "aworld serve without its plugin: exit 2 naming pip install aworld-service"
set +e
AWORLD_DISABLE_PLUGINS=service "$ENV/bin/aworld" serve --port 1 2>serve-missing.txt
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "pip install aworld-service" serve-missing.txt || { cat serve-missing.txt; exit 1; }

step "aworld serve (its SQLite store) answers one task from AworldTaskClient"
cat >wheel_agents.py <<'EOF'
async def echo(task):
    return f"echo: {task.agent_input}"
EOF
port=$("$ENV/bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
PYTHONPATH="$WORK" "$ENV/bin/aworld" serve --port "$port" --agents echo=wheel_agents:echo \
    --store "sqlite:///$WORK/tasks.sqlite" --log-level warning >serve.log 2>&1 &
server=$!
trap 'kill "$stub" "$server" 2>/dev/null || true' EXIT
"$ENV/bin/python" - "$port" <<'EOF' || { cat serve.log; exit 1; }
import asyncio, sys
from aworld_core.schemas import AworldTask, TaskStatus
from aworld_service import AworldTaskClient

async def main():
    async with AworldTaskClient(know_hosts=[f"127.0.0.1:{sys.argv[1]}"], retries=50, backoff_s=0.2) as client:
        await client.submit_task(AworldTask(task_id="w1", agent_id="echo", agent_input="hi"))
        result = await client.wait("w1", timeout=60)
        assert result.status is TaskStatus.SUCCESS and result.answer == "echo: hi", result
        print("task service:", result.task_id, result.status.value, repr(result.answer))

asyncio.run(main())
EOF
kill "$server"
wait "$server" || true
step "passed"
}

if [ "$CHECKS_ONLY" = 1 ]; then
    checks
else
    build_and_install
    step "the checks, with no route beyond loopback"
    "$ROOT/scripts/offline-run.sh" -- env AWORLD_WHEELS_STARTED="$started" "$0" --checks "$BUILD_PY"
fi
