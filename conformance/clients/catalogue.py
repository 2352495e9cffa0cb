"""The client requirements, NSQC-<SEC>-NNN: what nsqd requires of a client (nsqd-behavior.md's IDs in `source`)
and what the official clients document. One case per requirement, named by it (cases/)."""
from __future__ import annotations

from conformance.catalogue import Requirement
from conformance.clients.judge import MAY, MUST, SHOULD


def requirement(identifier: str, level: str, text: str, source: str) -> Requirement:
    """A client requirement, of the broker catalogue's kind (its section: ``NSQC-CONN``); no recordings."""
    return Requirement(identifier, level, text, source, ())


SECTIONS = {"NSQC-CONN": "magic and IDENTIFY", "NSQC-HB": "heartbeats", "NSQC-RDY": "RDY and flow control",
            "NSQC-MSG": "FIN / REQ / TOUCH", "NSQC-ERR": "errors and reconnection", "NSQC-CLS": "stopping",
            "NSQC-PUB": "publishing", "NSQC-LOOKUP": "nsqlookupd discovery",
            "NSQC-NEG": "negotiation: TLS, snappy, deflate, AUTH"}

REQUIREMENTS = {entry.id: entry for entry in (
    requirement("NSQC-CONN-001", MUST, "a connection starts with the 4-byte magic '  V2'", "C-01, C-02"),
    requirement("NSQC-CONN-002", MUST, "IDENTIFY comes before SUB, with a JSON object body", "C-18, ID-09"),
    requirement("NSQC-CONN-003", SHOULD, "IDENTIFY names the client (client_id, hostname, user_agent) and "
                "asks for feature negotiation", "ID-01, ID-09; go-nsq Config"),
    requirement("NSQC-CONN-004", SHOULD, "IDENTIFY carries the heartbeat interval the user configured",
                "ID-02, C-32; go-nsq Config.HeartbeatInterval"),
    requirement("NSQC-CONN-005", MUST, "a consumer subscribes with SUB <topic> <channel> as configured", "P-SUB-01"),
    requirement("NSQC-HB-001", MUST, "a consumer answers every heartbeat with NOP within 1 s", "C-26, C-29"),
    requirement("NSQC-HB-002", MUST, "a publisher's connection answers heartbeats with NOP too", "C-28"),
    requirement("NSQC-RDY-001", MUST, "the first RDY after SUB is between 1 and max_in_flight",
                "P-RDY-02, section 4.1"),
    requirement("NSQC-RDY-002", MUST, "over two nsqds, the RDY counts add up to at most max_in_flight and "
                "each connection gets RDY > 0 within 8 s", "go-nsq Consumer, pynsq Reader: RDY distribution"),
    requirement("NSQC-RDY-003", SHOULD, "after a failed message the consumer backs off (RDY 0), then "
                "recovers (RDY > 0) within its backoff", "go-nsq backoff, pynsq Reader backoff"),
    requirement("NSQC-MSG-001", MUST, "a finished message is answered FIN <its id>", "P-FIN-01"),
    requirement("NSQC-MSG-002", MUST, "a requeue is REQ <its id> <the delay asked, in ms>", "P-REQ-02"),
    requirement("NSQC-MSG-003", MUST, "TOUCH <its id> as often as the handler touches, then FIN", "P-TOUCH-02"),
    requirement("NSQC-MSG-004", MUST, "a failed handler requeues the message (REQ <its id>) instead of letting it "
                "time out", "P-REQ-02; go-nsq, pynsq: a handler error requeues"),
    requirement("NSQC-MSG-005", SHOULD, "a message over max_attempts is finished without reaching the handler",
                "go-nsq Config.MaxAttempts, pynsq max_tries"),
    requirement("NSQC-ERR-001", MUST, "E_FIN_FAILED is non-fatal: the connection stays and the next message is "
                "handled on it", "C-23 (the three non-fatal errors)"),
    requirement("NSQC-ERR-002", MUST, "E_REQ_FAILED is non-fatal as well", "C-23"),
    requirement("NSQC-ERR-003", MUST, "E_TOUCH_FAILED is non-fatal as well", "C-23"),
    requirement("NSQC-ERR-004", SHOULD, "after the broker closes on a fatal error, the consumer reconnects to "
                "that nsqd (magic, IDENTIFY, SUB) within 20 s", "C-23; go-nsq, pynsq: reconnect to nsqd addresses"),
    requirement("NSQC-CLS-001", SHOULD, "a consumer told to stop sends CLS and waits for CLOSE_WAIT before it "
                "closes", "P-CLS-02; go-nsq Consumer.Stop"),
    requirement("NSQC-CLS-002", MUST, "a consumer told to stop closes its connection within 5 s", "P-CLS-02"),
    requirement("NSQC-PUB-001", MUST, "PUB <topic> with the body unchanged, after IDENTIFY", "P-PUB-01"),
    requirement("NSQC-PUB-002", MUST, "MPUB <topic> with the count and every body unchanged", "P-MPUB-02"),
    requirement("NSQC-PUB-003", MAY, "DPUB <topic> <defer ms> with the body unchanged", "section 2.6"),
    requirement("NSQC-PUB-004", MUST, "an error answer to PUB reaches the caller as a failure", "P-PUB-02, C-23"),
    requirement("NSQC-LOOKUP-001", MUST, "a consumer given a lookupd asks GET /lookup?topic=<its topic> and "
                "connects to (SUB on) every producer listed", "L-HTTP-04; go-nsq ConnectToNSQLookupd"),
    requirement("NSQC-LOOKUP-002", SHOULD, "it polls /lookup again at the interval configured (1 s: 3 to 10 "
                "queries in the 5 s after the first)", "go-nsq Config.LookupdPollInterval, pynsq "
                "lookupd_poll_interval"),
    requirement("NSQC-LOOKUP-003", MUST, "a producer that appears on /lookup later is connected to within 6 s",
                "L-TCP-18; go-nsq, pynsq: lookupd polling finds new producers"),
    requirement("NSQC-LOOKUP-004", SHOULD, "a producer gone from /lookup (tombstoned) that closes its connection "
                "is not connected to again while /lookup leaves it out", "L-HTTP-12; go-nsq Consumer: no "
                "reconnect to lookupd-discovered nsqds"),
    requirement("NSQC-LOOKUP-005", MUST, "with two lookupds, the first down throughout, the consumer connects to "
                "the producer the second lists within 6 s of the second coming up",
                "go-nsq ConnectToNSQLookupds, pynsq lookupd_http_addresses: several lookupds"),
    requirement("NSQC-LOOKUP-006", SHOULD, "a lookupd down when the consumer starts: the consumer keeps polling "
                "and connects to its producer within 6 s of the lookupd coming back", "go-nsq lookupdLoop, "
                "pynsq query_lookupd: a failed query is retried at the next poll"),
    requirement("NSQC-NEG-001", MUST, "a consumer told to ask for no layer asks for none: IDENTIFY's tls_v1, "
                "snappy and deflate are not true (the broker offers all three)", "ID-09, ID-30"),
    requirement("NSQC-NEG-002", SHOULD, "an IDENTIFY answer turning on snappy, which the client did not ask for, "
                "is refused: no snappy stream from the client (it closes, or stays in plain text)",
                "ID-30; go-nsq, pynsq: the answer agrees to what was asked"),
    requirement("NSQC-NEG-003", MAY, "snappy: IDENTIFY asks for it, then SUB, RDY and FIN come through the "
                "snappy framing format, both ways", "ID-30, ID-34; go-nsq Config.Snappy"),
    requirement("NSQC-NEG-004", MAY, "deflate: IDENTIFY asks for it, then SUB, RDY and FIN come through raw "
                "deflate, both ways", "ID-30, ID-33; go-nsq Config.Deflate"),
    requirement("NSQC-NEG-005", MAY, "TLS: IDENTIFY asks for tls_v1, the client handshakes at once (trusting the "
                "CA it was given), then SUB, RDY and FIN come through TLS", "ID-30, ID-31; go-nsq Config.TlsV1"),
    requirement("NSQC-NEG-006", MAY, "AUTH: when the IDENTIFY answer says auth_required, AUTH <the secret> comes "
                "before SUB, and the consumer then works", "P-AUTH-08, P-AUTH-09, P-AUTH-14; go-nsq "
                "Config.AuthSecret"),
)}
