"""Each HTTP request answered as nsqd answers it (http_expected.py): the status and code, the shape of the body and
its headers (H-01, H-02, H-03), the router's 404, 405, OPTIONS and redirects (H-04, H-05, H-10), TLS_REQUIRED to
every plain request once the broker showed it requires TLS (H-06). Where the traffic holds every HTTP request
(``judge.http_seen``), a model of the broker's topics, channels and pauses from them judges the answers that hang on
what exists (404 TOPIC_NOT_FOUND for a topic created and not deleted since) and the /stats answers that follow."""

from __future__ import annotations

import json
from dataclasses import replace

from nsq_protocol.http import HttpExchange, Response
from nsq_protocol.monitors.events import BROKER
from nsq_protocol.monitors.http_expected import (
    ALLOWED,
    DOCUMENT,
    EMPTY,
    ERROR,
    NAME_REFUSALS,
    PLAIN,
    REDIRECT,
    SERVED,
    TEXT,
    HttpAnswer,
    Limits,
    expect,
    names_allowed,
)
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import stats_channels, stats_topics

JSON_TYPE = "application/json; charset=utf-8"
NSQ_TYPE = "nsq; version=1.0"
HTTP = "HTTP"  # the violations' connection: the broker's HTTP API
# a flag's value at either end: what a flag the traffic does not show could make nsqd say (the traffic's /config
# answers do not tell it for long: a restart may change it, unseen)
_EXTREMES = (0, 1 << 62)
_STATE_ANSWERS = {  # path -> what nsqd may answer a request whose arguments passed, by what exists
    "/topic/delete": ("TOPIC_NOT_FOUND",), "/topic/empty": ("TOPIC_NOT_FOUND", "INTERNAL_ERROR"),
    "/topic/pause": ("TOPIC_NOT_FOUND", "INTERNAL_ERROR"), "/topic/unpause": ("TOPIC_NOT_FOUND", "INTERNAL_ERROR"),
    "/channel/create": ("TOPIC_NOT_FOUND",), "/channel/delete": ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND"),
    "/channel/empty": ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND", "INTERNAL_ERROR"),
    "/channel/pause": ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND", "INTERNAL_ERROR"),
    "/channel/unpause": ("TOPIC_NOT_FOUND", "CHANNEL_NOT_FOUND", "INTERNAL_ERROR"),
}
_ITEMS_OF = {"/topic/delete": "H-TOPIC-02", "/topic/empty": "H-TOPIC-03", "/topic/pause": "H-TOPIC-04",
             "/topic/unpause": "H-TOPIC-04", "/channel/create": "H-CHANNEL-01", "/channel/delete": "H-CHANNEL-02",
             "/channel/empty": "H-CHANNEL-03", "/channel/pause": "H-CHANNEL-04", "/channel/unpause": "H-CHANNEL-04"}
# path -> (item, the answers given once the topic was created): /pub creates it before reading defer (H-PUB-04), /mpub
# before reading its body (H-MPUB-02)
_CREATING = {"/pub": ("H-PUB-04", frozenset({"OK", "INVALID_DEFER"})),
             "/mpub": ("H-MPUB-02", frozenset({"OK", "BAD_BODY", "BAD_MESSAGE", "MSG_TOO_BIG"})),
             "/topic/create": ("H-TOPIC-01", frozenset({""}))}


class HttpAnswersAsNsqd(Monitor):
    """Each HTTP answer as nsqd gives it (``ITEMS``: the conventions, /pub, /mpub, the topic, channel, /config and
    /debug endpoints); the limits a refusal hangs on are their flags' defaults until a /config answer tells them,
    and an answer only another value explains is "not judged"."""

    ITEMS = ("H-01", "H-02", "H-03", "H-04", "H-05", "H-06", "H-07", "H-09", "H-10",
             "H-PUB-01", "H-PUB-02", "H-PUB-03", "H-PUB-04", "H-PUB-05", "H-PUB-07", "H-PUB-08",
             "H-MPUB-01", "H-MPUB-02", "H-MPUB-03", "H-MPUB-04", "H-MPUB-05", "H-MPUB-07",
             "H-TOPIC-01", "H-TOPIC-02", "H-TOPIC-03", "H-TOPIC-04",
             "H-CHANNEL-01", "H-CHANNEL-02", "H-CHANNEL-03", "H-CHANNEL-04",
             "H-CFG-01", "H-CFG-02", "H-CFG-03", "H-CFG-04", "H-DEBUG-01", "H-STATS-01", "D-39")
    KINDS = frozenset()  # no V2 event: only the HTTP exchanges

    def __init__(self):
        super().__init__()
        self._tls_required_at: float | None = None  # a plain request was answered 403 TLS_REQUIRED
        # the model (where every HTTP request is seen): (topic,) and (topic, channel) -> when the answer showed it
        # exists; -> (paused, when the answer set it); of what a request since deleted or changed, the answer's time
        self._exists: dict[tuple, float] = {}
        self._created_by: dict[str, str] = {}  # topic -> the item of the request that showed it exists
        self._paused: dict[tuple, tuple[bool, float]] = {}
        self._changed: dict[tuple, float] = {}
        # the broker's start (/stats' and /info's start_time, whole seconds): the model holds from it on; a new one
        # is a restart, which may have lost what it knew
        self._started: int | None = None

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        self._restarted(judge, exchange)
        if not exchange.tls and self._tls_required(judge, exchange):
            return
        answers = expect(request, Limits())
        if answers is None:
            answers = self._by_state(judge, exchange)
            if answers is None:
                return
        fitting = next((answer for answer in answers if _fits(answer, request.method, response)), None)
        if fitting is None:
            flag = self._flag(request, response)
            if flag:
                self.skip(answers[0].item, f"the answer fits only a {flag} other than its default")
            else:
                self.report(_misnamed(request, response, answers) or answers[0].item, BROKER, exchange.ts, HTTP,
                            " or ".join(a.describe() for a in answers), _observed(response), exchange)
            return
        fault = _shape_fault(fitting, request.method, response, judge.wording)
        if fault:
            self.report(fault[0], BROKER, exchange.ts, HTTP, fault[1], fault[2], exchange)
        self._learn(judge, exchange, fitting)

    def _restarted(self, judge, exchange: HttpExchange):
        """A restart (the suite's kill, or a new start_time) ends what the model knew, and the TLS policy seen."""
        started = self._started
        if exchange.request.path in ("/stats", "/info") and exchange.response.status == 200:
            document = _json(exchange.response)
            if isinstance(document, dict) and isinstance(document.get("start_time"), int):
                started = document["start_time"]
        if judge.crashed_at is not None and (self._started is None or self._started < judge.crashed_at):
            started = max(started or 0, int(judge.crashed_at))
        if started != self._started:
            self._exists, self._created_by, self._paused, self._changed = {}, {}, {}, {}
            if self._started is not None:
                self._tls_required_at = None
            self._started = started

    def _tls_required(self, judge, exchange: HttpExchange) -> bool:
        """H-06: a plain request answered 403 TLS_REQUIRED shows --tls-required; every plain one after is too.
        True: the answer was this one's to judge."""
        response = exchange.response
        message = _json(response)
        if response.status == 403 and isinstance(message, dict) and message.get("message") == "TLS_REQUIRED":
            self._tls_required_at = self._tls_required_at or exchange.ts
            port = message.get("https_port")
            hand_written = f'{{"message": "TLS_REQUIRED", "https_port": {port}}}'.encode()
            if set(message) != {"message", "https_port"} or not isinstance(port, int) or \
                    response.headers.get("x-nsq-content-type") != NSQ_TYPE or \
                    response.headers.get("content-type") != JSON_TYPE or \
                    (judge.wording and response.body != hand_written):
                self.report("H-06", BROKER, exchange.ts, HTTP, f"403 {hand_written.decode()} with both headers",
                            _observed(response), exchange)
            return True
        if self._tls_required_at is not None:
            self.report("H-06", BROKER, exchange.ts, HTTP, "403 TLS_REQUIRED, as to the plain requests before",
                        _observed(response), exchange)
            return True
        return False

    def _flag(self, request, response: Response) -> str | None:
        """The flag whose other value would make nsqd give this answer."""
        for name in sorted(Limits.FLAGS):
            for value in _EXTREMES:
                answers = expect(request, replace(Limits(), **{name: value}))
                if answers and any(_fits(answer, request.method, response) for answer in answers):
                    return Limits.FLAGS[name]
        return None

    def _by_state(self, judge, exchange: HttpExchange) -> tuple[HttpAnswer, ...] | None:
        """The answers to an administration request whose arguments passed: 200 or a 404 by what exists, which the
        model knows where every HTTP request is in the traffic."""
        request = exchange.request
        path = request.path
        item = _ITEMS_OF.get(path)
        params = request.params()
        if item is None or params is None:
            return None
        topic, channel = params.get("topic", ""), params.get("channel")
        codes = list(_STATE_ANSWERS[path])
        if not judge.http_seen:
            self.skip(item, "whether the topic exists: the broker's HTTP requests are not all in the traffic")
        elif self._known((topic,), exchange.ts):
            codes.remove("TOPIC_NOT_FOUND")
            if self._known((topic, channel), exchange.ts) and "CHANNEL_NOT_FOUND" in codes:
                codes.remove("CHANNEL_NOT_FOUND")
        return (HttpAnswer(200, EMPTY, item=item),
                *(HttpAnswer(500 if code == "INTERNAL_ERROR" else 404, ERROR, code, item) for code in codes))

    def _known(self, key: tuple, at: float) -> bool:
        """``key`` exists at ``at``: an answer before showed it, after the broker's start (that it was not lost in a
        restart since is what the start_time of /stats and /info answers tells)."""
        since = self._exists.get(key)
        return since is not None and since < at and self._started is not None and self._started + 1 < since

    def _learn(self, judge, exchange: HttpExchange, answer: HttpAnswer):
        """What the answer tells of what exists and what is paused (the model)."""
        request, response = exchange.request, exchange.response
        path = request.path
        if not judge.http_seen:
            return
        if path == "/stats" and answer.shape == DOCUMENT:
            self._stats(judge, exchange)
            return
        params = request.params() or {}
        topic, channel = params.get("topic"), params.get("channel")
        if topic is None or topic.endswith("#ephemeral"):
            return
        key = (topic,) if path.startswith("/topic/") or path in _CREATING else (topic, channel)
        if channel is not None and channel.endswith("#ephemeral"):
            return
        if self._changed.get(key, float("-inf")) > exchange.ts:
            # another request about it was answered after this one was sent: which the broker did first is not known
            self._forget(key)
            return
        if path in _CREATING:
            item, created = _CREATING[path]
            if answer.code in created:
                self._exists.setdefault(key, exchange.answered)
                self._created_by.setdefault(topic, item)
            self._changed[key] = exchange.answered
        elif response.status == 200:
            self._changed[key] = exchange.answered
            if path.endswith("/delete"):
                self._forget(key)
            elif path.endswith("pause"):
                self._paused[key] = (not path.endswith("/unpause"), exchange.answered)
            elif path == "/channel/create" and (topic,) in self._exists:
                self._exists.setdefault(key, exchange.answered)

    def _forget(self, key: tuple):
        for known in (self._exists, self._paused):
            for other in [other for other in known if other[:len(key)] == key]:
                del known[other]

    def _stats(self, judge, exchange: HttpExchange):
        """H-PUB-04, H-MPUB-02, H-TOPIC-01: every topic the traffic created and did not delete is listed; H-TOPIC-04,
        H-CHANNEL-04: paused as the last pause or unpause left it."""
        document = _json(exchange.response)
        params = exchange.request.params() or {}
        if not isinstance(document, dict) or params.get("channel") or not isinstance(document.get("topics"), list):
            return
        listed = {entry["topic_name"]: entry for entry in stats_topics(document)}
        wanted, at = params.get("topic"), exchange.ts
        for key in self._exists:
            if len(key) == 1 and self._known(key, at) and wanted in (None, "", key[0]) and key[0] not in listed:
                self.report(self._created_by.get(key[0], "H-TOPIC-01"), BROKER, at, HTTP,
                            f"topic {key[0]} listed (created, not deleted since)", "not in /stats", exchange)
        for key, (paused, since) in self._paused.items():
            entry = listed.get(key[0]) if since < at and self._started is not None and self._started + 1 < since \
                else None
            if entry is not None and len(key) == 2:
                entry = next((channel for channel in stats_channels(entry) if channel["channel_name"] == key[1]), None)
            if isinstance(entry, dict) and "paused" in entry and entry["paused"] is not paused:
                item = "H-TOPIC-04" if len(key) == 1 else "H-CHANNEL-04"
                self.report(item, BROKER, at, HTTP, f"{'/'.join(key)} paused: {paused}",
                            f"paused: {entry['paused']}", exchange)


def _misnamed(request, response: Response, answers: tuple[HttpAnswer, ...]) -> str | None:
    """D-39, where a wrong answer breaks the name rule: a name the rule allows refused as invalid, or one it refuses
    taken."""
    refusal = _json(response) if response.status == 400 else None
    if isinstance(refusal, dict) and isinstance(refusal.get("message"), str) and \
            refusal["message"] in NAME_REFUSALS and names_allowed(request):
        return "D-39"
    if 200 <= response.status < 300 and answers[0].code in NAME_REFUSALS:
        return "D-39"
    return None


def _json(response: Response):
    if not response.whole:
        return None
    try:
        return json.loads(response.body)
    except ValueError:
        return None


def _fits(answer: HttpAnswer, method: str, response: Response) -> bool:
    """``response`` is ``answer``: its status and code (the shape is _shape_fault's)."""
    if answer.shape == SERVED:
        return response.status not in (404, 405)
    if response.status != answer.status:
        return False
    if method == "HEAD" or not response.whole:
        return True
    if answer.shape == ERROR:
        message = _json(response)
        return isinstance(message, dict) and message.get("message") == answer.code
    if answer.shape == PLAIN:
        return response.body.startswith(answer.code.encode())
    if answer.code and answer.shape in (TEXT, DOCUMENT):
        return response.body.strip() == answer.code.encode()
    return True


def _shape_fault(answer: HttpAnswer, method: str, response: Response, wording: bool) -> tuple[str, str, str] | None:
    """H-01, H-02, H-03, H-10: the body's form and the headers of an answer whose status and code were right:
    (item, expected, observed), or None."""
    headers = response.headers
    nsq_type, content_type = headers.get("x-nsq-content-type"), headers.get("content-type")
    if answer.allow is not None and headers.get("allow") != answer.allow:
        return "H-10", f"Allow: {answer.allow}", f"Allow: {headers.get('allow')}"
    if answer.shape in (REDIRECT, SERVED, ALLOWED):
        return None
    if answer.shape == PLAIN:
        return ("H-03", "no X-NSQ-Content-Type", f"X-NSQ-Content-Type: {nsq_type}") if nsq_type is not None else None
    if nsq_type != NSQ_TYPE:
        item = "H-01" if answer.shape == ERROR else "H-02"
        return item, f"X-NSQ-Content-Type: {NSQ_TYPE}", f"X-NSQ-Content-Type: {nsq_type}"
    if answer.shape == ERROR:
        compact = json.dumps({"message": answer.code}, separators=(",", ":")).encode()
        if content_type != JSON_TYPE:
            return "H-01", f"Content-Type: {JSON_TYPE}", f"Content-Type: {content_type}"
        if method != "HEAD" and response.whole and (set(_json(response)) != {"message"} or
                                                    (wording and response.body != compact)):
            return "H-01", compact.decode(), _observed(response)
        return None
    if answer.shape == EMPTY:
        if content_type is not None or (method != "HEAD" and response.body_size):
            return "H-02", "an empty 200 without Content-Type", \
                f"Content-Type: {content_type}, {response.body_size} bytes"
        return None
    kind_item = "H-STATS-01" if answer.item == "H-STATS-01" else "H-02"  # /stats' format, or any answer's shape
    if answer.shape == DOCUMENT:
        if content_type != JSON_TYPE:
            return kind_item, f"Content-Type: {JSON_TYPE}", f"Content-Type: {content_type}"
        if method != "HEAD" and response.whole and _json(response) is None and response.body.strip() != b"null":
            return kind_item, "a JSON body", _observed(response)
        return None
    if content_type is None or not content_type.startswith("text/plain"):  # TEXT: Go sniffs the body
        return kind_item, "Content-Type: text/plain; charset=utf-8", f"Content-Type: {content_type}"
    if not answer.code and method != "HEAD" and response.whole and not response.body.startswith(b"nsqd v"):
        return "H-STATS-01", "the text report, 'nsqd v<version>' first", _observed(response)
    return None


def _observed(response: Response) -> str:
    return f"{response.status} {response.body[:120]!r}"
