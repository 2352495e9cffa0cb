"""Fixtures: a real reference broker process on loopback."""
from __future__ import annotations

import pytest

from reference_broker.launcher import running_broker


@pytest.fixture
def broker():
    with running_broker() as running:
        yield running
