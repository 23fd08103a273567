"""The hub's database away while agents work through the gateway: their calls still reach the
model (observe mode forwards unrecorded; govern mode forwards the client's own request and says
so), and the session catches up with the next request once the database is back."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anthropic
import pytest

from gateway.models import Exchange
from sessions.api.keys import create_key
from sessions.models import AgentSession
from tests.conftest import ARTIFACTS
from tests.gateway.fake_upstream import FakeUpstream, Text, running_fake_upstream
from tests.gateway.waiting import wait_for
from tests.processes import asgi_server, free_port, shared_database_url

pytestmark = pytest.mark.django_db(transaction=True)


class CuttableProxy:
    """A TCP relay to PostgreSQL that can be cut (every connection dropped, new ones refused)
    and restored, as a network partition or a database restart would."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self.open = True
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open = False
        with self._lock:
            for end in self._sockets:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            self._sockets.clear()

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self._listener.close()


@pytest.fixture(scope="module")
def partitioned(django_db_setup: None) -> Iterator[tuple[str, FakeUpstream, CuttableProxy]]:
    database = urlsplit(shared_database_url())
    proxy = CuttableProxy(database.hostname or "127.0.0.1", database.port or 5432)
    netloc = database.netloc.rsplit(":", 1)[0] + f":{proxy.port}"
    with running_fake_upstream() as upstream:
        env = {
            "DATABASE_URL": urlunsplit(database._replace(netloc=netloc)),
            "CTXHUB_DB_POOL_TIMEOUT": "1",
            "CTXHUB_GATEWAY_ANTHROPIC_URL": upstream.url,
        }
        with asgi_server(ARTIFACTS / "logs" / "web-gateway-outage.log", env=env) as url:
            yield url, upstream, proxy
    proxy.close()


def test_calls_reach_the_model_while_the_database_is_away_and_the_session_catches_up(
    partitioned: tuple[str, FakeUpstream, CuttableProxy], alice: Any
) -> None:
    url, upstream, proxy = partitioned
    key = create_key(alice, name="agent", scopes=["read", "write"])[1]

    def client(mode: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=f"{url}/gateway/anthropic",
            api_key="sk-ant-provider-key",
            default_headers={"X-Ctxhub-Key": key, "X-Ctxhub-Mode": mode},
            max_retries=0,
        )

    messages: list[dict[str, Any]] = []

    def turn(mode: str, prompt: str) -> str:
        messages.append({"role": "user", "content": prompt})
        upstream.script(Text(f"answer to {prompt}"))
        answer = client(mode).messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=64, system="You code.", messages=messages
        )
        message = answer.parse()
        messages.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        return answer.headers["x-ctxhub-governed"]

    assert turn("observe", "first") == "no"
    wait_for(lambda: Exchange.objects.count() == 1, "the first exchange recorded")
    proxy.cut()
    try:
        assert turn("observe", "second, with the database away") == "no"
        assert turn("govern", "third, governed if it could be") == "no"
        assert len(upstream.bodies("/v1/messages")) == 3  # every call reached the model
        unknown = anthropic.Anthropic(
            base_url=f"{url}/gateway/anthropic",
            api_key="sk-ant-provider-key",
            default_headers={"X-Ctxhub-Key": "ctxh_0123456789ab_never-checked"},
            max_retries=0,
        )
        with pytest.raises(anthropic.APIStatusError) as refused:
            unknown.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert refused.value.status_code == 503
    finally:
        proxy.restore()
    assert turn("govern", "fourth, with the database back") == "yes"
    # The next request carried the whole conversation: the log has every message once, the
    # outage's answers included, as the client sent them back.
    session = AgentSession.objects.get(gateway__isnull=False)
    wait_for(lambda: Exchange.objects.filter(session=session).count() == 2, "the fourth exchange")
    assert session.messages.count() == 1 + len(messages)
    assert Exchange.objects.count() == 2  # the outage's went unrecorded
