"""The REST API for external agents (``/api/v1``): push history, pull a governed context,
steer it. Keys in ``keys``, the error shape in ``errors``, rate limits in ``limits``, the
endpoints in ``routes``; every change goes through ``sessions.services``."""
