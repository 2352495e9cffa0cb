"""The behaviour catalogue's rules as monitors: small state machines over one nsqd's traffic, each keyed by the
items it judges, that report a ``Violation`` (item, side, time, connection, expected, observed, the events that
show it) or say what they could not judge and why. They never assume what the traffic does not show: a capture
that starts mid-connection, a msg_timeout left to the broker's flag, or times that are when a client read frames
rather than when they arrived, leave a rule "not judged".

The same monitors run over a suite case's transcript (``conformance``), over a capture's connections
(``spark_analysis``) and in the tests. ``new_judge()`` gives a judge with all of them; each of ``MONITORS`` names
its items (``ITEMS``), which ``nsq-conformance explain`` lists and the tests check against the catalogue. A client
library's own traffic (the client suite's, ``conformance/clients``) is judged by ``CLIENT_MONITORS`` too; an
nsqlookupd's (its V1 connections and HTTP API) by ``LOOKUPD_MONITORS`` (``new_lookupd_judge()``).
"""

from __future__ import annotations

from collections.abc import Callable

from nsq_protocol.monitors.admin import DeletionClosesConsumers
from nsq_protocol.monitors.answers import AnswersAsNsqd
from nsq_protocol.monitors.application import Application
from nsq_protocol.monitors.buffering import FlushedAtOnce
from nsq_protocol.monitors.client_backoff import BackoffEnds, BacksOffAfterFailure
from nsq_protocol.monitors.client_commands import AuthenticatesWhenAsked, ClientCommandsInOrder, ClientCommandsParse
from nsq_protocol.monitors.client_configured import (
    FirstRdyWithinMaxInFlight,
    IdentifiesAsConfigured,
    SubscribesAsConfigured,
)
from nsq_protocol.monitors.client_errors import (
    NonFatalErrorsKeepConnection,
    ReconnectsAfterFatalClose,
    ReconnectsNotEarly,
    ReconnectsSpaced,
)
from nsq_protocol.monitors.client_handler import SettlesAsOrdered
from nsq_protocol.monitors.client_heartbeats import NopAnswersHeartbeat
from nsq_protocol.monitors.client_identify import ClientIdentifies
from nsq_protocol.monitors.client_layers import ClientBytesReadable, UnaskedLayerRefused
from nsq_protocol.monitors.client_lookup import JoinsListedProducers, LeavesDroppedProducers, PollsLookupd
from nsq_protocol.monitors.client_publishes import PublishesAsTold
from nsq_protocol.monitors.client_rdy_shared import RdySharedWithinMaxInFlight
from nsq_protocol.monitors.client_settles import SettlesWhatItHolds
from nsq_protocol.monitors.client_stop import ClsBeforeClose
from nsq_protocol.monitors.delivery import (
    AttemptsGrow,
    FinishedStaysFinished,
    FinOfUndelivered,
    NotTimedOutEarly,
    SettledOrTimedOutComesBack,
)
from nsq_protocol.monitors.emptying import EmptiedStaysEmpty
from nsq_protocol.monitors.ephemeral_gone import EphemeralChannelGone
from nsq_protocol.monitors.ephemeral_kept import EphemeralKept
from nsq_protocol.monitors.ephemeral_queue import EphemeralQueueInMemory
from nsq_protocol.monitors.events import BROKER, CLIENT, Observed, body_hash, from_command, from_frame
from nsq_protocol.monitors.fed import ReadyConsumerFed
from nsq_protocol.monitors.first_channel import FirstChannelGetsHeld, LaterChannelGetsLater
from nsq_protocol.monitors.framing import (
    AnswersOnlyToCommands,
    CopiesAreOneMessage,
    ErrorsAreErrorFrames,
    FatalErrorsClose,
    FramesSized,
    MessageFields,
    NonFatalErrorsKeepOpen,
    OwnClosesSilent,
)
from nsq_protocol.monitors.heartbeats import AnyCommandAnswersHeartbeats, ClientAnswersHeartbeats, HeartbeatsOnTheTicker
from nsq_protocol.monitors.http_answers import HttpAnswersAsNsqd
from nsq_protocol.monitors.http_documents import DocumentsAsNsqd
from nsq_protocol.monitors.http_no_auth import HttpWithoutAuth
from nsq_protocol.monitors.identify import FeaturesKept, IdentifyAnswer, UpgradeOks
from nsq_protocol.monitors.identify_values import IdentifyValues
from nsq_protocol.monitors.judge import HttpAction, Judge, http_action
from nsq_protocol.monitors.late_settles import LateSettleRefused
from nsq_protocol.monitors.limits import LimitsHeld
from nsq_protocol.monitors.lookupd_announces import NsqdAnnounces
from nsq_protocol.monitors.lookupd_http import RoutesAsLookupd
from nsq_protocol.monitors.lookupd_judge import LookupdJudge
from nsq_protocol.monitors.lookupd_nsqd import NsqdRegisters
from nsq_protocol.monitors.lookupd_registrations import RegistrationsAnswered
from nsq_protocol.monitors.lookupd_v1 import AnswersAsLookupd, ErrorsClose, MagicAnswered, RepliesFramed
from nsq_protocol.monitors.monitor import Monitor, Violation
from nsq_protocol.monitors.pausing import PausedHoldsBack
from nsq_protocol.monitors.publishing import DeferredWaits, DeliveredAsPublished, PublishedIsDelivered
from nsq_protocol.monitors.requeues import RequeueDelayKept
from nsq_protocol.monitors.sampling import SampledShare
from nsq_protocol.monitors.scan import TimedOutInTime
from nsq_protocol.monitors.settling import SettledByOwner
from nsq_protocol.monitors.stats_clients import ClientsAsConnected
from nsq_protocol.monitors.stats_counters import CountersNeverBehind
from nsq_protocol.monitors.stats_locality import CountedByLocality
from nsq_protocol.monitors.stats_restart import RestartForgets
from nsq_protocol.monitors.stats_text import TextStatsClients
from nsq_protocol.monitors.stats_topics import RefusedMpubMadeTopic
from nsq_protocol.monitors.sub_failed import SubFailsOnlyOnDeletion
from nsq_protocol.monitors.tls import TlsRequired
from nsq_protocol.monitors.tls_handshake import TlsHandshake
from nsq_protocol.monitors.tls_http import PlainHttpPolicy
from nsq_protocol.monitors.tls_policy import TlsPolicy
from nsq_protocol.monitors.unreadable import UnreadableBytesEnd
from nsq_protocol.monitors.window import RdyWindow

MONITORS: tuple[type[Monitor], ...] = (
    ErrorsAreErrorFrames, FatalErrorsClose, NonFatalErrorsKeepOpen, MessageFields, AnswersOnlyToCommands, AnswersAsNsqd,
    HeartbeatsOnTheTicker, ClientAnswersHeartbeats, IdentifyAnswer, UpgradeOks, IdentifyValues, FeaturesKept,
    TlsRequired, PlainHttpPolicy, TlsHandshake, OwnClosesSilent, CopiesAreOneMessage,
    RdyWindow, AttemptsGrow, FinishedStaysFinished, NotTimedOutEarly, SettledOrTimedOutComesBack, FinOfUndelivered,
    DeferredWaits, DeliveredAsPublished, PublishedIsDelivered, FlushedAtOnce, SampledShare, RequeueDelayKept,
    TimedOutInTime, DeletionClosesConsumers, SettledByOwner, HttpAnswersAsNsqd, DocumentsAsNsqd, UnreadableBytesEnd,
    CountersNeverBehind, EphemeralKept, PausedHoldsBack, EmptiedStaysEmpty, ClientsAsConnected, HttpWithoutAuth,
    RefusedMpubMadeTopic, EphemeralChannelGone, RestartForgets, EphemeralQueueInMemory, TextStatsClients, LimitsHeld,
    AnyCommandAnswersHeartbeats, FramesSized, ReadyConsumerFed, LateSettleRefused, CountedByLocality,
    FirstChannelGetsHeld, LaterChannelGetsLater, SubFailsOnlyOnDeletion,
)
# what a client library must do beyond what nsqd's rules say of any client (mostly the client catalogue's NSQC items,
# conformance/spec/clients.toml): judged where the traffic is a library's own, as in the client suite; a client that
# sends odd commands on purpose (the broker suite's) breaks them by design
CLIENT_MONITORS: tuple[type[Monitor], ...] = (
    ClientBytesReadable, UnaskedLayerRefused, ClientIdentifies, ClientCommandsParse, ClientCommandsInOrder,
    AuthenticatesWhenAsked, SettlesWhatItHolds, NopAnswersHeartbeat, NonFatalErrorsKeepConnection,
    ReconnectsAfterFatalClose, ReconnectsSpaced, ClsBeforeClose, BackoffEnds,
    # judged against what the application asked of the library (new_judge's application)
    IdentifiesAsConfigured, SubscribesAsConfigured, FirstRdyWithinMaxInFlight, SettlesAsOrdered, PublishesAsTold,
    BacksOffAfterFailure, RdySharedWithinMaxInFlight, ReconnectsNotEarly,
    # over its queries of nsqlookupd too (Judge.lookupd_query)
    PollsLookupd, JoinsListedProducers, LeavesDroppedProducers,
)

# nsqlookupd's rules (conformance/spec/nsqlookupd.toml), and nsqd's as it registers there (registration.toml): judged
# over one nsqlookupd's traffic (LookupdJudge)
LOOKUPD_MONITORS: tuple[type[Monitor], ...] = (
    MagicAnswered, RepliesFramed, AnswersAsLookupd, ErrorsClose, RoutesAsLookupd, RegistrationsAnswered,
    NsqdRegisters, NsqdAnnounces,
)


def new_lookupd_judge(*, http_seen: bool, **known) -> LookupdJudge:
    """``known``: what LookupdJudge may be told of the traffic and the lookupd (timing, wording, whole, fresh, its
    timeouts)."""
    return LookupdJudge([monitor() for monitor in LOOKUPD_MONITORS], http_seen=http_seen, **known)


def new_judge(*, timing: bool, http_seen: bool, wording: bool = True, client_library: bool = False,
              application: Application | None = None, readers: tuple[Monitor, ...] = (),
              release: tuple[int, ...] | None = None, tls_policy: TlsPolicy | None = None,
              fresh: Callable[[str], bool] | None = None, runs: bool = True,
              share: tuple[int, int] = (0, 1)) -> Judge:
    """``client_library``: the traffic is a client library's, judged by CLIENT_MONITORS too; ``application``: what
    its application asked of the library (application.py), which some of them judge it against; ``readers``:
    monitors that judge nothing but read the traffic for another judge (nsqd_names.NamesChanged); ``release``: the
    nsqd release the broker follows, where whoever runs the judge knows it (release.py); ``tls_policy``: its TLS flags,
    likewise (tls_policy.py); ``fresh``: which topics' whole life is in the traffic (Judge); ``runs``: the monitors
    that take runs whole get them (Judge); ``share``: (index, count): this judge runs the index-th of count shares of
    the monitors, so that count judges of one traffic, each on a core of its own, find together what one judge
    would. A share is a stretch of the monitors' order, which groups them by area: on the bench trace the halves
    cost alike (0.43 and 0.37 s where all cost 0.67 s; every other monitor, 0.32 and 0.50 s)."""
    chosen = (*MONITORS, *CLIENT_MONITORS) if client_library else MONITORS
    index, count = share
    chosen = chosen[len(chosen) * index // count:len(chosen) * (index + 1) // count]
    return Judge([*(monitor() for monitor in chosen), *readers], timing=timing, http_seen=http_seen,
                 wording=wording, application=application, release=release, tls_policy=tls_policy, fresh=fresh,
                 runs=runs)


__all__ = ["Application", "BROKER", "CLIENT", "CLIENT_MONITORS", "HttpAction", "Judge",
           "LOOKUPD_MONITORS", "LookupdJudge", "MONITORS", "Monitor", "Observed", "TlsPolicy", "Violation", "body_hash",
           "from_command", "from_frame", "http_action", "new_judge", "new_lookupd_judge"]
