"""docker-compose.yml: validated by Debian's docker-compose (no engine needed) and checked for
the shape a cluster needs: health checks, migrations before the API, one shared store."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
ONE_SHOT = {"migrate"}
PROFILES = ("--profile", "cpu", "--profile", "gpu")


def _compose(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed; .ci/run installs Debian's docker-compose")
        pytest.skip("docker-compose is not installed (apt-get install -y docker-compose)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGLINE_", "COMPOSE_", "RAY_"))}
    env["RAY_AUTH_TOKEN"] = "test-token"
    return subprocess.run(
        [exe, "-f", str(COMPOSE), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    """Every service of both profiles, as docker-compose resolves them (anchors merged)."""
    out = _compose(*PROFILES, "config")
    assert out.returncode == 0, out.stderr
    resolved: dict[str, Any] = yaml.safe_load(out.stdout)["services"]
    return resolved


def test_config_is_valid() -> None:
    for profiles in ((), ("--profile", "cpu"), PROFILES):
        out = _compose(*profiles, "config", "-q")
        assert out.returncode == 0, f"docker-compose {' '.join(profiles)} config -q: {out.stderr}"


def test_config_requires_the_ray_token() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [exe, "-f", str(COMPOSE), "config", "-q"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "RAY_AUTH_TOKEN" in out.stderr


def test_config_rejects_a_broken_file(tmp_path: Path) -> None:
    # The validation above is worth something only if a wrong file fails it.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("condition: service_healthy", "condition: healthy", 1))
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed")
    env = {**os.environ, "RAY_AUTH_TOKEN": "test-token"}
    out = subprocess.run(
        [exe, "-f", str(broken), "config", "-q"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0


def test_expected_services(services: dict[str, Any]) -> None:
    expected = {"postgres", "migrate", "ray-head", "ray-worker", "ray-worker-gpu", "api-1", "api-2", "proxy"}
    assert expected <= set(services)
    assert services["ray-worker"]["profiles"] == ["cpu"]
    assert services["ray-worker-gpu"]["profiles"] == ["gpu"]
    assert int(services["ray-worker"]["deploy"]["replicas"]) >= 2


def test_every_long_running_service_has_a_health_check(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name in ONE_SHOT:
            assert service.get("restart") == "no", name
            continue
        check = service.get("healthcheck", {}).get("test")
        assert check, f"{name} has no health check"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    for api in ("api-1", "api-2"):
        assert "/readyz" in " ".join(services[api]["healthcheck"]["test"])


def test_api_waits_for_migrations_and_healthy_dependencies(services: dict[str, Any]) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["command"] == ["ragline", "migrate"]
    for api in ("api-1", "api-2"):
        deps = services[api]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully"
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["ray-head"]["condition"] == "service_healthy"
    assert {d["condition"] for d in services["proxy"]["depends_on"].values()} == {"service_healthy"}
    assert services["api-1"]["ports"] != services["api-2"]["ports"]


def test_store_volume_is_shared_by_every_node(services: dict[str, Any]) -> None:
    nodes = ("ray-head", "ray-worker", "ray-worker-gpu", "api-1", "api-2")
    for name in nodes:
        mounts = services[name]["volumes"]
        assert any(_mount(m) == ("store", "/data") for m in mounts), f"{name} does not mount the store"
        assert services[name]["environment"]["RAGLINE_DATA_DIR"] == "/data"
    urls = {services[n]["environment"]["RAGLINE_DATABASE_URL"] for n in (*nodes, "migrate")}
    assert len(urls) == 1  # one catalog for every node
    tokens = {services[n]["environment"]["RAY_AUTH_TOKEN"] for n in nodes}
    assert tokens == {"test-token"}  # one Ray token for every node and driver


def test_gpu_profile_reserves_nvidia_devices(services: dict[str, Any]) -> None:
    devices = services["ray-worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert "resources" not in services["ray-worker"].get("deploy", {})


def _mount(entry: Any) -> tuple[str, str]:
    if isinstance(entry, str):
        source, target = entry.split(":")[:2]
        return source, target
    return str(entry["source"]), str(entry["target"])
