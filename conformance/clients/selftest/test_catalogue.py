"""The client requirements and the client cases are one to one: every NSQC item of conformance/spec/clients.toml
has exactly one case marked with it, and every case is marked with an item (the broker catalogue's test_spec.py
then holds the items to the catalogue's rules: level, observable, source, cited IDs)."""
from conformance.clients.catalogue import REQUIREMENTS, SECTIONS
from conformance.explain import client_cases


def test_every_item_has_one_case_and_every_case_an_item():
    cases = client_cases()
    assert cases.keys() == REQUIREMENTS.keys(), sorted(cases.keys() ^ REQUIREMENTS.keys())
    assert {identifier: found for identifier, found in cases.items() if len(found) != 1} == {}


def test_every_item_is_in_a_section():
    assert {requirement.section for requirement in REQUIREMENTS.values()} == SECTIONS.keys()
