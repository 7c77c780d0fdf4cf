"""What a consumer's connection says when it ends: its own close is not a fault (issue 44: every
test's captured log showed ``nats_disconnected`` and it was read as a connection lost under load);
a server that goes away still warns."""

from __future__ import annotations

import anyio
from structlog.testing import capture_logs

from rlvr.cli.natsserver import NatsServer
from tests.actors.test_consume import _bus


def _events(logs: list[dict], name: str) -> list[str]:
    return [e["log_level"] for e in logs if e["event"] == name]


def test_closing_the_bus_is_not_reported_as_a_lost_connection(nats_server):
    async def main():
        bus = await _bus(nats_server.url)
        await bus.close()

    with capture_logs() as logs:
        anyio.run(main)
    assert _events(logs, "nats_disconnected") == [] and _events(logs, "nats_closed") == ["info"]


def test_a_server_that_goes_away_is_reported_as_a_lost_connection_and_the_bus_still_closes(tmp_path):
    async def main(server: NatsServer):
        bus = await _bus(server.url)
        server.stop()
        with anyio.fail_after(60):
            while not any(e["event"] == "nats_disconnected" for e in logs):
                await anyio.sleep(0.02)
        await bus.close()

    with capture_logs() as logs, NatsServer(tmp_path / "nats") as server:
        anyio.run(main, server)
    assert _events(logs, "nats_disconnected")[0] == "warning"
