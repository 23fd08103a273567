"""The Django project that serves ctxhub: settings, URLs, the ASGI and Celery applications.

The Celery application is loaded with the project, so that the tasks the ``sessions`` app
declares (``shared_task``) are sent with its configuration from every process.
"""

from config.celery import app as celery_app

__all__ = ["celery_app"]
