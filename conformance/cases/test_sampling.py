"""Sampling (D-45, ID-06 in conformance/spec/)."""

import time

import pytest

from nsq_protocol import wire

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
            nsq.verify.that("only message frames arrive", frame.frame_type == wire.FRAME_MESSAGE, "MESSAGE",
                            frame.describe())
            deliveries.append(frame)
            consumer.command("FIN", frame.id_text)
    nsq.verify.that("sampled share of 300 messages at sample_rate 10 (D-45: 33 expected)",
                    8 <= len(deliveries) <= 70, "8..70", len(deliveries))
    nsq.verify.equal("attempts of the sampled messages", {1}, {frame.attempts for frame in deliveries})
    channel = nsq.http.channel_stats(topic, "c") if nsq.http.address else None
    if channel is not None:
        nsq.verify.equal("channel depth: the messages sampled out are gone, not queued (D-45)", 0, channel["depth"])


@requirement("NSQ-SAMPLE-002")
def test_sampling_drops_only_the_sampling_consumers_messages(nsq):
    """Two consumers of one channel, one with sample_rate 1 (RDY 100), the other without (RDY 1): of each of 12
    MPUBs of two messages the second gets one (D-45: sampling drops what the sampling client's pump takes, so the
    other's share is untouched). At least 10 of the 12 rounds; a broker that lets the sampler's dropped share
    take the other consumer's with it delivers to it in about half."""
    topic, rounds = nsq.topic(), 12
    sampler, plain, producer = nsq.connect(), nsq.connect(), nsq.connect()
    sampler.identify({"sample_rate": 1})
    sampler.subscribe(topic, "c", ready=min(100, nsq.limits["max_rdy_count"]))
    plain.subscribe(topic, "c", ready=1)
    served = 0
    for number in range(rounds):
        producer.command("MPUB", topic, body=wire.mpub_body([b"r%02d-1" % number, b"r%02d-2" % number]))
        producer.expect_response(b"OK")
        messages = [frame for frame in plain.poll(0.5) if frame.frame_type == wire.FRAME_MESSAGE]
        for message in messages:
            plain.command("FIN", message.id_text)
        served += bool(messages)
        nsq.wait(0.05, "the consumer's FIN makes it ready again before the next MPUB")
    nsq.verify.that(f"rounds of {rounds} in which the consumer without sampling got a message (D-45)",
                    served >= rounds - 2, f">= {rounds - 2}", served)
