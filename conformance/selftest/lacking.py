"""A broker that lacks what nsqd has, as independent brokers do: it creates no topic on first use (PUB, MPUB, DPUB and
SUB of a topic nobody created answer E_TOPIC_NOT_EXIST) and has no DPUB (E_INVALID). Not a bug once its profile says
so (capabilities topic_autocreate = false, dpub = false, and a [setup] that creates topics): the suite must then
judge everything else, and say UNSUPPORTED where a case needs what it lacks. Two ``FaultyProxy``s share it, one in
front of the broker's TCP port and one in front of its HTTP port, which sees the topics created."""

from __future__ import annotations

from urllib.parse import unquote

from conformance.selftest.faults import VALID_NAME, Fault, HttpRequest
from nsq_protocol import wire

_created: set[bytes] = set()  # topics created over HTTP, by any proxy of this process


def _needs_topic(command: wire.Command, session) -> bytes | None:
    if command.name == b"DPUB":
        session.to_client(wire.encode_frame(wire.FRAME_ERROR, b"E_INVALID invalid command DPUB"))
        return b""
    if command.name in (b"PUB", b"MPUB", b"SUB") and command.params and command.params[0] not in _created \
            and VALID_NAME.fullmatch(command.params[0]):  # a bad name is refused as such first
        topic = command.params[0]
        session.to_client(wire.encode_frame(wire.FRAME_ERROR, b"E_TOPIC_NOT_EXIST topic %s does not exist" % topic))
        return b""
    return None


def _remember_created(request: HttpRequest, session) -> None:
    """Lets every request through; notes the topics it creates."""
    if request.method == "POST" and request.path == "/topic/create":
        for pair in request.target.partition("?")[2].split("&"):
            key, _, value = pair.partition("=")
            if key == "topic":
                _created.add(unquote(value).encode())
    return None


WITHOUT_AUTOCREATE_OR_DPUB = Fault(
    "without-autocreate-or-dpub", "capabilities", "no topic auto-creation, no DPUB (an independent broker's design)",
    "E_TOPIC_NOT_EXIST on PUB/MPUB/SUB of a topic not created over HTTP; E_INVALID on DPUB", (),
    command=_needs_topic, request=_remember_created)
