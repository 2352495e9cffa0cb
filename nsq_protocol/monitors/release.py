"""Which nsqd release the traffic's broker is: told by whoever runs the judge (the suite's ``--nsq-version``), or
shown on the wire (the IDENTIFY answer's ``version``, /info's). The monitors hold v1.3.0's rules; an item of an
older release (``until`` in the catalogue) is judged by this, and "not judged" where neither tells it."""

from __future__ import annotations

import re

Release = tuple[int, ...]  # (1, 3, 0); master comes after every release (conformance/versions.py)

V1_1, V1_2, V1_3 = (1, 1, 0), (1, 2, 0), (1, 3, 0)
UNKNOWN = "the broker's release is neither told nor shown (no IDENTIFY answer or /info in the traffic)"
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def parse(text) -> Release | None:
    """The release a ``version`` field names ("1.3.0", "1.2.1-alpha"), or None where it names none."""
    match = _VERSION.match(text) if isinstance(text, str) else None
    return tuple(int(part) for part in match.groups()) if match else None


def before(release: Release | None, first: Release) -> bool | None:
    """Whether ``release`` is older than ``first``; None where the release is not known."""
    return None if release is None else release < first
