"""The requirement catalogue (``requirements.toml``): stable IDs, levels, sentences, sources."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CATALOGUE_PATH = Path(__file__).parent / "requirements.toml"
LEVELS = ("MUST", "SHOULD", "MAY")


@dataclass(frozen=True)
class Requirement:
    id: str
    level: str
    text: str
    source: str
    recordings: tuple[str, ...]

    @property
    def section(self) -> str:
        """``NSQ-PUB-003`` -> ``PUB``; ``NSQLOOKUPD-HTTP-002`` -> ``NSQLOOKUPD-HTTP`` (nsqlookupd's own)."""
        prefix, section = self.id.split("-")[:2]
        return section if prefix == "NSQ" else f"{prefix}-{section}"


@cache
def requirements() -> dict[str, Requirement]:
    document = tomllib.loads(CATALOGUE_PATH.read_text())
    catalogue: dict[str, Requirement] = {}
    for entry in document["requirement"]:
        requirement = Requirement(entry["id"], entry["level"], entry["text"], entry["source"],
                                  tuple(entry.get("recordings", ())))
        if requirement.level not in LEVELS:
            raise ValueError(f"{requirement.id}: level {requirement.level!r} is not one of {LEVELS}")
        if requirement.id in catalogue:
            raise ValueError(f"{requirement.id} appears twice in {CATALOGUE_PATH.name}")
        catalogue[requirement.id] = requirement
    return catalogue
