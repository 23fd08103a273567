"""Settings are read in a fresh process per case: they are parsed once, at start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.smoke

PRINT = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'], "
    "s.CELERY_TASK_ALWAYS_EAGER, s.DEBUG)"
)
PRODUCTION = {
    "CTXHUB_PRODUCTION": "true",
    "SECRET_KEY": "a-long-random-production-secret-" + "k" * 40,
    "ALLOWED_HOSTS": "ctxhub.example.com",
    "CTXHUB_SECRETS_KEY": "c2VjcmV0cy1rZXktZm9yLXRoZS10ZXN0LTMyLWJ5dGU=",
}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(
        args or (sys.executable, "-c", PRINT),
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_embedded_defaults_need_no_service(tmp_path: object) -> None:
    out = _run({"CTXHUB_DATA_DIR": str(tmp_path)})
    assert out.stdout.split() == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "True",
        "True",
    ]


def test_urls_switch_to_postgres_and_redis() -> None:
    out = _run({"DATABASE_URL": "postgres://u:p@db:5432/ctx", "REDIS_URL": "redis://cache:6379/0"})
    assert out.stdout.split() == [
        "django.db.backends.postgresql",
        "channels_redis.core.RedisChannelLayer",
        "False",
        "True",
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://localhost/x"),
        ("DATABASE_URL", "postgres://localhost"),
        ("DATABASE_URL", "postgres://localhost:notaport/x"),
        ("REDIS_URL", "http://localhost"),
        ("CTXHUB_PRODUCTION", "maybe"),
        ("DEBUG", "yes please"),
        ("CTXHUB_MAX_UPLOAD_BYTES", "lots"),
        ("LOG_LEVEL", "LOUD"),
    ],
)
def test_a_bad_value_stops_startup_naming_the_variable(name: str, value: str) -> None:
    out = _run({name: value})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr
    assert f"{name}=" in out.stderr.strip().splitlines()[-1]


def test_production_requires_a_secret_key() -> None:
    out = _run({**PRODUCTION, "SECRET_KEY": ""})
    assert out.returncode != 0
    assert "SECRET_KEY must be set" in out.stderr


def test_production_passes_the_deploy_check() -> None:
    out = _run(
        PRODUCTION, sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"
    )
    assert out.returncode == 0, out.stderr
    assert "no issues" in out.stdout
