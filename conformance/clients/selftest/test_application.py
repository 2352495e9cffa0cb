"""What the monitors are told of a case's application (application.py): the drivers' orders, the manifest's requeue
delay, default max attempts and fixed poll interval, the handler's order in each message body sent; a setting the
library lacks, or left to a default its manifest does not document, unknown."""
from conformance.clients import contract
from conformance.clients.application import application
from conformance.clients.driver import drivers
from conformance.transcript import SERVER_TO_CLIENT, Transcript
from nsq_protocol import monitors, wire
from nsq_protocol.monitors.application import Order, Publish
from nsq_protocol.monitors.events import body_hash

CONSUMER = {contract.ROLE: contract.CONSUMER, contract.TOPIC: "t", contract.CHANNEL: "c",
            contract.MAX_IN_FLIGHT: "3", contract.MAX_ATTEMPTS: "0", contract.HEARTBEAT_INTERVAL_MS: "1000",
            contract.SNAPPY: "1"}
PUBLISHER = {contract.ROLE: contract.PUBLISHER, contract.TOPIC: "t", contract.HEARTBEAT_INTERVAL_MS: "1000",
             contract.PUBLISH: '[{"op": "pub", "body": "x"}, {"op": "dpub", "defer_ms": 5, "body": "y"}]'}


def sent(*bodies: bytes) -> Transcript:
    transcript = Transcript()
    for number, body in enumerate(bodies):
        frame = wire.Frame(wire.FRAME_MESSAGE, wire.encode_message(0, 1, b"%016d" % number, body))
        transcript.record("A", SERVER_TO_CLIENT, [frame.describe()], frame.encode(),
                          observed=(monitors.from_frame(0.0, frame),))
    return transcript


def test_a_consumer_told_its_settings_and_its_handler_orders():
    req, touch = contract.instruction(contract.REQUEUE, delay_ms=1500), contract.instruction(contract.TOUCH, times=2)
    told = application(drivers()["pynsq"], [CONSUMER], sent(req, touch, b"not an order"))
    assert (told.topic, told.channel, told.heartbeat_interval_ms, told.max_in_flight) == ("t", "c", 1000, 3)
    assert told.layers == frozenset({"snappy"}) and told.publishes is None
    assert told.max_attempts == 5, "left to the library: pynsq's documented max_tries"
    assert told.handled(6) is False and told.handled(5) is True
    assert told.orders == {body_hash(req): Order("req", 1500), body_hash(touch): Order("touch", touches=2)}
    assert told.requeue_delay_ms(2) == 180_000


def test_max_attempts_told_or_left_to_a_default_documented_or_not():
    assert application(drivers()["pynsq"], [{**CONSUMER, contract.MAX_ATTEMPTS: "3"}], Transcript()).max_attempts == 3
    unlimited = application(drivers()["nsqjs"], [CONSUMER], Transcript())
    assert unlimited.max_attempts == 0 and unlimited.handled(100) is True
    undocumented = application(drivers()["asyncnsq"], [CONSUMER], Transcript())
    assert undocumented.max_attempts is None and undocumented.handled(2) is None


def test_a_consumer_on_lookupds_told_how_many_and_how_often():
    on_lookupds = {**CONSUMER, contract.LOOKUPD_HTTP_ADDRESSES: "127.0.0.1:1,127.0.0.1:2",
                   contract.LOOKUPD_POLL_INTERVAL_MS: "1000"}
    told = application(drivers()["pynsq"], [on_lookupds], Transcript())
    assert (told.lookupds, told.lookupd_poll_interval_ms) == (2, 1000)
    assert application(drivers()["nsq-py"], [on_lookupds], Transcript()).lookupd_poll_interval_ms == 60_000, \
        "nsq-py polls every 60 s whatever it is told"
    assert application(drivers()["pynsq"], [CONSUMER], Transcript()).lookupds is None


def test_what_the_library_lacks_is_not_told():
    touch = contract.instruction(contract.TOUCH, times=2)
    told = application(drivers()["aonsq"], [CONSUMER, PUBLISHER], sent(touch))
    assert told.max_in_flight is None and told.orders == {}
    assert told.publishes is None, "aonsq has no DPUB: the driver publishes some other way"
    assert told.layers is None, "the consumer and the publisher were told different layers"


def test_a_publisher_told_its_publishes():
    told = application(drivers()["pynsq"], [PUBLISHER], Transcript())
    assert told.publishes == {Publish("PUB", "t", (body_hash(b"x"),)), Publish("DPUB", "t", (body_hash(b"y"),), 5)}
    assert told.layers == frozenset() and told.channel is None
