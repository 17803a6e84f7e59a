"""The third-party backend example installs from its own folder and runs through the core CLI."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "third_party_backend"
# the README's command, run as written from the repository root
DOCUMENTED = "python -m aworld_core.run --config examples/third_party_backend/job.yaml"
OUTPUT = ROOT / "runs" / "echo-demo"  # the job's default output: runs/<name> under the current directory


def _git_status() -> str | None:
    """Changes git sees in the example's folder (None outside a git checkout)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "examples/third_party_backend"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_the_readme_documents_the_command_the_test_runs():
    assert DOCUMENTED in (EXAMPLE / "README.md").read_text()


@pytest.mark.slow
def test_pip_install_example_into_a_throwaway_environment_and_run(tmp_path: Path):
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    # The core and its dependencies come from the test environment (no network at test time);
    # the example itself is pip-installed from its folder, as a user would.
    deps = sysconfig.get_paths()["purelib"]
    (site / "aworld_test_deps.pth").write_text(f"import site; site.addsitedir({deps!r})\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
         str(ROOT / "core"), str(EXAMPLE)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    listing = subprocess.run([str(python), "-m", "aworld_core.run", "--list"], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert "echo" in listing.stdout and "aworld-echo-backend" in listing.stdout

    # the documented command, exactly, from the repository root (no overrides, no AWORLD_* settings)
    before = _git_status()
    runs_existed, output_existed = OUTPUT.parent.exists(), OUTPUT.exists()
    (OUTPUT / "echo_job.json").unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWORLD_")}
    try:
        run = subprocess.run([str(python), *shlex.split(DOCUMENTED)[1:]], cwd=ROOT, env=env,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert "echo backend: hi from the echo backend; job 'echo-demo' with 2 training rows" in run.stdout
        assert f"output={OUTPUT}" in run.stdout
        assert (OUTPUT / "echo_job.json").is_file()
        if before is not None:
            ignored = subprocess.run(["git", "check-ignore", "-q", str(OUTPUT / "echo_job.json")], cwd=ROOT)
            assert ignored.returncode == 0, "the example's output must land where git ignores it"
        assert _git_status() == before, "running the example must not change files git tracks"
    finally:
        if not output_existed:
            shutil.rmtree(OUTPUT, ignore_errors=True)
        if not runs_existed and OUTPUT.parent.exists() and not any(OUTPUT.parent.iterdir()):
            OUTPUT.parent.rmdir()
    core_file = subprocess.check_output([str(python), "-c", "import aworld_core; print(aworld_core.__file__)"], text=True)
    assert core_file.startswith(str(env_dir)), "the core must come from the throwaway environment"


def test_example_stays_under_60_lines():
    files = [*EXAMPLE.joinpath("aworld_echo_backend").glob("*.py"), EXAMPLE / "pyproject.toml"]
    lines = [line for f in files for line in f.read_text().splitlines() if line.strip()]
    assert len(lines) < 60
