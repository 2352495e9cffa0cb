"""What a timed phase (publish or consume) yields, whichever load generator ran it."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


class PhaseTimeout(RuntimeError):
    """A phase did not finish within its time limit."""


@dataclass(frozen=True)
class PhaseResult:
    messages: int
    seconds: float

    @property
    def msgs_per_second(self) -> int:
        return round(self.messages / self.seconds) if self.seconds > 0 else 0

    def as_json(self) -> dict:
        return {"messages": self.messages, "seconds": round(self.seconds, 3), "msgs_per_second": self.msgs_per_second}


def wait_until(condition: Callable[[], bool], timeout: float, interval: float, what: str) -> None:
    """Call `condition` every `interval` seconds until it holds; PhaseTimeout after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"{what}: not done after {timeout:.0f} s")
        time.sleep(interval)
