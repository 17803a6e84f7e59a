"""The deploy files, checked the way a cluster and a Dockerfile linter would (no Docker daemon or
cluster here): every manifest validates strictly against the documented Kubernetes version with
``kubernetes-validate``, every Dockerfile passes hadolint, each kustomization holds every manifest
beside it, compose files set what their image needs, and the task-service image's agent builds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# the documented minimum per kustomization: the task service 1.30; the GAIA environment 1.33
# (appArmorProfile is 1.30+, its user namespace and procMount are on by default from 1.33)
K8S_VERSIONS = {"deploy/task-service/k8s": "1.30.0", "plugins/aworld-gaia-env/deploy/k8s": "1.33.0"}
KUSTOMIZE_DIRS = sorted({p.parent for p in [*REPO.glob("deploy/*/k8s/kustomization.yaml"),
                                              *REPO.glob("plugins/*/deploy/k8s/kustomization.yaml")]})
MANIFESTS = sorted(p for d in KUSTOMIZE_DIRS for p in d.glob("*.yaml") if p.name != "kustomization.yaml")
DOCKERFILES = sorted(p for p in [*REPO.glob("deploy/*/Dockerfile"), *REPO.glob("plugins/*/deploy/Dockerfile")])
COMPOSE_FILES = sorted([*REPO.glob("deploy/*/compose.yaml"), *REPO.glob("plugins/*/deploy/compose.yaml")])
GAIA_K8S = REPO / "plugins/aworld-gaia-env/deploy/k8s"
TASK_K8S = REPO / "deploy/task-service/k8s"


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert path, f"{name} is not installed: it comes with requirements/test.txt (make venv)"
    return path


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _resources(directory: Path) -> list[dict[str, Any]]:
    return [doc for p in sorted(directory.glob("*.yaml")) if p.name != "kustomization.yaml" for doc in _docs(p)]


def _pod_specs(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(r["metadata"]["name"], r["spec"]["template"]["spec"]) for r in _resources(directory)
            if r["kind"] in ("Deployment", "StatefulSet")]


def _kubernetes_validate(paths: list[Path], version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "-k", version, "--strict", "--no-warn", *map(str, paths)],
        capture_output=True, text=True, timeout=300,
    )


def test_the_files_are_found() -> None:
    assert {d.relative_to(REPO).as_posix() for d in KUSTOMIZE_DIRS} == {
        "deploy/task-service/k8s", "plugins/aworld-gaia-env/deploy/k8s"}
    assert len(DOCKERFILES) == 2 and len(COMPOSE_FILES) == 1 and len(MANIFESTS) >= 10


@pytest.mark.parametrize("directory", KUSTOMIZE_DIRS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_every_manifest_validates_strictly_against_the_documented_version(directory: Path) -> None:
    version = K8S_VERSIONS[directory.relative_to(REPO).as_posix()]
    manifests = [p for p in MANIFESTS if p.parent == directory]
    done = _kubernetes_validate(manifests, version)
    assert done.returncode == 0, done.stdout + done.stderr
    minimum = version.rsplit(".", 1)[0]
    for doc in (directory / "kustomization.yaml", directory.parent / "README.md"):
        assert f">= {minimum}" in doc.read_text() or f"{minimum} or later" in doc.read_text(), doc


def test_the_gaia_deployment_is_refused_before_1_30() -> None:
    """1.29 rejects the GAIA Deployment (appArmorProfile is a 1.30 field)."""
    done = _kubernetes_validate([GAIA_K8S / "deployment.yaml"], "1.29.0")
    assert done.returncode != 0 and "appArmorProfile" in done.stdout + done.stderr


@pytest.mark.parametrize("directory", KUSTOMIZE_DIRS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_each_kustomization_holds_its_manifests_in_its_namespace(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    namespace = kustomization["namespace"]
    resources = _resources(directory)
    assert any(r["kind"] == "Namespace" and r["metadata"]["name"] == namespace for r in resources)
    for r in resources:
        if r["kind"] != "Namespace":
            assert r["metadata"].get("namespace") == namespace, (r["kind"], r["metadata"]["name"])
    # what the pods reference is defined here: Secrets, ConfigMaps, PersistentVolumeClaims
    defined = {(r["kind"], r["metadata"]["name"]) for r in resources}
    for name, spec in _pod_specs(directory):
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                    if key in source:
                        assert (kind, source[key]["name"]) in defined, (name, source)
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in defined, name
    # images are pinned, and the kustomization's images: entry names the image the pods use
    images = {c["image"] for _, spec in _pod_specs(directory) for c in spec["containers"]}
    for image in images:
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), image
    for entry in kustomization.get("images", []):
        assert any(image.split(":")[0] == entry["name"] for image in images)
        assert entry["newTag"] != "latest"


@pytest.mark.parametrize("directory", KUSTOMIZE_DIRS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_pods_carry_no_api_token_and_have_resources_and_probes(directory: Path) -> None:
    for name, spec in _pod_specs(directory):
        assert spec.get("automountServiceAccountToken") is False, name
        for container in spec["containers"]:
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], name
            assert "readinessProbe" in container and "livenessProbe" in container, name


def test_the_task_service_pods_meet_the_restricted_pod_security_level() -> None:
    namespace = next(r for r in _resources(TASK_K8S) if r["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, spec in _pod_specs(TASK_K8S):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in ctx["capabilities"] and ctx["readOnlyRootFilesystem"] is True, name


def test_the_gaia_deployment_does_not_claim_tls_it_lacks() -> None:
    (deployment,) = [r for r in _docs(GAIA_K8S / "deployment.yaml") if r["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GAIA_ENV_TLS_TERMINATED"] == "false"  # the plaintext-token warning stays on
    assert not any(r["kind"] == "Ingress" for r in _resources(GAIA_K8S))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_dockerfiles_pass_hadolint(dockerfile: Path) -> None:
    done = subprocess.run([_tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _image_env(dockerfile: Path) -> dict[str, str]:
    """The ENV a Dockerfile sets (``ENV A=1 \\ B=2`` form)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line[4:]))
    return env


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_healthchecks_ask_the_configured_port(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    healthcheck = text[text.index("HEALTHCHECK"):].split("\n\n")[0]
    port_vars = [k for k in _image_env(dockerfile) if k.endswith("_PORT")]
    assert len(port_vars) == 1 and f"os.environ.get('{port_vars[0]}'" in healthcheck
    assert not re.search(r"127\.0\.0\.1:\d", healthcheck)


@pytest.mark.parametrize("compose", COMPOSE_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_compose_sets_what_the_image_needs_over_the_env_file(compose: Path) -> None:
    """A ``.env`` copied from the template must not undo the image's host, port or workspace."""
    doc = yaml.safe_load(compose.read_text())
    for name, service in doc["services"].items():
        dockerfile = (compose.parent / service["build"]["context"] / service["build"]["dockerfile"]).resolve()
        image_env = _image_env(dockerfile)
        template = compose.parent / "env.template"
        template_keys = {line.split("=", 1)[0] for line in template.read_text().splitlines()
                         if line.strip() and not line.startswith("#")}
        environment = service["environment"]
        for key in set(image_env) & template_keys:  # .env would override the image's value
            assert str(environment.get(key)) == image_env[key], (name, key)
        port = environment["GAIA_ENV_PORT"]
        assert any(str(p).endswith(f":{port}") for p in service["ports"]), service["ports"]
        assert all(str(p).startswith("127.0.0.1:") for p in service["ports"])
        mounts = {re.sub(r"\$\{[^}]*\}", "HOST", v).split(":")[1] for v in service["volumes"]}
        assert environment["GAIA_ENV_WORKSPACE"] in mounts and environment["GAIA_DIR"] in mounts
        assert f"EXPOSE {port}" in dockerfile.read_text()


def test_the_task_service_image_ships_the_agent_its_configmap_names(tmp_path: Path) -> None:
    """The ConfigMap's AWORLD_TASK_AGENTS must import in the image: the module is one the
    Dockerfile copies onto the image's PYTHONPATH, and its factory builds an agent."""
    dockerfile = REPO / "deploy/task-service/Dockerfile"
    (configmap,) = _docs(TASK_K8S / "configmap.yaml")
    data = configmap["data"]
    pythonpath = _image_env(dockerfile)["PYTHONPATH"]
    copies = dict(
        (dest, src) for src, dest in re.findall(r"^COPY\s+(\S+)\s+(\S+)$", dockerfile.read_text(), re.MULTILINE)
    )
    shipped = {Path(dest).stem: REPO / src for dest, src in copies.items() if str(Path(dest).parent) == pythonpath}
    modules = [spec.split("=", 1)[1].split(":")[0] for spec in data["AWORLD_TASK_AGENTS"].split(",")]
    for module in modules:
        assert module in shipped, f"{module} is not copied onto {pythonpath} by {dockerfile}"
    # build the agents as the server does at start, with the ConfigMap's environment
    image_path = tmp_path / "opt-aworld-agents"
    image_path.mkdir()
    for stem, src in shipped.items():
        shutil.copy(src, image_path / f"{stem}.py")
    env = {**os.environ, **data, "PYTHONPATH": str(image_path), "MCP_SERVER_TOKEN": "t" * 32}
    code = (
        "import os\n"
        "from aworld_service.agents import AgentRegistry, parse_agent_specs\n"
        "registry = AgentRegistry(parse_agent_specs(os.environ['AWORLD_TASK_AGENTS'].split(',')))\n"
        "print(sorted(registry.names), type(registry.get(registry.names[0]).agent).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "Agent"
