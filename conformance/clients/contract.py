"""The driver contract: what the conformance broker tells a driver, and what a driver tells it back.

A driver is a small program per client library, in the library's own language. It reads its orders from
environment variables, reports what its library did as JSON lines on stdout, and stops on SIGTERM. The message
bodies the fake nsqd sends are JSON objects that tell the driver's message handler what to do. Nothing here
names a library: the same contract drives pynsq, nsqjs or go-nsq (README.md, "The driver contract")."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# ---- orders: environment variables ------------------------------------------------------------------------------
ROLE = "NSQC_ROLE"  # "consumer" or "publisher"
NSQD_TCP_ADDRESSES = "NSQC_NSQD_TCP_ADDRESSES"  # host:port[,host:port...]; empty when the consumer uses lookupds
LOOKUPD_HTTP_ADDRESSES = "NSQC_LOOKUPD_HTTP_ADDRESSES"  # consumer only, optional: host:port[,...] of nsqlookupds
LOOKUPD_POLL_INTERVAL_MS = "NSQC_LOOKUPD_POLL_INTERVAL_MS"  # with LOOKUPD_HTTP_ADDRESSES: how often to poll /lookup
TOPIC = "NSQC_TOPIC"
CHANNEL = "NSQC_CHANNEL"  # consumer only
MAX_IN_FLIGHT = "NSQC_MAX_IN_FLIGHT"  # consumer only
MAX_ATTEMPTS = "NSQC_MAX_ATTEMPTS"  # consumer only; 0 = the library's default
MAX_BACKOFF_MS = "NSQC_MAX_BACKOFF_MS"  # consumer only, optional: the longest backoff; absent: the library's default
HEARTBEAT_INTERVAL_MS = "NSQC_HEARTBEAT_INTERVAL_MS"
PUBLISH = "NSQC_PUBLISH"  # publisher only: a JSON list of operations, done one after the other
# consumer only, optional: ask nsqd for these layers (ID-30) and send AUTH when the IDENTIFY answer requires it
TLS = "NSQC_TLS"  # "1": ask for TLS (tls_v1), trusting the CA in TLS_CA_FILE
TLS_CA_FILE = "NSQC_TLS_CA_FILE"  # PEM file of the CA the broker's certificate (CN and SAN 127.0.0.1) chains to
SNAPPY = "NSQC_SNAPPY"  # "1": ask for snappy compression
DEFLATE = "NSQC_DEFLATE"  # "1": ask for deflate compression
AUTH_SECRET = "NSQC_AUTH_SECRET"  # the secret to AUTH with

CONSUMER, PUBLISHER = "consumer", "publisher"

# ---- publisher operations (PUBLISH) -----------------------------------------------------------------------------
# {"op": "pub", "body": str}  {"op": "mpub", "bodies": [str, ...]}  {"op": "dpub", "defer_ms": int, "body": str}

# ---- handler instructions: a message body is a JSON object ------------------------------------------------------
FINISH = "fin"  # finish it
REQUEUE = "req"  # requeue it with "delay_ms", without backoff
TOUCH = "touch"  # touch it "times" times, "every_ms" apart, then finish it
FAIL = "fail"  # report failure the library's ordinary way (pynsq: return False), which requeues it


def instruction(action: str, tag: int = 0, **arguments) -> bytes:
    """A message body: the action, a tag that makes equal instructions different messages, the arguments."""
    return json.dumps({"do": action, "tag": tag, **arguments}, separators=(",", ":")).encode()


# ---- reports: JSON lines on stdout ------------------------------------------------------------------------------
# {"event": "message", "id": str, "attempts": int, "body": str}   the handler got a message
# {"event": "published", "op": str, "ok": bool, "error": str}     a publish operation ended (error when not ok)
# {"event": "discarded", "id": str, "attempts": int}              optional: the library gave a message up
# {"event": "stopped"}                                            the library was told to stop and has stopped


@dataclass
class Report:
    event: str
    at: float  # seconds since the case's transcript started
    fields: dict = field(default_factory=dict)

    def __getitem__(self, key):
        return self.fields[key]

    def get(self, key, default=None):
        return self.fields.get(key, default)
