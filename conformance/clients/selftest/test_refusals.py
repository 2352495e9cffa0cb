"""The fake nsqd refuses what nsqd v1.3.0 refuses, with nsqd's words: IDENTIFY values out of bounds in nsqd's order
of validation (ID-02, ID-03, ID-04, ID-05, ID-06, ID-07, ID-08), and MPUB bodies it cannot read (P-MPUB-02)."""
from conformance.clients.fake_nsqd import mpub_refusal
from nsq_protocol import wire
from nsq_protocol.monitors.client_identify import identify_refusal


def test_identify_bounds_as_nsqd():
    assert identify_refusal({"heartbeat_interval": 1000, "output_buffer_size": 16384, "output_buffer_timeout": 250,
                             "sample_rate": 0, "msg_timeout": 0}) is None
    assert identify_refusal({"heartbeat_interval": -1, "output_buffer_size": -1, "msg_timeout": None}) is None
    assert identify_refusal({"heartbeat_interval": 1}) == "IDENTIFY heartbeat interval (1) is invalid"  # ID-02
    assert identify_refusal({"heartbeat_interval": 60001}) == "IDENTIFY heartbeat interval (60001) is invalid"
    assert identify_refusal({"heartbeat_interval": 1000.0}) == "IDENTIFY failed to decode JSON body"  # Go's int
    assert identify_refusal({"output_buffer_timeout": 24}) == "IDENTIFY output buffer timeout (24) is invalid"
    assert identify_refusal({"output_buffer_size": 63}) == "IDENTIFY output buffer size (63) is invalid"
    assert identify_refusal({"sample_rate": 100}) == "IDENTIFY sample rate (100) is invalid"
    assert identify_refusal({"msg_timeout": 999}) == "IDENTIFY msg timeout (999) is invalid"
    # ID-05, ID-08: the buffer timeout before the buffer size, the heartbeat before both
    assert identify_refusal({"heartbeat_interval": 5, "output_buffer_timeout": 1, "output_buffer_size": 1}) == \
        "IDENTIFY heartbeat interval (5) is invalid"
    assert identify_refusal({"output_buffer_timeout": 1, "output_buffer_size": 1}) == \
        "IDENTIFY output buffer timeout (1) is invalid"


def test_mpub_bodies_as_nsqd():
    assert mpub_refusal(wire.mpub_body([b"a", b"bc"])) is None
    assert mpub_refusal(wire.mpub_body([])) == b"E_BAD_BODY MPUB invalid message count 0"
    count_plus_one = (3).to_bytes(4, "big") + wire.mpub_body([b"a", b"bc"])[4:]
    assert mpub_refusal(count_plus_one) == b"E_BAD_MESSAGE MPUB failed to read message(2) body size"
    assert mpub_refusal(wire.mpub_body([b"abcd"])[:-2]) == b"E_BAD_MESSAGE MPUB failed to read message body"


def test_an_mpub_whose_count_reads_past_its_size_shows_framed_by_the_size():
    from conformance.clients.fake_nsqd import NsqdDecoder
    decoder = NsqdDecoder()
    count_plus_one = (3).to_bytes(4, "big") + wire.mpub_body([b"a", b"bc"])[4:]
    assert decoder.feed(wire.MAGIC_V2 + wire.encode_command("MPUB", "t", body=count_plus_one)) == []
    overrun = decoder.overrun_mpub()
    assert overrun is not None and overrun.body == count_plus_one and overrun.params == (b"t",)
    whole = NsqdDecoder()
    whole.feed(wire.MAGIC_V2 + wire.encode_command("MPUB", "t", body=wire.mpub_body([b"a"]))[:-1])
    assert whole.overrun_mpub() is None, "a body still coming"
