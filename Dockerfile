# The ctxhub image: web (ASGI) and worker (Celery) both run from it.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv PATH=/opt/venv/bin:$PATH
RUN pip install --no-cache-dir uv
WORKDIR /app

COPY pyproject.toml uv.lock .python-version ./
RUN uv sync --frozen --no-dev --no-install-project
COPY . .

RUN useradd --system --uid 1000 ctxhub && mkdir -p /app/var && chown ctxhub /app/var
USER ctxhub
EXPOSE 8000
CMD ["scripts/web.sh", "0.0.0.0:8000"]
