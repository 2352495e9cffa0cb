"""What a case works with: its fake nsqds, its driver runs, its transcript (the ``run`` fixture)."""
from __future__ import annotations

import json
from pathlib import Path

from conformance.clients import contract
from conformance.clients.driver import Driver, DriverProcess
from conformance.clients.fake_nsqd import CA_FILE, FakeNsqd, case_token
from conformance.clients.fake_nsqlookupd import FakeNsqlookupd
from conformance.transcript import Transcript

HEARTBEAT_INTERVAL_MS = 1000  # the lowest nsqd accepts (ID-02): heartbeats in a case come from the case anyway
LOOKUPD_POLL_INTERVAL_MS = 1000  # the lowest every library takes (pynsq, gnsq and nsqjs count whole seconds)
# seconds for a driver's first connection or query: its interpreter, the library's imports and its first connect. A
# loaded 2-core machine was seen to take over 10 s for gnsq (gevent); a driver that exits ends the wait at once
STARTS_WITHIN_S = 30.0


class CaseRun:
    def __init__(self, driver: Driver, logs_dir: Path, case_name: str, proxy_factory=None):
        self.driver = driver
        self.transcript = Transcript()
        self.topic, self.channel = f"nsqc-{case_token()}", "conformance"
        self._logs_dir, self._case_name = logs_dir, case_name
        self._proxy_factory = proxy_factory  # the selftest's faulty proxy, between the client and every server
        self._proxies_shared: dict = {}  # what the case's proxies know together (a fault over several lookupds)
        self.brokers: list[FakeNsqd] = []
        self.lookupds: list[FakeNsqlookupd] = []
        self.proxies: list = []
        self.processes: list[DriverProcess] = []

    async def nsqd(self, msg_timeout_ms: int = 60_000) -> FakeNsqd:
        broker = await FakeNsqd(self.transcript, msg_timeout_ms).start()
        self.brokers.append(broker)
        return broker

    async def nsqlookupd(self) -> FakeNsqlookupd:
        lookupd = await FakeNsqlookupd(self.transcript, self.topic, f"L{len(self.lookupds) + 1}").start()
        self.lookupds.append(lookupd)
        return lookupd

    def _address(self, server: FakeNsqd | FakeNsqlookupd) -> str:
        """Where the client reaches ``server``: itself, or the selftest's faulty proxy in front of it."""
        if self._proxy_factory is None:
            return "%s:%d" % server.address
        for proxy in self.proxies:
            if proxy.upstream == server.address:
                return proxy.tcp_address
        raise LookupError("start_proxies() first")

    async def _start_proxies(self) -> None:
        if self._proxy_factory is None:
            return
        for server in [*self.brokers, *self.lookupds]:
            if not any(proxy.upstream == server.address for proxy in self.proxies):
                self.proxies.append(await self._proxy_factory(
                    server.address, self.transcript, http=isinstance(server, FakeNsqlookupd),
                    shared=self._proxies_shared).start())

    def dialed(self) -> dict[str, str]:
        """Each nsqd's own host:port -> the one the client reaches it at, where the selftest's proxy stands between."""
        return {"%s:%d" % proxy.upstream: proxy.tcp_address for proxy in self.proxies
                if any(proxy.upstream == broker.address for broker in self.brokers)}

    async def list_producers(self, lookupd: FakeNsqlookupd, *brokers: FakeNsqd) -> None:
        """From now on ``lookupd``'s /lookup lists these nsqds (as the client reaches them), and only these."""
        await self._start_proxies()
        lookupd.listed = [self._address(broker) for broker in brokers]
        self.transcript.note(f"/lookup lists {', '.join(lookupd.listed) or 'no producer'}", lookupd.name)

    async def consumer(self, *brokers: FakeNsqd, max_in_flight: int = 1, max_attempts: int = 0,
                       lookupds: tuple[FakeNsqlookupd, ...] = (), layers: tuple[str, ...] = (),
                       auth_secret: str | None = None, max_backoff_ms: int | None = None) -> DriverProcess:
        """A consumer's driver; ``layers`` (of "tls", "snappy", "deflate") are what it is told to ask for."""
        await self._start_proxies()
        lookup = {contract.LOOKUPD_HTTP_ADDRESSES: ",".join(map(self._address, lookupds)),
                  contract.LOOKUPD_POLL_INTERVAL_MS: str(LOOKUPD_POLL_INTERVAL_MS)} if lookupds else {}
        orders = {{"tls": contract.TLS, "snappy": contract.SNAPPY, "deflate": contract.DEFLATE}[layer]: "1"
                  for layer in layers}
        if "tls" in layers:
            orders[contract.TLS_CA_FILE] = str(CA_FILE)
        if auth_secret is not None:
            orders[contract.AUTH_SECRET] = auth_secret
        if max_backoff_ms is not None:
            orders[contract.MAX_BACKOFF_MS] = str(max_backoff_ms)
        return await self._driver({
            contract.ROLE: contract.CONSUMER, contract.NSQD_TCP_ADDRESSES: ",".join(map(self._address, brokers)),
            contract.TOPIC: self.topic, contract.CHANNEL: self.channel, contract.MAX_IN_FLIGHT: str(max_in_flight),
            contract.MAX_ATTEMPTS: str(max_attempts), contract.HEARTBEAT_INTERVAL_MS: str(HEARTBEAT_INTERVAL_MS),
            **lookup, **orders})

    async def publisher(self, broker: FakeNsqd, operations: list[dict]) -> DriverProcess:
        await self._start_proxies()
        return await self._driver({
            contract.ROLE: contract.PUBLISHER, contract.NSQD_TCP_ADDRESSES: self._address(broker),
            contract.TOPIC: self.topic, contract.HEARTBEAT_INTERVAL_MS: str(HEARTBEAT_INTERVAL_MS),
            contract.PUBLISH: json.dumps(operations)})

    async def _driver(self, orders: dict[str, str]) -> DriverProcess:
        log = self._logs_dir / f"{self._case_name}.{len(self.processes) + 1}.log"
        process = DriverProcess(self.driver, self.transcript, log)
        process.on_exit += [broker.client_exited for broker in self.brokers]
        await process.start(orders)
        self.processes.append(process)
        return process

    async def subscribed(self, broker: FakeNsqd, **settings):
        """A consumer on ``broker`` that has sent SUB and its first RDY: its driver and its connection."""
        process = await self.consumer(broker, **settings)
        connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
        await connection.subscribed(timeout=10.0)
        return process, connection

    async def close(self) -> None:
        for process in self.processes:
            await process.stop()
        for proxy in self.proxies:
            await proxy.close()
        for broker in self.brokers:
            await broker.close()
        for lookupd in self.lookupds:
            await lookupd.close()
