"""Which release of nsqd and nsqlookupd the suite judges against (``--nsq-version``, default 1.3.0).

Behaviour changes between releases: nsqd 1.2.0 added ``client_count`` to /stats channels, 1.3.0 renamed an error
text, master after 1.3.0 added the topology fields. A catalogue item that not every release has names the first
release that has it (``since``) or the first that no longer does (``until``); an item outside the chosen version is
not judged: a case that judges only such items is UNSUPPORTED, saying "not in nsqd vX", and a case whose
expectation differs by version asks ``case.has(ITEM)``. ``master`` is the source after the newest release (the
recordings' build): it comes after every release, so an item ``since = "master"`` is judged only when the user
asks for it.

A broker that does what another release does is not broken: a case that fails is run again as each release that
expects otherwise of the versioned items it asked about (``releases_expecting_otherwise``), and one that passes
as such a release is NON-STRICT, naming it (conformance/plugin/verdicts.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable
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


RELEASES = tuple(NsqVersion.parse(text) for text in ("1.0.0-compat", "1.1.0", "1.2.0", "1.2.1", "1.3.0", MASTER))


def releases_expecting_otherwise(spans: Iterable[Span], judged: NsqVersion) -> list[tuple[NsqVersion, ...]]:
    """The releases that have not the same of these items as ``judged`` has, grouped by which they have (the
    releases of a group expect alike, so a case need run as one of them only), nearest ``judged`` first: the
    groups, and the releases in each."""
    spans = tuple(spans)
    ordered = sorted({*RELEASES, judged})

    def distance(release: NsqVersion) -> int:
        return abs(ordered.index(release) - ordered.index(judged))

    groups: dict[tuple[bool, ...], list[NsqVersion]] = {}
    for release in sorted(RELEASES, key=distance):
        expectation = tuple(span.has(release) for span in spans)
        if expectation != tuple(span.has(judged) for span in spans):
            groups.setdefault(expectation, []).append(release)
    return [tuple(group) for group in groups.values()]  # a dict keeps the order its keys came in: nearest first


def label_of(releases: tuple[NsqVersion, ...]) -> str:
    """``nsqd v1.2.1 (and v1.2.0, v1.1.0)``, ``nsqd master``: how a reason names a group of releases that expect
    alike, nearest the judged one first."""
    others = [release.label.removeprefix("nsqd ") for release in releases[1:]]
    return releases[0].label + (f" (and {', '.join(others)})" if others else "")
