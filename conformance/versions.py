"""Which release of nsqd and nsqlookupd the suite judges against (``--nsq-version``, default 1.3.0).

Behaviour changes between releases: nsqd 1.2.0 added ``client_count`` to /stats channels, 1.3.0 renamed an error
text, master after 1.3.0 added the topology fields. A catalogue item that not every release has names the first
release that has it (``since``) or the first that no longer does (``until``); an item outside the chosen version is
not judged: a case that judges only such items is UNSUPPORTED, saying "not in nsqd vX", and a case whose
expectation differs by version asks ``case.has(ITEM)``. ``master`` is the source after the newest release (the
recordings' build): it comes after every release, so an item ``since = "master"`` is judged only when the user
asks for it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT = "1.3.0"
MASTER = "master"
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.]+)?")  # v1.0.0-compat is the 1.0.0 release rebuilt
_AFTER_EVERY_RELEASE = (1 << 31,)


class VersionError(ValueError):
    """Not a release (``1.2.1``, ``v1.0.0-compat``) nor ``master``."""


@dataclass(frozen=True, order=True)
class NsqVersion:
    key: tuple[int, ...]
    name: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> NsqVersion:
        if text == MASTER:
            return cls(_AFTER_EVERY_RELEASE, MASTER)
        match = _RELEASE.fullmatch(text)
        if not match:
            raise VersionError(f"{text!r} is not an nsqd version (X.Y.Z, e.g. 1.2.1, or {MASTER})")
        return cls(tuple(int(part) for part in match.groups()[:3]), text.removeprefix("v"))

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """``nsqd v1.2.1``, ``nsqd master``: how a reason names it."""
        return f"nsqd {self.name}" if self.name == MASTER else f"nsqd v{self.name}"


@dataclass(frozen=True)
class Span:
    """The releases that have an item: from ``since`` (None: every earlier one) up to, not including, ``until``
    (None: every later one)."""
    since: NsqVersion | None = None
    until: NsqVersion | None = None

    @classmethod
    def of(cls, since: str | None, until: str | None) -> Span:
        span = cls(NsqVersion.parse(since) if since else None, NsqVersion.parse(until) if until else None)
        if span.since and span.until and not span.since < span.until:
            raise VersionError(f"since {since} is not before until {until}")
        return span

    def has(self, version: NsqVersion) -> bool:
        return (self.since is None or self.since <= version) and (self.until is None or version < self.until)

    def __str__(self) -> str:
        return " ".join(part for part in (f"since {self.since}" if self.since else "",
                                          f"until {self.until}" if self.until else "") if part) or "every version"
