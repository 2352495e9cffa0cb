"""The embedded reference programs as targets: the one place the suite starts them (``python -m conformance``'s
shared broker, the plugin's brokers of a worker's or a case's own, the nsqlookupd). Each is a subprocess on free
loopback ports with its profile's flags (``target.py``), never imported; it comes with its liveness check and
the way the suite restarts it (``liveness.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from conformance.case import LookupdTarget, Target
from conformance.liveness import PROBE_SECONDS, TargetHealth, probe_lookupd, probe_nsqd
from conformance.lookupd_fake import FakeLookupd
from conformance.options import EMBEDDED_TLS, Settings, tls_client
from conformance.target import EmbeddedBroker, EmbeddedLookupd


@contextlib.contextmanager
def nsqd(settings: Settings, log_path: Path, authd_address: str | None,
         lookupd: FakeLookupd | None = None) -> Iterator[Target]:
    """A reference nsqd with the profile's flags (and ``--lookupd-tcp-address`` of ``lookupd``, which it then
    registers with from its start), as a Target the suite can restart, SIGKILL and read the data path of.
    Raises TargetError when it does not start."""
    profile = settings.profile
    if lookupd is not None:
        profile = dataclasses.replace(profile, broker_flags=(*profile.broker_flags,
                                                             "--lookupd-tcp-address=%s:%d" % lookupd.address))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(profile, log_path, authd_address=authd_address)
    broker.start()

    def revive() -> str:
        broker.restart()
        return "the suite restarted the embedded reference broker on the same ports and data path"

    tls = tls_client(EMBEDDED_TLS.get)
    https = settings.profile.offers("tls_required") == "true"

    def probe() -> str | None:
        if broker.tcp_address is None:
            return "the embedded reference broker is not running (it did not start again after a restart)"
        http = broker.https_address if https else broker.http_address
        return probe_nsqd(broker.tcp_address, http, PROBE_SECONDS * settings.time_scale,
                          tls.context() if https else None)

    try:
        yield Target(settings.profile, broker.tcp_address, broker.http_address, settings.time_scale, broker.restart,
                     https=broker.https_address, tls=tls, health=TargetHealth("embedded reference nsqd", probe, revive),
                     kill=broker.kill, data_path=broker.data_path, lookupd=lookupd)
    finally:
        broker.stop()


@contextlib.contextmanager
def nsqlookupd(settings: Settings, log_path: Path) -> Iterator[LookupdTarget]:
    """A reference nsqlookupd with the lookupd profile's flags. Raises TargetError when it does not start."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lookupd = EmbeddedLookupd(log_path, settings.lookupd_profile)
    lookupd.start()

    def revive() -> str:
        lookupd.restart()
        return "the suite restarted the embedded reference nsqlookupd on the same ports"

    health = TargetHealth("embedded reference nsqlookupd", lambda: probe_lookupd(
        lookupd.tcp_address, lookupd.http_address, PROBE_SECONDS * settings.time_scale), revive)
    try:
        yield LookupdTarget(lookupd.tcp_address, lookupd.http_address, settings.time_scale,
                            settings.lookupd_profile.limits, health)
    finally:
        lookupd.stop()
