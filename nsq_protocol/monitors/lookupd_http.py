"""nsqlookupd's HTTP API judged per exchange where the answer depends on the request alone
(conformance/spec/nsqlookupd.toml, L-HTTP-*): its table of routes and methods (nsqlookupd/http.go: newHTTPServer,
an httprouter with HandleMethodNotAllowed), /ping and /info."""

from __future__ import annotations

import json

from nsq_protocol.monitors.events import BROKER
from nsq_protocol.monitors.lookupd_judge import HttpExchange
from nsq_protocol.monitors.monitor import Monitor

# path -> the methods routed to it (v1.3.0); the router answers OPTIONS itself (L-HTTP-20)
ROUTES = {
    "/ping": ("GET",), "/info": ("GET",), "/debug": ("GET",), "/lookup": ("GET",), "/topics": ("GET",),
    "/channels": ("GET",), "/nodes": ("GET",), "/topic/create": ("POST",), "/topic/delete": ("POST",),
    "/channel/create": ("POST",), "/channel/delete": ("POST",), "/topic/tombstone": ("POST",),
    "/debug/pprof": ("GET",), "/debug/pprof/cmdline": ("GET",), "/debug/pprof/symbol": ("GET", "POST"),
    "/debug/pprof/profile": ("GET",), "/debug/pprof/heap": ("GET",), "/debug/pprof/goroutine": ("GET",),
    "/debug/pprof/block": ("GET",), "/debug/pprof/threadcreate": ("GET",),
}
# L-HTTP-15: the endpoints of lookupd before 1.0, gone since
PRE_1_0 = frozenset({"/create_topic", "/delete_topic", "/create_channel", "/delete_channel",
                     "/tombstone_topic_producer"})
_LOWERED = {path.lower() for path in ROUTES}
CLEAN_CUT = ("//", "/./", "/../")


class RoutesAsLookupd(Monitor):
    """L-HTTP-14: an unrouted path is 404, a routed one with a method it lacks 405 with Allow (HEAD is not
    mapped); L-HTTP-20: that Allow names OPTIONS too; L-HTTP-15: the pre-1.0 endpoints are 404; L-HTTP-18:
    /debug/pprof served, /debug/pprof/ redirected to it; L-HTTP-01: /ping is 200 'OK' as plain text without
    X-NSQ-Content-Type; L-HTTP-02: /info is {"version": ...}. Paths the router would redirect (a trailing slash,
    another case, an unclean path) are judged only for /debug/pprof/."""

    ITEMS = ("L-HTTP-01", "L-HTTP-02", "L-HTTP-14", "L-HTTP-15", "L-HTTP-18", "L-HTTP-20")
    KINDS = frozenset()  # HTTP only

    def http(self, judge, exchange: HttpExchange) -> None:
        path, method, status = exchange.path, exchange.method, exchange.status
        methods = ROUTES.get(path)
        if methods is None:
            self._unrouted(exchange)
            return
        if method == "OPTIONS":
            return
        if method not in methods:
            self._check(exchange, "L-HTTP-14", status == 405, f"405 METHOD_NOT_ALLOWED ({method} {path})")
            headers = exchange.headers
            if status == 405 and headers is not None:
                allowed = {name.strip() for name in headers.get("allow", "").split(",") if name.strip()}
                self._check(exchange, "L-HTTP-14", set(methods) <= allowed, f"Allow naming {', '.join(methods)}")
                self._check(exchange, "L-HTTP-20", "OPTIONS" in allowed, "Allow naming OPTIONS")
            return
        if path == "/ping":
            self._check(exchange, "L-HTTP-01", status == 200 and exchange.body == b"OK", "200 OK")
            if exchange.headers is not None:
                self._check(exchange, "L-HTTP-01", "x-nsq-content-type" not in exchange.headers
                            and exchange.headers.get("content-type", "").startswith("text/plain"),
                            "plain text without X-NSQ-Content-Type")
        elif path == "/info":
            self._check(exchange, "L-HTTP-02", status == 200 and _version_only(exchange.body), '200 {"version": ...}')
        elif path == "/debug/pprof":
            self._check(exchange, "L-HTTP-18", status == 200, "200 and the profiles' index")
        else:
            # its handler's own 404s (TOPIC_NOT_FOUND, CHANNEL_NOT_FOUND) are not the router's
            routers = status == 405 or status == 404 and _message(exchange.body) == "NOT_FOUND"
            self._check(exchange, "L-HTTP-14", not routers, f"{path} routed for {method}")

    def _unrouted(self, exchange: HttpExchange) -> None:
        path = exchange.path
        if path == "/debug/pprof/" and exchange.method == "GET":
            location = (exchange.headers or {}).get("location", "/debug/pprof")
            self._check(exchange, "L-HTTP-18", exchange.status == 301 and location == "/debug/pprof",
                        "301 to /debug/pprof")
            return
        redirected = path.rstrip("/") in ROUTES or (path + "/") in ROUTES or path.lower() in _LOWERED or \
            any(cut in path for cut in CLEAN_CUT) or path.endswith(("/.", "/.."))
        if redirected:
            self.skip("L-HTTP-14", "a path the router redirects (trailing slash, case, unclean)")
            return
        item = "L-HTTP-15" if path in PRE_1_0 else "L-HTTP-14"
        self._check(exchange, item, exchange.status == 404, f"404 NOT_FOUND ({path} is not routed)")

    def _check(self, exchange: HttpExchange, item: str, kept: bool, expected: str) -> None:
        if not kept:
            self.report(item, BROKER, exchange.ts, "HTTP", expected,
                        f"{exchange.method} {exchange.target}: {exchange.status} {exchange.body[:80]!r}"
                        + (f" {exchange.headers}" if exchange.headers is not None else ""))


def _message(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get("message") if isinstance(document, dict) else None


def _version_only(body: bytes) -> bool:
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and list(document) == ["version"] and isinstance(document["version"], str)
