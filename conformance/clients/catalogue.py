"""The client requirements, NSQC-<SEC>-NNN: what nsqd requires of a client and what the official clients document,
items of the behaviour catalogue (conformance/spec/clients.toml: level, text, observable, source). One case per
requirement, named by it (cases/)."""
from __future__ import annotations

from conformance.catalogue import Requirement
from conformance.spec import behaviours

SECTIONS = {"NSQC-CONN": "magic and IDENTIFY", "NSQC-HB": "heartbeats", "NSQC-RDY": "RDY and flow control",
            "NSQC-MSG": "FIN / REQ / TOUCH", "NSQC-ERR": "errors and reconnection", "NSQC-CLS": "stopping",
            "NSQC-PUB": "publishing", "NSQC-LOOKUP": "nsqlookupd discovery",
            "NSQC-NEG": "negotiation: TLS, snappy, deflate, AUTH"}

REQUIREMENTS = {item.id: Requirement(item.id, item.level, item.text, item.source, ())
                for item in behaviours().values() if item.id.startswith("NSQC-")}
