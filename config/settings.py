"""ctxhub settings.

Embedded defaults need no service at all: a SQLite file, an in-memory channel layer and eager
Celery. ``DATABASE_URL`` switches to PostgreSQL, ``REDIS_URL`` switches Channels and Celery to
Redis, ``CTXHUB_PRODUCTION=true`` turns on production hardening and requires ``SECRET_KEY``.
Every variable is listed in docs/configuration.md; values are parsed strictly (see config/env.py).
"""

from __future__ import annotations

import base64
from pathlib import Path

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from config.env import (
    Pool,
    database_from_url,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_str,
    otlp_traces_endpoint,
    redis_url,
)

# Lets generic Django classes be subscripted at run time (ModelAdmin[Session]) for typing.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("CTXHUB_DATA_DIR") or BASE_DIR / "var")

PRODUCTION = env_bool("CTXHUB_PRODUCTION", default=False)
DEBUG = env_bool("DEBUG", default=not PRODUCTION)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY must be set when CTXHUB_PRODUCTION=true")
    SECRET_KEY = "embedded-default-only-never-use-in-production-" + "x" * 16

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set when CTXHUB_PRODUCTION=true")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# https://docs.djangoproject.com/en/6.1/ref/settings/#installed-apps
# daphne first: its runserver serves ASGI (websockets) and static files in development.
INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    # Serves the API's interactive docs from its bundled files: no CDN.
    "ninja",
    "sessions.apps.AgentSessionsConfig",
    "gateway.apps.GatewayConfig",
    "transcripts.apps.TranscriptsConfig",
]

MIDDLEWARE = [
    # Outermost: a span for each request, with the status the client gets (when tracing is on).
    "sessions.telemetry.TracedRequests",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Outermost but one: API errors made anywhere below come out as the API's JSON.
    "sessions.api.middleware.JsonApiErrors",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page requires login unless its view says otherwise.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# The API's requests carry a key, not a login: the server runs them through this shorter chain
# (config/asgi.py), without the login's session, CSRF, login, flash messages and page headers.
API_MIDDLEWARE = [
    "sessions.telemetry.TracedRequests",
    "django.middleware.security.SecurityMiddleware",
    "sessions.api.middleware.JsonApiErrors",
    "django.middleware.common.CommonMiddleware",
]

# Scripts, styles and everything else from this origin only, and no inline script, style
# attribute or string evaluated as code: what an injected message could smuggle into a page
# would not run. (Pages set their bars' widths from a script; htmx is told not to evaluate.)
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# https://docs.djangoproject.com/en/6.1/ref/settings/#databases
# PostgreSQL connections are pooled per process: CTXHUB_DB_POOL_SIZE at most, so web processes
# times that, plus the workers', must stay below PostgreSQL's max_connections (100 by default).
DATABASES = {
    "default": database_from_url(
        "DATABASE_URL",
        env_str("DATABASE_URL"),
        sqlite_default=DATA_DIR / "ctxhub.sqlite3",
        pool=Pool(
            size=env_int("CTXHUB_DB_POOL_SIZE", 10, minimum=1),
            timeout=env_int("CTXHUB_DB_POOL_TIMEOUT", 5, minimum=1),
        ),
    )
}
# HTTP requests one web process runs at once (the others wait their turn, holding nothing):
# fewer than its pooled connections, so a running request always finds one.
CTXHUB_CONCURRENT_REQUESTS = env_int("CTXHUB_CONCURRENT_REQUESTS", 8, minimum=1)
# Tokens of effective histories one process keeps built between requests (about 20 bytes each):
# the sessions it serves stay warm as long as they fit.
CTXHUB_REMEMBERED_TOKENS = env_int("CTXHUB_REMEMBERED_TOKENS", 5_000_000, minimum=0)
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The embedded default must start on a fresh clone with nothing prepared.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "sessions:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

# Requests carrying a whole agent history can be large; refuse beyond this, deliberately.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("CTXHUB_MAX_UPLOAD_BYTES", 20 * 1024 * 1024, minimum=1024)

# https://channels.readthedocs.io/en/stable/topics/channel_layers.html
REDIS_URL = redis_url("REDIS_URL", env_str("REDIS_URL"))
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # No read timeout: a socket's receive loop blocks on Redis for as long as the
                # session is quiet (redis-py 8 would otherwise cut it, and the page's socket,
                # every 5 s).
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": env_str("CTXHUB_CHANNEL_PREFIX", "ctxhub"),
                # Every socket of one web process shares one inbox in Redis, and a push to a
                # full inbox is dropped without a word: with the default of 100, one append
                # watched by a hundred sockets of a process fills it. Unread pushes expire
                # after 60 s.
                "capacity": env_int("CTXHUB_CHANNEL_CAPACITY", 5000, minimum=100),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# https://docs.celeryq.dev/en/stable/django/first-steps-with-django.html
CELERY_BROKER_URL = REDIS_URL or "memory://"
if REDIS_URL:
    # Redis's transport, surviving Redis going away under unacknowledged messages.
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
CELERY_RESULT_BACKEND = REDIS_URL or None
# One result backend (and its Redis pool) per process: by default Celery makes one per thread,
# and a web process runs each request in a new thread.
CELERY_RESULT_BACKEND_THREAD_SAFE = True
# Without a broker, jobs run in the web process as they are enqueued.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# Compaction jobs. A job that runs longer than the hard limit is killed; the broker hands an
# unacknowledged message to another worker only after the visibility timeout, which is kept
# well above that limit so a long job is never run twice at once. A job that died (its worker
# killed, its message lost with a Redis restart) is found by the sweeper instead, from the
# heartbeat the job row carries: it runs every CTXHUB_SWEEP_SECONDS in the worker.
CTXHUB_SUMMARY_MODEL = env_str("CTXHUB_SUMMARY_MODEL", "offline:extractive")
CTXHUB_JOB_TIME_LIMIT = env_int("CTXHUB_JOB_TIME_LIMIT", 900, minimum=10)
CTXHUB_JOB_HEARTBEAT_SECONDS = env_int("CTXHUB_JOB_HEARTBEAT_SECONDS", 5, minimum=1)
CTXHUB_JOB_STALE_SECONDS = env_int("CTXHUB_JOB_STALE_SECONDS", 60, minimum=2)
CTXHUB_JOB_MAX_DELIVERIES = env_int("CTXHUB_JOB_MAX_DELIVERIES", 3, minimum=1)
CTXHUB_JOB_MAX_RETRIES = env_int("CTXHUB_JOB_MAX_RETRIES", 5, minimum=0)
CTXHUB_SWEEP_SECONDS = env_int("CTXHUB_SWEEP_SECONDS", 30, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 4 * CTXHUB_JOB_TIME_LIMIT}
CELERY_BEAT_SCHEDULE = {
    "sweep-compaction-jobs": {
        "task": "sessions.tasks.sweep_jobs",
        "schedule": float(CTXHUB_SWEEP_SECONDS),
    }
}

# The REST API: requests per key and minute (the cache counts them: Redis when configured).
CTXHUB_API_RATE_PER_MINUTE = env_int("CTXHUB_API_RATE_PER_MINUTE", 600, minimum=1)
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "config.redis_cache.SharedRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CTXHUB_CHANNEL_PREFIX", "ctxhub"),
        }
    }

# The dashboard chat. Any pydantic-ai model string answers (its API key from the provider's
# usual variable); the offline demo model needs none. A turn beats every few seconds while it
# runs; one silent for longer than the stale limit died with its server and is closed when
# the next prompt comes.
CTXHUB_CHAT_MODEL = env_str("CTXHUB_CHAT_MODEL") or "offline:demo"
CTXHUB_CHAT_STALE_SECONDS = env_int("CTXHUB_CHAT_STALE_SECONDS", 60, minimum=5)

# Each open session socket checks this often that the channel layer still holds its groups
# (Redis may lose them: a flush, a failover, eviction); one that lost them asks its page to
# reconnect, which rejoins and catches up from the log.
CTXHUB_SOCKET_HEARTBEAT_SECONDS = env_int("CTXHUB_SOCKET_HEARTBEAT_SECONDS", 20, minimum=1)
# The offline demo model streams a word every this many milliseconds (its tools take ten
# times as long), so its answers can be watched and stopped like a real model's.
CTXHUB_DEMO_PACE_MS = env_int("CTXHUB_DEMO_PACE_MS", 30)

# The gateway (/gateway/anthropic, /gateway/openai/v1): where it forwards each wire format's
# requests, the provider's base URL, or "offline" for the offline demo model, which needs no
# key. The mode a new gateway session gets unless its client asks for another (the
# X-Ctxhub-Mode header): "govern" forwards the session Governor's request, "observe" the
# client's own. An upstream silent for the timeout is answered 504.
CTXHUB_GATEWAY_ANTHROPIC_URL = env_str("CTXHUB_GATEWAY_ANTHROPIC_URL") or "offline"
CTXHUB_GATEWAY_OPENAI_URL = env_str("CTXHUB_GATEWAY_OPENAI_URL") or "offline"
CTXHUB_GATEWAY_MODE = env_str("CTXHUB_GATEWAY_MODE") or "govern"
CTXHUB_GATEWAY_TIMEOUT_SECONDS = env_int("CTXHUB_GATEWAY_TIMEOUT_SECONDS", 600, minimum=1)
# Each web process remembers the conversations it read lately (the text of their messages
# arrays), so a client's next request costs what it adds to read: at most this many MB of
# text (0: none remembered, every body read whole).
CTXHUB_GATEWAY_READ_MEMORY_MB = env_int("CTXHUB_GATEWAY_READ_MEMORY_MB", 64, minimum=0)
# The largest body the gateway takes: Anthropic's Messages API takes 32 MB, more than the
# hub's other endpoints (CTXHUB_MAX_UPLOAD_BYTES), and a conversation the provider would take
# must not be refused on the way (in govern mode it may well be sent smaller).
CTXHUB_GATEWAY_MAX_BODY_BYTES = env_int(
    "CTXHUB_GATEWAY_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024
)
# Transcripts followed by the web process as their agents write them (folders or files,
# separated by ":"; e.g. ~/.claude/projects:~/.codex/sessions), into the sessions of the user
# CTXHUB_FOLLOW_OWNER. For the embedded default, whose channel layer reaches only the pages of
# its own process; with Redis, `manage.py import_transcripts PATH --owner USER --follow` can
# run as a process of its own instead.
CTXHUB_FOLLOW = [
    Path(item).expanduser() for item in env_str("CTXHUB_FOLLOW").split(":") if item.strip()
]
CTXHUB_FOLLOW_OWNER = env_str("CTXHUB_FOLLOW_OWNER")
if CTXHUB_FOLLOW and not CTXHUB_FOLLOW_OWNER:
    raise ImproperlyConfigured("CTXHUB_FOLLOW needs CTXHUB_FOLLOW_OWNER: the user to import for")

# The provider API keys the gateway holds for its users (stored on the API keys page, sent
# upstream for a client that authenticates with its ctxhub key alone) are encrypted at rest
# with this Fernet key (make one: python -c "from cryptography.fernet import Fernet;
# print(Fernet.generate_key().decode())"). To rotate it, list the new key first, then the old
# ones, comma-separated: the first encrypts, any decrypts. Unset, a key is derived from
# SECRET_KEY (HKDF), so the embedded default works; but then rotating SECRET_KEY makes every
# stored provider key unreadable (their owners must store them again). Production should set
# it (``manage.py check`` warns when it is not).
CTXHUB_SECRETS_KEY = env_str("CTXHUB_SECRETS_KEY")
for _secrets_key in CTXHUB_SECRETS_KEY.split(","):
    try:
        _valid = (
            not _secrets_key.strip() or len(base64.urlsafe_b64decode(_secrets_key.strip())) == 32
        )
    except ValueError:
        _valid = False
    if not _valid:
        raise ImproperlyConfigured(
            "CTXHUB_SECRETS_KEY must be Fernet keys (32 bytes in url-safe base64), comma-separated"
        )

# OpenTelemetry tracing (docs/telemetry.md): off unless an OTLP/HTTP endpoint is set, with the
# standard variables. Then every process (web, worker, manage.py) exports its spans there, in
# batches; OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES and
# OTEL_BSP_* are read by the SDK itself. Prompts, answers and tool arguments go into the model
# calls' spans only when asked, as the GenAI conventions have it.
CTXHUB_TRACES_ENDPOINT = otlp_traces_endpoint()
CTXHUB_SERVICE_NAME = env_str("OTEL_SERVICE_NAME") or "ctxhub"
CTXHUB_TRACE_CONTENT = env_bool("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", "INFO", {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}),
    },
}

if PRODUCTION:
    # https://docs.djangoproject.com/en/6.1/howto/deployment/checklist/
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
