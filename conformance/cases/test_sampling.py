"""Sampling (D-45, ID-06 in conformance/spec/)."""

import time

import pytest

from conformance import wire

requirement = pytest.mark.requirement


@requirement("NSQ-SAMPLE-001")
def test_sample_rate_keeps_about_that_share(nsq):
    """sample_rate 10, 300 messages (MPUBs of 100) to a consumer that FINs each at once: about 11 % arrive
    ((S+1)/100: 33 expected; 8..70 allowed, each bound over 4 standard deviations away), each with attempts 1, and
    the channel keeps none of the others (D-45; no recording: the draw is random)."""
    topic, count = nsq.topic(), 300
    consumer = nsq.connect()
    consumer.identify({"sample_rate": 10})
    consumer.subscribe(topic, "c", ready=min(count, nsq.limits["max_rdy_count"]))
    producer = nsq.connect()
    for batch in range(0, count, 100):
        bodies = [b"s%03d" % number for number in range(batch, batch + 100)]
        producer.command("MPUB", topic, body=wire.mpub_body(bodies))
        producer.expect_response(b"OK")
    deliveries = []
    deadline = time.monotonic() + nsq.seconds(1.5)
    while time.monotonic() < deadline:
        for frame in consumer.poll(deadline - time.monotonic()):
            deliveries.append(frame)
            consumer.command("FIN", frame.id_text)
    nsq.verify.that("sampled share of 300 messages at sample_rate 10 (D-45: 33 expected)",
                    8 <= len(deliveries) <= 70, "8..70", len(deliveries))
    nsq.verify.equal("attempts of the sampled messages", {1}, {frame.attempts for frame in deliveries})
    channel = nsq.http.channel_stats(topic, "c") if nsq.http.address else None
    if channel is not None:
        nsq.verify.equal("channel depth: the messages sampled out are gone, not queued (D-45)", 0, channel["depth"])
