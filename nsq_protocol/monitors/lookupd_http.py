"""nsqlookupd's HTTP API judged per exchange where the answer depends on the request alone
(conformance/spec/nsqlookupd.toml, L-HTTP-*): its table of routes and methods (nsqlookupd/http.go: newHTTPServer,
an httprouter with HandleMethodNotAllowed), /ping and /info."""

from __future__ import annotations

import json

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER
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
    """L-HTTP-14: an unrouted path is 404, a routed one with a method it lacks 405 (HEAD is not mapped); L-HTTP-20
    (since 1.2.0's router): that 405 carries an Allow naming the path's methods and OPTIONS; L-HTTP-15: the pre-1.0
    endpoints are 404; L-HTTP-18: /debug/pprof served, /debug/pprof/ redirected to it; L-HTTP-01: /ping is 200 'OK'
    as plain text without X-NSQ-Content-Type; L-HTTP-02: /info is {"version": ...}. Paths the router would redirect
    (a trailing slash, another case, an unclean path) are judged only for /debug/pprof/."""

    ITEMS = ("L-HTTP-01", "L-HTTP-02", "L-HTTP-14", "L-HTTP-15", "L-HTTP-18", "L-HTTP-20")
    KINDS = frozenset()  # HTTP only

    def http(self, judge, exchange: HttpExchange) -> None:
        request, response = exchange.request, exchange.response
        path, method, status = request.path, request.method, response.status
        methods = ROUTES.get(path)
        if methods is None:
            self._unrouted(exchange)
            return
        if method == "OPTIONS":
            return
        if method not in methods:
            self._check(exchange, "L-HTTP-14", status == 405, f"405 METHOD_NOT_ALLOWED ({method} {path})")
            if status == 405:
                allowed = {name.strip() for name in response.headers.get("allow", "").split(",") if name.strip()}
                self._check(exchange, "L-HTTP-20", {*methods, "OPTIONS"} <= allowed,
                            f"Allow naming {', '.join(sorted({*methods, 'OPTIONS'}))}")
            return
        if path == "/ping":
            self._check(exchange, "L-HTTP-01", status == 200 and response.body == b"OK", "200 OK")
            self._check(exchange, "L-HTTP-01", "x-nsq-content-type" not in response.headers
                        and response.headers.get("content-type", "").startswith("text/plain"),
                        "plain text without X-NSQ-Content-Type")
        elif path == "/info":
            self._check(exchange, "L-HTTP-02", status == 200 and _version_only(response.body), '200 {"version": ...}')
        elif path == "/debug/pprof":
            self._check(exchange, "L-HTTP-18", status == 200, "200 and the profiles' index")
        else:
            # its handler's own 404s (TOPIC_NOT_FOUND, CHANNEL_NOT_FOUND) are not the router's
            routers = status == 405 or status == 404 and response.message == "NOT_FOUND"
            self._check(exchange, "L-HTTP-14", not routers, f"{path} routed for {method}")

    def _unrouted(self, exchange: HttpExchange) -> None:
        path, response = exchange.request.path, exchange.response
        if path == "/debug/pprof/" and exchange.request.method == "GET":
            location = response.headers.get("location", "/debug/pprof")
            self._check(exchange, "L-HTTP-18", response.status == 301 and location == "/debug/pprof",
                        "301 to /debug/pprof")
            return
        redirected = path.rstrip("/") in ROUTES or (path + "/") in ROUTES or path.lower() in _LOWERED or \
            any(cut in path for cut in CLEAN_CUT) or path.endswith(("/.", "/.."))
        if redirected:
            self.skip("L-HTTP-14", "a path the router redirects (trailing slash, case, unclean)")
            return
        item = "L-HTTP-15" if path in PRE_1_0 else "L-HTTP-14"
        self._check(exchange, item, response.status == 404, f"404 NOT_FOUND ({path} is not routed)")

    def _check(self, exchange: HttpExchange, item: str, kept: bool, expected: str) -> None:
        if not kept:
            self.report(item, BROKER, exchange.answered, "HTTP", expected,
                        f"{exchange.describe()} {exchange.response.headers}")



def _version_only(body: bytes) -> bool:
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and list(document) == ["version"] and isinstance(document["version"], str)
