"""The behaviour catalogue's rules as monitors: small state machines over one nsqd's traffic, each keyed by the
items it judges, that report a ``Violation`` (item, side, time, connection, expected, observed, the events that
show it) or say what they could not judge and why. They never assume what the traffic does not show: a capture
that starts mid-connection, a msg_timeout left to the broker's flag, or times that are when a client read frames
rather than when they arrived, leave a rule "not judged".

The same monitors run over a suite case's transcript (``conformance``), over a capture's connections
(``spark_analysis``) and in the tests. ``new_judge()`` gives a judge with all of them; each of ``MONITORS`` names
its items (``ITEMS``), which ``nsq-conformance explain`` lists and the tests check against the catalogue.
"""

from __future__ import annotations

from nsq_protocol.monitors.answers import AnswersAsNsqd
from nsq_protocol.monitors.buffering import FlushedAtOnce
from nsq_protocol.monitors.delivery import (
    AttemptsGrow,
    FinishedStaysFinished,
    FinOfUndelivered,
    NotTimedOutEarly,
    SettledOrTimedOutComesBack,
)
from nsq_protocol.monitors.events import BROKER, CLIENT, Observed, body_hash, from_command, from_frame
from nsq_protocol.monitors.framing import (
    AnswersOnlyToCommands,
    ErrorsAreErrorFrames,
    FatalErrorsClose,
    MessageFields,
    NonFatalErrorsKeepOpen,
)
from nsq_protocol.monitors.heartbeats import ClientAnswersHeartbeats, HeartbeatsOnTheTicker
from nsq_protocol.monitors.identify import IdentifyAnswer, UpgradeOks
from nsq_protocol.monitors.judge import HttpAction, Judge, http_action
from nsq_protocol.monitors.monitor import Monitor, Violation
from nsq_protocol.monitors.publishing import DeferredWaits, DeliveredAsPublished, PublishedIsDelivered
from nsq_protocol.monitors.sampling import SampledShare
from nsq_protocol.monitors.window import RdyWindow

MONITORS: tuple[type[Monitor], ...] = (
    ErrorsAreErrorFrames, FatalErrorsClose, NonFatalErrorsKeepOpen, MessageFields, AnswersOnlyToCommands, AnswersAsNsqd,
    HeartbeatsOnTheTicker, ClientAnswersHeartbeats, IdentifyAnswer, UpgradeOks,
    RdyWindow, AttemptsGrow, FinishedStaysFinished, NotTimedOutEarly, SettledOrTimedOutComesBack, FinOfUndelivered,
    DeferredWaits, DeliveredAsPublished, PublishedIsDelivered, FlushedAtOnce, SampledShare,
)


def new_judge(*, timing: bool, http_seen: bool, wording: bool = True) -> Judge:
    return Judge([monitor() for monitor in MONITORS], timing=timing, http_seen=http_seen, wording=wording)


__all__ = ["BROKER", "CLIENT", "HttpAction", "Judge", "MONITORS", "Monitor", "Observed", "Violation", "body_hash",
           "from_command", "from_frame", "http_action", "new_judge"]
