"""The TLS upgrade as a capture shows it in the clear (nsq_protocol.tls_records): nsqd starts its handshake right
after the JSON answer, with a 5 s deadline (ID-31, nsqd/client_v2.go UpgradeTLS); its tls.Config refuses a
ClientHello below --tls-min-version with the protocol_version alert (T-17) and asks for a client certificate under
a client auth policy (ID-32, nsqd/nsqd.go buildTLSConfig: NoClientCert without one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heappop, heappush

from nsq_protocol.monitors.connection import TAIL_LOST
from nsq_protocol.monitors.events import BROKER, CLIENT, ERROR, JSON, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.tls_policy import RESTARTED, Shown
from nsq_protocol.tls_records import ALERT_NAME, ENCRYPTED, NOT_TLS, PROTOCOL_VERSION, TLS12, VERSION_NAMES, Record

HANDSHAKE_DEADLINE_S = 5.0  # UpgradeTLS: tlsConn.SetDeadline(time.Now().Add(5 * time.Second))
LATE_S = 1.5  # what a loaded broker's timer and close may add to it, on the capture's clock
TLS13_HIDES = "TLS 1.3 encrypts the CertificateRequest and the client's Certificate"
NO_MINIMUM = "--tls-min-version is neither told nor shown yet (no refused version, nor one accepted since a refusal)"


@dataclass
class Upgrade:
    """One connection's TLS upgrade, from its JSON answer on."""

    answered_at: float
    offered: tuple[int, ...] | None = None  # the ClientHello's versions; None: no ClientHello (yet)
    client_first: Record | None = None
    broker_spoke: bool = False  # the broker's bytes after the answer came (its handshake, or an error frame)
    chosen: int | None = None  # the ServerHello's version
    server: list[str] = field(default_factory=list)  # the broker's handshake messages, in order
    certificate_request: bool | None = None  # TLS 1.2: the broker's flight, whole to its ServerHelloDone, asked
    empty_certificate: bool = False  # TLS 1.2: the client's Certificate carried none


class TlsHandshake(Monitor):
    """ID-31: the broker's bytes after an answer that agreed to TLS are TLS records and follow the client's
    ClientHello (or, after a client's bytes that are no ClientHello, nsqd's error frame and close); where the times are
    the wire's, they or the broker's close come within the 5 s deadline. T-17: a ClientHello that offers no version
    from --tls-min-version up is refused with the protocol_version alert, any other gets a ServerHello at or above it.
    ID-32: under TLS 1.2, a client auth policy shows in each flight's CertificateRequest, and a client's empty
    Certificate is then refused with an alert. The flags are the told ones (judge.tls_policy), else what the broker
    showed: a refused version shows the minimum above it, an accepted one the minimum at or below it, a
    CertificateRequest the policy; they hold while a V2 connection open then stays open."""

    ITEMS = ("ID-31", "ID-32", "T-17")
    KINDS = frozenset({RESPONSE, ERROR})

    def __init__(self):
        super().__init__()
        self._upgrades: dict[str, Upgrade] = {}
        # a client's first record timed before the answer it waited for (its clock, or the capture's order)
        self._early: dict[str, Record] = {}
        self._deadlines: list = []  # heap of (due, connection)
        self._accepted: Shown | None = None  # value: the lowest version a ServerHello chose
        self._refused: Shown | None = None  # value: the highest version a refused ClientHello offered
        self._asks: Shown | None = None  # value: whether a whole TLS 1.2 flight held a CertificateRequest

    def observe(self, judge, connection, event, answered):
        upgrade = self._upgrades.get(connection.name)
        if upgrade is not None:
            upgrade.broker_spoke = True  # nsqd's error frame after a failed handshake (ID-31)
            return
        if answered is None or answered.name != "IDENTIFY" or event.name != JSON or not event.fields \
                or event.fields.get("tls_v1") is not True or not connection.started:
            return
        upgrade = self._upgrades[connection.name] = Upgrade(event.ts)
        early = self._early.pop(connection.name, None)
        if early is not None:
            self._client(upgrade, early)
        if judge.timing:
            heappush(self._deadlines, (event.ts + HANDSHAKE_DEADLINE_S + LATE_S, connection.name))
            self.due = self._deadlines[0][0]
            judge.want_tick(self.due)

    def tls_record(self, judge, connection, ts, sender, record):
        upgrade = self._upgrades.get(connection.name)
        if upgrade is None:
            if sender == CLIENT and connection.started:
                self._early.setdefault(connection.name, record)
            return
        if sender == CLIENT:
            self._client(upgrade, record)
            return
        first = not upgrade.broker_spoke
        upgrade.broker_spoke = True
        if first and record.name == NOT_TLS:  # ID-31: a handshake, not other bytes
            self.report("ID-31", BROKER, ts, connection.name, "the broker's TLS handshake after the JSON answer",
                        record.describe())
        elif first and upgrade.client_first is None and judge.timing:  # ID-31: Go's server reads the ClientHello first
            self.report("ID-31", BROKER, ts, connection.name, "the broker's handshake after the client's ClientHello",
                        f"{record.describe()} before any client byte")
        elif record.name == "server_hello" and upgrade.offered is None and upgrade.client_first is not None:
            self.report("ID-31", BROKER, ts, connection.name, "the connection closed: the client's bytes were no "
                        "ClientHello", f"{record.describe()} after {upgrade.client_first.describe()}")
        if record.name == "server_hello" and record.versions:
            upgrade.chosen = record.versions[0]
            self._version(judge, connection, ts, upgrade, record)
        elif record.name == ALERT_NAME and record.alert == PROTOCOL_VERSION and upgrade.chosen is None:
            self._version(judge, connection, ts, upgrade, record)
        elif upgrade.chosen is not None:
            self._client_auth(judge, connection, ts, upgrade, record)
        upgrade.server.append(record.name)
        if record.name in (ENCRYPTED, ALERT_NAME, NOT_TLS):
            del self._upgrades[connection.name]

    def tick(self, judge, now):
        while self._deadlines and self._deadlines[0][0] <= now:
            _, name = heappop(self._deadlines)
            upgrade, connection = self._upgrades.get(name), judge.connections[name]
            if upgrade is None or upgrade.broker_spoke or not connection.open:
                continue
            if connection.unseen_at(now):
                self.skip("ID-31", TAIL_LOST)
                continue
            self.report("ID-31", BROKER, now, name, "the broker's handshake, or its close at the 5 s deadline",
                        f"neither {now - upgrade.answered_at:.1f} s after the JSON answer")
        self.due = self._deadlines[0][0] if self._deadlines else float("inf")
        judge.want_tick(self.due)

    def closed(self, judge, connection):
        self._upgrades.pop(connection.name, None)
        self._early.pop(connection.name, None)

    # ---- the client's records, the version, the client certificate ------------------------------------------
    @staticmethod
    def _client(upgrade: Upgrade, record: Record) -> None:
        if upgrade.client_first is None:
            upgrade.client_first = record
            if record.name == "client_hello":
                upgrade.offered = record.versions
        elif record.name == "certificate" and record.certificates == 0:
            upgrade.empty_certificate = True

    def _version(self, judge, connection, ts, upgrade: Upgrade, record: Record) -> None:
        """T-17: the ServerHello's version, or the protocol_version alert, against the minimum."""
        offered = upgrade.offered
        if not offered:
            self.skip("T-17", "the ClientHello's versions are not in the traffic")
            return
        told = judge.tls_policy.min_version if judge.tls_policy is not None else None
        accepted, refused = self._held(judge, ts, self._accepted), self._held(judge, ts, self._refused)
        chosen = upgrade.chosen
        if told is not None:
            expected = "a ServerHello" if max(offered) >= told else "the protocol_version alert"
            if (chosen is None) != (max(offered) < told) or (chosen is not None and chosen < told):
                self._report_version(connection, ts, upgrade, record, f"{expected}: --tls-min-version="
                                     f"{VERSION_NAMES[told]}")
        elif chosen is not None and refused is not None and chosen <= refused.value:
            self._report_version(connection, ts, upgrade, record, f"no version up to {VERSION_NAMES.get(refused.value)}"
                                 f" accepted, as before ({refused.evidence})")
        elif chosen is None and accepted is not None and max(offered) >= accepted.value:
            self._report_version(connection, ts, upgrade, record, f"{VERSION_NAMES.get(accepted.value)} accepted, as "
                                 f"before ({accepted.evidence})")
        elif accepted is None and refused is None:
            self.skip("T-17", NO_MINIMUM)
        evidence = f"{connection.name}: {record.describe()} to a ClientHello of " \
                   f"{', '.join(VERSION_NAMES.get(v, hex(v)) for v in offered)}"
        if chosen is not None and (accepted is None or chosen < accepted.value):
            self._accepted = Shown(ts, evidence, chosen)
        elif chosen is None and (refused is None or max(offered) > refused.value):
            self._refused = Shown(ts, evidence, max(offered))

    def _report_version(self, connection, ts, upgrade, record, expected: str) -> None:
        offered = ", ".join(VERSION_NAMES.get(version, hex(version)) for version in upgrade.offered)
        self.report("T-17", BROKER, ts, connection.name, expected, f"{record.describe()} to a ClientHello of {offered}")

    def _client_auth(self, judge, connection, ts, upgrade: Upgrade, record: Record) -> None:
        """ID-32 under TLS 1.2: the CertificateRequest in the broker's first flight, and an alert, not its Finished,
        after a client's empty Certificate where it asked for one."""
        if upgrade.chosen != TLS12:
            if upgrade.chosen is not None and upgrade.chosen > TLS12 and record.name == ENCRYPTED:
                self.skip("ID-32", TLS13_HIDES)
            return
        if record.name == "certificate_request":
            upgrade.certificate_request = True
        elif record.name == "server_hello_done":
            upgrade.certificate_request = bool(upgrade.certificate_request)
            self._asked(judge, connection, ts, upgrade.certificate_request)
        elif record.name == ENCRYPTED and upgrade.empty_certificate and upgrade.certificate_request:
            # Go's RequireAnyClientCert and RequireAndVerifyClientCert both refuse it (alertBadCertificate)
            self.report("ID-32", BROKER, ts, connection.name, "an alert: the broker asked for a client certificate "
                        "and the client's Certificate carried none", "the broker's ChangeCipherSpec")

    def _asked(self, judge, connection, ts, asked: bool) -> None:
        told = judge.tls_policy
        shown = self._held(judge, ts, self._asks)
        expected = None
        if told is not None:
            if asked != (told.client_auth is not None):
                expected = f"--tls-client-auth-policy={told.client_auth or '(none)'}"
        elif shown is not None and shown.value != asked:
            expected = f"as before ({shown.evidence})"
        else:
            self.skip("ID-32", "the client auth policy is neither told nor shown yet (no TLS 1.2 handshake before)")
        if expected is not None:
            self.report("ID-32", BROKER, ts, connection.name, f"{'a' if not asked else 'no'} CertificateRequest: "
                        f"{expected}", f"{'a' if asked else 'no'} CertificateRequest in the TLS 1.2 flight")
        if shown is None or shown.value != asked:
            self._asks = Shown(ts, f"{connection.name}: {'a' if asked else 'no'} CertificateRequest", asked)

    def _held(self, judge, now: float, shown: Shown | None) -> Shown | None:
        if shown is None or shown.holds(judge, now):
            return shown
        for item in self.ITEMS[1:]:
            self.skip(item, RESTARTED)
        if shown is self._accepted:
            self._accepted = None
        elif shown is self._refused:
            self._refused = None
        else:
            self._asks = None
        return None
