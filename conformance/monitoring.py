"""Every case's live transcript through the catalogue's monitors (nsq_protocol.monitors): a case also checks every
invariant the monitors know, not only its own assertion. The suite's times are when its client read a frame, not
when the frame arrived, so the judge runs without timing: the rules about order and content judge, the rules
about time say "not judged"."""

from __future__ import annotations

from conformance.transcript import CLIENT_TO_SERVER, NOTE, SERVER_TO_CLIENT, Transcript
from conformance.versions import DEFAULT, NsqVersion
from nsq_protocol import monitors
from nsq_protocol.http import HttpExchange

_SERVER_CLOSED = ("server closed the connection", "connection reset")
_KILLED = "kill the target"  # case.py's note of a SIGKILL
# the HTTP monitors hold nsqd's answers since 1.2.0 (run against v1.2.1 and v1.3.0); an older nsqd's /stats and
# content types differ in ways the catalogue does not yet split by release: its HTTP exchanges are not fed
HTTP_JUDGED_SINCE = NsqVersion.parse("1.2.0")


def judge(transcript: Transcript, version: NsqVersion = NsqVersion.parse(DEFAULT)) -> monitors.Judge:
    """The monitors' judge over one case's V2 connections and its exchanges with nsqd's HTTP API (conformance.client's
    ``monitored`` HttpClient) where the release it follows (``version``) is one the HTTP monitors hold; ``http_seen``
    False: other cases' requests reach the broker too."""
    judge = monitors.new_judge(timing=False, http_seen=False, wording=False)  # the cases judge nsqd's wording
    for event in transcript.events:
        name, at = event.connection, transcript.wall_time(event)
        if event.direction == NOTE:
            if name in judge.connections and event.lines[0].startswith(_SERVER_CLOSED):
                judge.close(name, at, monitors.BROKER)
            elif event.lines[0].startswith(_KILLED):
                judge.crash(at)
            continue
        if event.observed and isinstance(event.observed[0], HttpExchange):
            if version >= HTTP_JUDGED_SINCE:
                judge.http_exchange(event.observed[0])
            continue
        if event.direction not in (CLIENT_TO_SERVER, SERVER_TO_CLIENT) or not event.observed and \
                name not in judge.connections:
            continue
        if name not in judge.connections:
            # a connection the suite opened with the V2 magic: its defaults are known from its start
            judge.open(name, at, started=event.direction == CLIENT_TO_SERVER and event.lines[0].startswith(
                "MAGIC b'  V2'"))
        for observed in event.observed:
            judge.observe(name, observed)
    end = transcript.wall_started + transcript.now()
    for name, connection in judge.connections.items():
        if connection.open:
            judge.close(name, end, None)  # the client stopped reading: whether the broker closed is not known
    judge.finish(end)
    if judge.failures:  # the toolkit's own bug, on traffic of its own making: loud, never a quiet "not judged"
        raise MonitorFailed("; ".join(judge.failures))
    return judge


class MonitorFailed(RuntimeError):
    """A monitor raised on a case's transcript."""
