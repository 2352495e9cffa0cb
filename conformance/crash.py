"""The target of the crash cases (D-70, D-71, D-72, D-73, D-74, D-75, D-76, P-RST-*, R-* in conformance/spec/): one the
suite can SIGKILL as well as restart, whose data path it may read, registered with a fake nsqlookupd from its start so
that what it registers after a restart is seen.

The embedded broker: one of the case's own (a kill must not cut other cases off), with the profile's flags and
``--lookupd-tcp-address`` of a fake nsqlookupd of its own. A target the user started: ``--restart-command``,
``--kill-command``, ``--data-path`` and ``--lookupd-listen`` say what the suite can do with it; a case that needs
what is missing is UNSUPPORTED, saying which."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from conformance import embedded as programs
from conformance.case import Case, Target
from conformance.client import Unsupported
from conformance.lookupd_fake import FakeLookupd
from conformance.options import Settings
from conformance.target import restart_with_command


@contextlib.contextmanager
def embedded(settings: Settings, authd_address: str | None, log_path: Path) -> Iterator[Target]:
    """A reference broker of the case's own, registered with a fake nsqlookupd of its own. It has no liveness check
    (its death concerns no other case, and the cases kill it on purpose)."""
    lookupd = FakeLookupd().start()
    try:
        with programs.nsqd(settings, log_path, authd_address, lookupd) as target:
            yield dataclasses.replace(target, health=None)
    finally:
        lookupd.stop()


def given(settings: Settings, lookupd: FakeLookupd | None) -> Target:
    """The user's target, with what its options let the suite do."""
    addresses = [address for address in (settings.tcp, settings.http) if address]

    def by(command: str | None, option: str):
        return (lambda: restart_with_command(command, addresses, option=option)) if command else None

    return Target(settings.profile, settings.tcp, settings.http, settings.time_scale,
                  by(settings.restart_command, "--restart-command"),
                  https=settings.https, tls=settings.tls, kill=by(settings.kill_command, "--kill-command"),
                  data_path=settings.data_path, lookupd=lookupd)


def require(case: Case, *needs: str) -> None:
    """UNSUPPORTED, saying why, unless the profile and the options give the case what it ``needs``: ``restart``,
    ``kill``, ``data_path``, ``lookupd``."""
    target, capabilities = case.target, case.profile.capabilities
    missing = {
        "restart": (not capabilities.get("restart") or target.restart is None,
                    "a restart (capability restart, and --restart-command for a target the user started)"),
        "kill": (not capabilities.get("kill") or target.kill is None,
                 "a SIGKILL (capability kill, and --kill-command for a target the user started)"),
        "data_path": (not capabilities.get("data_path") or target.data_path is None,
                      "the target's files (capability data_path, and --data-path for a target the user started)"),
        "lookupd": (target.lookupd is None,
                    "a fake nsqlookupd the target registers with from its start (--lookupd-listen for a target the "
                    "user started)"),
    }
    for need in needs:
        absent, what = missing[need]
        if absent:
            raise Unsupported(f"profile {case.profile.name}: the case needs {what}")
