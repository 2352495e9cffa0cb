"""The client monitors name client faults from the traffic and the application's settings (passive.py): a few
quick faults, each of a different rule, must be named by the right item;
``python -m conformance.clients.selftest.passive`` measures them all."""
import pytest

from conformance.clients.selftest.faults import FAULTS
from conformance.clients.selftest.passive import run_fault

QUICK = ("bad-magic", "identify-not-json", "nop-dropped", "fin-other-id", "close-on-fin-failed", "auth-dropped",
         "sub-other-channel", "req-delay-changed")


@pytest.mark.parametrize("name", QUICK)
def test_fault_is_named_from_the_traffic(name, tmp_path):
    result = run_fault(FAULTS[name], tmp_path)
    assert result["status"] == "named", (f"{name} ({FAULTS[name].text}): {result['status']} "
                                         f"{result.get('why', '')}; monitors: {result.get('client_items')}, "
                                         f"expected one of {result['expected_items']}")
