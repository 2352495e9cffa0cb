"""What a case's application asked of the library under test, for the monitors (nsq_protocol.monitors.Application):
what its drivers were told (the contract's environment), the requeue delay, default max attempts, fixed poll
interval and reconnect delay the driver's manifest documents, and the handler's order in each message body the fake
nsqds sent. A setting the library lacks (the manifest's ``lacks``) is left unknown: the library does not take it, so
nothing is judged against it."""
from __future__ import annotations

import json

from conformance.clients import contract
from conformance.clients.driver import Driver
from conformance.transcript import SERVER_TO_CLIENT, Transcript
from nsq_protocol import wire
from nsq_protocol.monitors.application import LAYERS, Application, Order, Publish
from nsq_protocol.monitors.events import MESSAGE, body_hash

LAYER_ORDERS = dict(zip((contract.TLS, contract.SNAPPY, contract.DEFLATE), LAYERS, strict=True))


def application(driver: Driver, told: list[dict[str, str]], transcript: Transcript) -> Application:
    """``told``: each driver process's orders, in the case's order (one consumer and one publisher at most)."""
    consumer = next((orders for orders in told if orders.get(contract.ROLE) == contract.CONSUMER), {})
    publisher = next((orders for orders in told if orders.get(contract.ROLE) == contract.PUBLISHER), {})
    intervals = {orders.get(contract.HEARTBEAT_INTERVAL_MS) for orders in told}
    layers = {frozenset(LAYER_ORDERS[key] for key in LAYER_ORDERS if orders.get(key) == "1") for orders in told}
    return Application(
        topic=(consumer or publisher).get(contract.TOPIC),
        channel=consumer.get(contract.CHANNEL),
        heartbeat_interval_ms=int(intervals.pop()) if len(intervals) == 1 and None not in intervals else None,
        layers=layers.pop() if len(layers) == 1 else None,
        max_in_flight=_setting(driver, "max_in_flight", consumer.get(contract.MAX_IN_FLIGHT)),
        max_attempts=_setting(driver, "max_attempts", consumer.get(contract.MAX_ATTEMPTS)) or driver.max_attempts,
        requeue_delay_ms=driver.requeue_delay_ms,
        max_backoff_ms=_setting(driver, "max_backoff", consumer.get(contract.MAX_BACKOFF_MS)),
        publishes=_publishes(driver, publisher) if publisher else None,
        orders=_orders(driver, transcript) if consumer else {},
        **_lookup(driver, consumer), **_reconnect(driver, consumer, publisher))


def _lookup(driver: Driver, consumer: dict[str, str]) -> dict:
    """How many lookupds the consumer was given and how often it polls them: as told, or the library's own."""
    given = [address for address in consumer.get(contract.LOOKUPD_HTTP_ADDRESSES, "").split(",") if address]
    if not given or "lookupd" in driver.lacks:
        return {}
    return {"lookupds": len(given), "lookupd_poll_interval_ms": driver.lookupd_poll_interval_ms
            or int(consumer[contract.LOOKUPD_POLL_INTERVAL_MS])}


def _reconnect(driver: Driver, consumer: dict[str, str], publisher: dict[str, str]) -> dict:
    """The reconnect delay the library documents, for a consumer given its nsqds' addresses (not lookupds, which it
    reconnects through) alone on them: a publisher's connections would look like the consumer's reconnects."""
    if not consumer.get(contract.NSQD_TCP_ADDRESSES) or consumer.get(contract.LOOKUPD_HTTP_ADDRESSES) or publisher \
            or driver.reconnect_delay is None:
        return {}
    return {"reconnect_min_ms": driver.reconnect_delay["min_ms"],
            "reconnect_since": driver.reconnect_delay.get("since", "close")}


def _setting(driver: Driver, feature: str, value: str | None) -> int | None:
    """A number the consumer was told, unless the library lacks the feature or was left to its default (0)."""
    return int(value) if value and int(value) > 0 and feature not in driver.lacks else None


def _publishes(driver: Driver, publisher: dict[str, str]) -> frozenset[Publish] | None:
    topic, operations = publisher[contract.TOPIC], json.loads(publisher.get(contract.PUBLISH) or "[]")
    if any(operation["op"] in driver.lacks for operation in operations):
        return None  # the driver does it some other way (nest-nsq-transport: an MPUB as PUBs)
    return frozenset(
        Publish("MPUB", topic, tuple(body_hash(body.encode()) for body in operation["bodies"]))
        if operation["op"] == "mpub" else
        Publish(operation["op"].upper(), topic, (body_hash(operation["body"].encode()),), operation.get("defer_ms"))
        for operation in operations)


def _orders(driver: Driver, transcript: Transcript) -> dict[int, Order]:
    """The handler's order in each message body sent (the contract's instructions); touches only where the library
    can touch."""
    orders = {}
    for event in transcript.events:
        if event.direction != SERVER_TO_CLIENT or not any(seen.kind == MESSAGE for seen in event.observed):
            continue
        for frame in wire.FrameDecoder().feed(event.wire):
            order = _order(frame.body)
            if order is not None and not (order.action == contract.TOUCH and "touch" in driver.lacks):
                orders[body_hash(frame.body)] = order
    return orders


def _order(body: bytes) -> Order | None:
    try:
        instruction = json.loads(body)
    except ValueError:
        return None
    if not isinstance(instruction, dict) or instruction.get("do") not in (contract.FINISH, contract.REQUEUE,
                                                                          contract.TOUCH, contract.FAIL):
        return None
    return Order(instruction["do"], instruction.get("delay_ms"), instruction.get("times"))
