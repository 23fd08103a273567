"""docker-compose.yml is accepted by docker compose and wires the whole stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from tests.processes import ROOT


def _compose(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose not found: scripts/test.sh installs it")
    clean = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    # A developer's own .env (as the production page has them write) must not decide it.
    with tempfile.NamedTemporaryFile("w", suffix=".env") as empty:
        return subprocess.run(
            [tool, "--env-file", empty.name, "-f", "docker-compose.yml", "config", *args],
            cwd=ROOT,
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_compose_accepts_the_stack() -> None:
    assert _compose("-q", SECRET_KEY="compose-test-secret").returncode == 0
    services = _compose("--services", SECRET_KEY="compose-test-secret").stdout.split()
    assert sorted(services) == ["migrate", "postgres", "proxy", "redis", "web", "worker"]


def test_compose_requires_a_secret_key() -> None:
    out = _compose("-q")
    assert out.returncode != 0
    assert "SECRET_KEY" in out.stderr


def test_web_and_worker_start_after_migrations_on_postgres_and_redis() -> None:
    services = yaml.safe_load(_compose(SECRET_KEY="compose-test-secret").stdout)["services"]
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for name in ("web", "worker"):
        service = services[name]
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy"}
        assert service["environment"]["DATABASE_URL"].startswith("postgres://")
        assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert service["image"] == services["migrate"]["image"]
    assert services["worker"]["command"][:3] == ["celery", "-A", "config.celery"]
    # The worker runs the job sweeper too.
    assert "--beat" in services["worker"]["command"]


def test_web_scales_out_behind_the_proxy() -> None:
    """`--scale web=N` needs no fixed host port on web: the proxy publishes the one port and
    finds every web container by the service's name."""
    services = yaml.safe_load(_compose(SECRET_KEY="compose-test-secret").stdout)["services"]
    assert "ports" not in services["web"]
    assert services["web"]["command"][0] == "scripts/web.sh"
    assert [p["target"] for p in services["proxy"]["ports"]] == [80]
    (mount,) = services["proxy"]["volumes"]
    caddyfile = ROOT / "deploy" / "Caddyfile"
    assert mount == f"{caddyfile}:/etc/caddy/Caddyfile:ro"
    assert "dynamic a web 8000" in caddyfile.read_text()
