"""The behaviour catalogue (``conformance/spec/*.toml``): what nsqd and nsqlookupd do, item by item, in our
own words, with the recordings that show it and the Go source it comes from.

Two kinds of ID live in this project. Behaviour items (``C-01``, ``P-TOUCH-04``, ``D-12``, ``R-01``, ``T-07``,
``L-HTTP-06``, ...) are facts about the real brokers, one per item here. Suite requirements (``NSQ-PUB-003``,
``NSQLOOKUPD-HTTP-002``) live in ``requirements.toml`` and name the behaviour items they judge in ``source``.

An item's fields: ``id``, ``level``, ``text``, ``observable`` (what a client sees), ``capture`` (below),
``recordings`` (``rec-NNNN`` transcripts in ``fixtures/``) and ``source`` (the nsqd or nsqlookupd Go code it comes
from); optionally ``not_checkable`` (a MUST or SHOULD item no black-box case can judge, and why), ``since`` and
``until`` (the first nsqd release that has the item, the first that no longer does: ``versions.py``).

The client requirements (``NSQC-CONN-001``, ``clients.toml``) are items here too, each judged by the client case
of conformance/clients/cases/ marked with it.

``capture`` says whether a capture of the traffic (the broker's TCP and HTTP, both ways; for the client items, the
client's) can judge the item, in one of five forms:

- ``"monitor"``: a monitor of ``nsq_protocol.monitors`` (``MONITORS``, ``CLIENT_MONITORS``, ``LOOKUPD_MONITORS``)
  lists the item in its ``ITEMS`` (and only then);
- ``"needs a monitor: <what it would take>"``: the traffic shows it, no monitor judges it yet;
- ``"capture cannot judge: <why>"``: the traffic shows it, but no monitor can tell from a capture alone whether the
  broker kept to it (it turns on a timing the capture's clock cannot resolve, a random choice, a value only the
  broker's memory holds);
- ``"not on the wire: <why>"``: no capture shows it: the broker's disk, its process (signals, restarts, its exit,
  its log), its memory or clock, or what TLS encrypts;
- ``"as <IDs>"``: a deviation restating those items, whose capture it shares.

A flag a capture does not carry (``--max-rdy-count``) does not make an item "not on the wire": what the broker does
with it is on the wire, and a monitor can be told the flag.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from conformance.catalogue import LEVELS, Requirement, requirements
from conformance.versions import NsqVersion, Span, VersionError

SPEC_DIR = Path(__file__).parent / "spec"
REQUIRED = frozenset({"id", "level", "text", "observable", "capture", "recordings", "source"})
FIELDS = REQUIRED | {"not_checkable", "since", "until"}
MONITOR, NEEDS_MONITOR, CANNOT_JUDGE = "monitor", "needs a monitor", "capture cannot judge"
NOT_ON_THE_WIRE, RESTATES = "not on the wire", "as"
CAPTURE_KINDS = (MONITOR, NEEDS_MONITOR, CANNOT_JUDGE, NOT_ON_THE_WIRE, RESTATES)
BEHAVIOUR_ID = re.compile(r"[A-Z]+(?:-[A-Z]+)*-\d{2}|NSQC-[A-Z]+-\d{3}")
RECORDING_ID = re.compile(r"rec-\d{4}")
REQUIREMENT_ID = re.compile(r"NSQ(?:LOOKUPD)?-[A-Z0-9]+-\d{3}")


class SpecError(ValueError):
    """A catalogue file that does not load: the message names the file and the item."""


@dataclass(frozen=True)
class Behaviour:
    id: str
    level: str
    text: str
    observable: str
    capture: str
    recordings: tuple[str, ...]
    source: str
    not_checkable: str | None
    section: str
    releases: Span = Span()  # the nsqd releases that have it

    @property
    def prefix(self) -> str:
        """``P-TOUCH-04`` -> ``P-TOUCH``."""
        return self.id.rsplit("-", 1)[0]

    @property
    def capture_kind(self) -> str:
        """One of ``CAPTURE_KINDS``."""
        return capture_parts(self.capture)[0]

    @property
    def restates(self) -> tuple[str, ...]:
        """The items an ``"as D-02, D-03"`` item restates; none for the other kinds."""
        kind, detail = capture_parts(self.capture)
        return tuple(detail.split(", ")) if kind == RESTATES else ()


def capture_parts(value: str) -> tuple[str, str]:
    """``"needs a monitor: why"`` -> ``("needs a monitor", "why")``; ``"as D-02"`` -> ``("as", "D-02")``;
    ``"monitor"`` -> ``("monitor", "")``. ValueError for anything else, or a kind without its reason or IDs."""
    if value == MONITOR:
        return MONITOR, ""
    if value.startswith(f"{RESTATES} "):
        identifiers = [part.strip() for part in value[len(RESTATES) + 1:].split(",")]
        if not all(BEHAVIOUR_ID.fullmatch(identifier) for identifier in identifiers):
            raise ValueError(f"capture {value!r}: 'as' takes behaviour IDs separated by commas")
        return RESTATES, ", ".join(identifiers)
    kind, _, detail = value.partition(": ")
    if kind not in (NEEDS_MONITOR, CANNOT_JUDGE, NOT_ON_THE_WIRE):
        raise ValueError(f"capture {value!r} is none of 'monitor', 'needs a monitor: <what it would take>', "
                         "'capture cannot judge: <why>', 'not on the wire: <why>', 'as <IDs>'")
    if not detail.strip():
        raise ValueError(f"capture {value!r} gives no reason")
    return kind, detail


@cache
def behaviours() -> dict[str, Behaviour]:
    catalogue: dict[str, Behaviour] = {}
    for path in sorted(SPEC_DIR.glob("*.toml")):
        for entry in tomllib.loads(path.read_text()).get("behaviour", ()):
            item = _behaviour(path, entry)
            if item.id in catalogue:
                raise SpecError(f"{path.name}: {item.id} is already in {catalogue[item.id].section}.toml")
            catalogue[item.id] = item
    for item in catalogue.values():
        for restated in item.restates:
            if restated not in catalogue or catalogue[restated].restates:
                raise SpecError(f"{item.section}.toml: {item.id}: capture restates {restated}, which is not an item "
                                "with a capture of its own")
    return catalogue


def _behaviour(path: Path, entry: dict) -> Behaviour:
    name = f"{path.name}: {entry.get('id', '<no id>')}"
    missing = REQUIRED - entry.keys()
    if missing:
        raise SpecError(f"{name}: missing {', '.join(sorted(missing))}")
    if entry.keys() - FIELDS:
        raise SpecError(f"{name}: unknown field(s) {', '.join(sorted(entry.keys() - FIELDS))}")
    if not BEHAVIOUR_ID.fullmatch(entry["id"]):
        raise SpecError(f"{name}: not a behaviour ID (like D-12, P-TOUCH-04 or NSQC-CONN-001)")
    if entry["level"] not in LEVELS:
        raise SpecError(f"{name}: level {entry['level']!r} is not one of {LEVELS}")
    if not all(RECORDING_ID.fullmatch(recording) for recording in entry["recordings"]):
        raise SpecError(f"{name}: recordings must be rec-NNNN")
    if "not_checkable" in entry and entry["level"] not in ("MUST", "SHOULD"):
        raise SpecError(f"{name}: not_checkable is for MUST and SHOULD items only")
    try:
        capture_parts(entry["capture"])
        releases = Span.of(entry.get("since"), entry.get("until"))
    except (ValueError, VersionError) as exc:
        raise SpecError(f"{name}: {exc}") from None
    return Behaviour(entry["id"], entry["level"], entry["text"], entry["observable"], entry["capture"],
                     tuple(entry["recordings"]), entry["source"], entry.get("not_checkable"), path.stem, releases)


def behaviour_ids_of(requirement: Requirement) -> tuple[str, ...]:
    """The behaviour items a requirement judges, from its ``source = "C-01, C-22"``."""
    return tuple(part.strip() for part in requirement.source.split(",") if part.strip())


@cache
def requirements_of(behaviour_id: str) -> tuple[Requirement, ...]:
    return tuple(requirement for requirement in requirements().values()
                 if behaviour_id in behaviour_ids_of(requirement))


@cache
def cited_id_pattern() -> re.Pattern:
    """A behaviour ID as a whole word, for the prefixes the catalogue has (``D-12``, but not inside ``ID-12``,
    ``D-120`` or ``P-RST-12``), or a requirement ID (``NSQ-ID-012``)."""
    prefixes = sorted({item.prefix for item in behaviours().values() if not item.id.startswith("NSQC-")}, key=len,
                      reverse=True)
    alternatives = "|".join(re.escape(prefix) for prefix in prefixes)
    return re.compile(rf"(?<![\w-])(?:(?:{alternatives})-\d{{2}}|{REQUIREMENT_ID.pattern}|NSQC-[A-Z0-9]+-\d{{3}})"
                      r"(?![\w-])")


def not_in_version(item_ids: list[str], version: NsqVersion) -> str | None:
    """Why what judges these behaviour items is not judged against ``version`` (UNSUPPORTED): that release has
    none of them. None: it has some."""
    items = [behaviours()[item_id] for item_id in item_ids]
    if not items or any(item.releases.has(version) for item in items):
        return None
    return f"not in {version.label}: " + ", ".join(f"{item.id} is {item.releases}" for item in items)
