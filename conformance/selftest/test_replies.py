"""A broker's JSON as a case reads it (client.HttpResponse.json): whatever its shape, a reading that finds nothing
there is a Mismatch, the broker's answer judged, never an exception of the harness that makes the case an ERROR."""

import pytest

from conformance.client import HttpResponse, Mismatch


def reply(body: bytes):
    return HttpResponse(200, {}, body).json()


@pytest.mark.parametrize(("body", "read"), [
    (b'{"topics": []}', lambda document: document["channels"]),
    (b'{"topics": []}', lambda document: document["topics"][0]),
    (b'[{"topic_name": "t"}]', lambda document: document["topics"]),  # a list where an object was due
    (b'{"topics": [[]]}', lambda document: document["topics"][0]["channels"]),
    (b'not json', lambda document: document),
])
def test_what_is_not_in_the_brokers_json_is_a_mismatch(body, read):
    with pytest.raises(Mismatch):
        read(reply(body))


def test_what_is_there_reads_as_plain_json():
    assert reply(b'{"topics": [{"topic_name": "t"}]}')["topics"][0] == {"topic_name": "t"}
