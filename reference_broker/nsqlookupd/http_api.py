"""nsqlookupd's HTTP API (nsqlookupd/http.go; the L-HTTP-* items of conformance/spec/nsqlookupd.toml), on the same
router and response styles as nsqd's (http_router.py, Go's internal/http_api): one function per route, each taking a
`Request` and returning what nsqlookupd's handler returns, or raising `HTTPError` with its status and code."""
from __future__ import annotations

from .. import pprof
from ..http_router import PLAIN, V1, HTTPError, Request
from ..wire import is_valid_name
from .options import VERSION
from .registration_db import Registration


def _param(request: Request, name: str) -> str:
    """The first value of a query parameter, or HTTPError(400, MISSING_ARG_<NAME>); a query that does not
    parse is INVALID_REQUEST (L-HTTP-04)."""
    values = request.query().get(name)
    if not values:
        raise HTTPError(400, f"MISSING_ARG_{name.upper()}")
    return values[0]


def _valid(name: str) -> bool:
    return is_valid_name(name.encode("utf-8", "surrogateescape"))


def _topic_channel(request: Request) -> tuple[str, str]:
    """Go's http_api.GetTopicChannelArgs: the topic checked before the channel (L-HTTP-09)."""
    query = request.query()
    topic = (query.get("topic") or [None])[0]
    if topic is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not _valid(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel = (query.get("channel") or [None])[0]
    if channel is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not _valid(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _ping(request: Request) -> str:
    return "OK"  # L-HTTP-01


def _info(request: Request) -> dict:
    return {"version": VERSION}  # L-HTTP-02


def _topics(request: Request) -> dict:
    db = request.nsqlookupd.db
    return {"topics": [r.key for r in db.find_registrations("topic", "*", "")]}  # L-HTTP-05


def _channels(request: Request) -> dict:
    topic = _param(request, "topic")  # L-HTTP-06
    return {"channels": [r.subkey for r in request.nsqlookupd.db.find_registrations("channel", topic, "*")]}


def _lookup(request: Request) -> dict:
    """L-HTTP-04: the topic's channels and its active, non-tombstoned producers; the name is not validated."""
    lookupd = request.nsqlookupd
    topic = _param(request, "topic")
    if not lookupd.db.find_registrations("topic", topic, ""):
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    channels = [r.subkey for r in lookupd.db.find_registrations("channel", topic, "*")]
    options = lookupd.options
    producers = [p.peer_info.public() for p in lookupd.db.find_producers("topic", topic, "")
                 if p.is_active(options.inactive_producer_timeout, options.tombstone_lifetime)]
    return {"channels": channels, "producers": producers}


def _topic_create(request: Request) -> None:
    topic = _param(request, "topic")  # L-HTTP-08
    if not _valid(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    request.nsqlookupd.log.info("DB: adding topic(%s)", topic)
    request.nsqlookupd.db.add_registration(Registration("topic", topic, ""))


def _topic_delete(request: Request) -> None:
    """L-HTTP-11: the topic and its channels, with their producers; an unknown topic is no error."""
    db, log = request.nsqlookupd.db, request.nsqlookupd.log
    topic = _param(request, "topic")
    for registration in db.find_registrations("channel", topic, "*"):
        log.info("DB: removing channel(%s) from topic(%s)", registration.subkey, topic)
        db.remove_registration(registration)
    for registration in db.find_registrations("topic", topic, ""):
        log.info("DB: removing topic(%s)", topic)
        db.remove_registration(registration)


def _topic_tombstone(request: Request) -> None:
    """L-HTTP-12: hides the producer whose broadcast_address:http_port is `node` from this topic's lookups."""
    db = request.nsqlookupd.db
    topic = _param(request, "topic")
    node = _param(request, "node")
    request.nsqlookupd.log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
    for producer in db.find_producers("topic", topic, ""):
        if f"{producer.peer_info.broadcast_address}:{producer.peer_info.http_port}" == node:
            producer.tombstone()


def _channel_create(request: Request) -> None:
    db, log = request.nsqlookupd.db, request.nsqlookupd.log
    topic, channel = _topic_channel(request)  # L-HTTP-09
    log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
    db.add_registration(Registration("channel", topic, channel))
    log.info("DB: adding topic(%s)", topic)
    db.add_registration(Registration("topic", topic, ""))


def _channel_delete(request: Request) -> None:
    db = request.nsqlookupd.db
    topic, channel = _topic_channel(request)  # L-HTTP-10
    registrations = db.find_registrations("channel", topic, channel)
    if not registrations:
        raise HTTPError(404, "CHANNEL_NOT_FOUND")
    request.nsqlookupd.log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
    for registration in registrations:
        db.remove_registration(registration)


def _nodes(request: Request) -> dict:
    """L-HTTP-07: every active IDENTIFYed producer (tombstoned ones too), with its topics and, per topic,
    whether it is tombstoned there."""
    lookupd = request.nsqlookupd
    db, options = lookupd.db, lookupd.options
    nodes = []
    for client in db.find_producers("client", "", ""):
        peer = client.peer_info
        if not client.is_active(options.inactive_producer_timeout, 0):
            continue
        topics = [r.key for r in db.lookup_registrations(peer.id) if r.matches("topic", "*", "")]
        tombstones = []
        for topic in topics:
            same = [p for p in db.find_producers("topic", topic, "") if p.peer_info is peer]
            tombstones.append(bool(same) and same[0].is_tombstoned(options.tombstone_lifetime))
        nodes.append({**peer.public(), "tombstones": tombstones, "topics": topics})
    return {"producers": nodes}


def _debug(request: Request) -> dict:
    """L-HTTP-13: every registration that has producers, keyed `category:key:subkey` (none yet: {}, L-HTTP-03)."""
    data: dict[str, list] = {}
    for registration, producers in request.nsqlookupd.db.snapshot():
        for producer in producers:
            peer = producer.peer_info
            data.setdefault(":".join(registration), []).append({
                "id": peer.id, "hostname": peer.hostname, "broadcast_address": peer.broadcast_address,
                "tcp_port": peer.tcp_port, "http_port": peer.http_port, "version": peer.version,
                "topology_zone": peer.topology_zone, "topology_region": peer.topology_region,
                "last_update": peer.last_update, "tombstoned": producer.tombstoned,
                "tombstoned_at": producer.tombstoned_at,
            })
    return data


ROUTES = [
    ("GET", "/ping", _ping, PLAIN),
    ("GET", "/info", _info, V1),
    ("GET", "/debug", _debug, V1),
    ("GET", "/lookup", _lookup, V1),
    ("GET", "/topics", _topics, V1),
    ("GET", "/channels", _channels, V1),
    ("GET", "/nodes", _nodes, V1),
    ("POST", "/topic/create", _topic_create, V1),
    ("POST", "/topic/delete", _topic_delete, V1),
    ("POST", "/channel/create", _channel_create, V1),
    ("POST", "/channel/delete", _channel_delete, V1),
    ("POST", "/topic/tombstone", _topic_tombstone, V1),
    *pprof.routes("/debug/pprof"),  # L-HTTP-18
]
