"""IDENTIFY: responses, field ranges, repeated IDENTIFY, metadata (P-ID-01, P-ID-02, P-ID-03, P-ID-04,
ID-01, ID-02, ID-03, ID-04, ID-05, ID-06, ID-07, ID-08, ID-09, ID-10, ID-11, ID-12, ID-13, ID-14, ID-20, ID-21, ID-40,
ID-41 in conformance/spec/)."""

import time

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement
RESPONSE_KEYS = {"max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
                 "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
                 "output_buffer_size", "output_buffer_timeout"}  # ID-20; topology_* are master-only extras


def negotiate(nsq, **fields) -> dict:
    conn = nsq.connect()
    return conn.identify({"feature_negotiation": True, **fields})


@requirement("NSQ-ID-001")
def test_identify_without_negotiation_answers_ok(nsq):
    """IDENTIFY {} -> OK (P-ID-04, ID-09; rec-0043)."""
    nsq.connect().identify({"client_id": "conformance"})


@requirement("NSQ-ID-001", "NSQ-ID-010", "NSQ-AUTH-002")
def test_negotiated_response_reports_profile(nsq):
    """feature_negotiation:true -> one JSON document with every ID-20 key; limits match the profile
    and the defaults are reported (ID-20, LIM-01; rec-0044, rec-0240)."""
    limits = nsq.limits
    response = negotiate(nsq)
    missing = RESPONSE_KEYS - response.keys()
    nsq.verify.equal("IDENTIFY response keys (ID-20)", set(), missing)
    expected = {"max_rdy_count": limits["max_rdy_count"], "max_msg_timeout": limits["max_msg_timeout_ms"],
                "msg_timeout": limits["msg_timeout_ms"], "tls_v1": False, "deflate": False, "snappy": False,
                "sample_rate": 0, "auth_required": nsq.profile.capabilities["auth"],
                "output_buffer_size": limits["output_buffer_size"],
                "output_buffer_timeout": limits["output_buffer_timeout_ms"],
                "max_deflate_level": limits["max_deflate_level"]}
    nsq.verify.equal("IDENTIFY response values vs the profile", expected,
                     {key: response.get(key) for key in expected})
    nsq.verify.soft_equal("deflate_level reported without deflate (ID-20: min(6, max); before 1.1.0 0, ID-44)",
                          min(6, limits["max_deflate_level"]) if nsq.has("ID-11") else 0, response.get("deflate_level"))


@requirement("NSQ-ID-002")
def test_identify_is_repeatable_before_sub(nsq):
    """IDENTIFY three times, each answered, then SUB works (P-ID-02; rec-0045)."""
    conn = nsq.connect()
    conn.identify({})
    response = conn.identify({"feature_negotiation": True, "msg_timeout": 5000})
    nsq.verify.equal("second IDENTIFY's msg_timeout", 5000, response["msg_timeout"])
    conn.identify({"client_id": "third"})
    conn.subscribe(nsq.topic(), "c")


@requirement("NSQ-ID-002")
def test_identify_after_sub_is_fatal(nsq):
    """(P-ID-01; rec-0046)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("IDENTIFY", body=b"{}")
    conn.expect_error("E_INVALID", "cannot IDENTIFY in current state")


@requirement("NSQ-ID-004")
def test_identify_body_size_zero(nsq):
    """(P-ID-03; rec-0048)"""
    conn = nsq.connect()
    conn.send(b"IDENTIFY\n\x00\x00\x00\x00")  # size 0
    conn.expect_error("E_BAD_BODY", "IDENTIFY invalid body size 0")


@requirement("NSQ-ID-004")
def test_identify_body_too_big(nsq):
    """Size max-body-size + 1: rejected before the body is read (P-ID-03; rec-0231)."""
    size = nsq.limits["max_body_size"] + 1
    conn = nsq.connect()
    conn.send(b"IDENTIFY\n" + size.to_bytes(4, "big"))
    conn.expect_error("E_BAD_BODY", f"IDENTIFY body too big {size} > {size - 1}")


@requirement("NSQ-ID-003")
@pytest.mark.parametrize("body", [b"{not json", b"[1,2]", b'{"heartbeat_interval":"abc"}',
                                  b'{"heartbeat_interval":1000.5}'],
                         ids=["not-json", "array", "wrong-type", "fractional-int"])
def test_identify_undecodable_body(nsq, body):
    """(P-ID-03; rec-0049, rec-0050, rec-0058, rec-0059)"""
    conn = nsq.connect()
    conn.command("IDENTIFY", body=body)
    conn.expect_error("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


@requirement("NSQ-ID-003")
def test_identify_null_and_empty_object(nsq):
    """Bodies 'null' and '{}' are accepted (P-ID-03; rec-0051)."""
    conn = nsq.connect()
    conn.command("IDENTIFY", body=b"null")
    conn.expect_response(b"OK")
    conn.identify({})
    conn.subscribe(nsq.topic(), "c")


@requirement("NSQ-ID-005")
def test_identify_keys_are_case_insensitive(nsq):
    """Feature_Negotiation and MSG_TIMEOUT work; unknown keys are ignored (ID-14; rec-0057)."""
    response = nsq.connect().identify({"Feature_Negotiation": True, "MSG_TIMEOUT": 5000, "no_such_key": 1})
    nsq.verify.equal("msg_timeout set via MSG_TIMEOUT", 5000, (response or {}).get("msg_timeout"), "ID-14")


INVALID_FIELDS = [
    ("heartbeat_interval", 999, "heartbeat interval (999) is invalid"),
    ("heartbeat_interval", -2, "heartbeat interval (-2) is invalid"),
    ("heartbeat_interval", "MAX_HB+1", "heartbeat interval (MAX_HB+1) is invalid"),
    ("output_buffer_timeout", "MIN_OBT-1", "output buffer timeout (MIN_OBT-1) is invalid"),
    ("output_buffer_timeout", 1, "output buffer timeout (1) is invalid"),
    ("output_buffer_timeout", "MAX_OBT+1", "output buffer timeout (MAX_OBT+1) is invalid"),
    ("output_buffer_size", 63, "output buffer size (63) is invalid"),
    ("output_buffer_size", "MAX_OBS+1", "output buffer size (MAX_OBS+1) is invalid"),
    ("sample_rate", -1, "sample rate (-1) is invalid"),
    ("sample_rate", 100, "sample rate (100) is invalid"),
    ("msg_timeout", 999, "msg timeout (999) is invalid"),
    ("msg_timeout", -1, "msg timeout (-1) is invalid"),
    ("msg_timeout", "MAX_MT+1", "msg timeout (MAX_MT+1) is invalid"),
]


@requirement("NSQ-ID-006", "NSQ-ID-007", "NSQ-ID-008")
@pytest.mark.parametrize("field, value, text", INVALID_FIELDS,
                         ids=[f"{field}={value}" for field, value, _ in INVALID_FIELDS])
def test_identify_field_out_of_range(nsq, field, value, text):
    """Out-of-range values are a fatal E_BAD_BODY naming the field (ID-02, ID-03, ID-04, ID-06, ID-07, ID-42;
    rec-0060..0077, rec-0241)."""
    minimum = smallest_output_buffer_timeout(nsq)
    limits = {"MAX_HB+1": nsq.limits["max_heartbeat_interval_ms"] + 1,
              "MIN_OBT-1": minimum - 1,
              "MAX_OBT+1": nsq.limits["max_output_buffer_timeout_ms"] + 1,
              "MAX_OBS+1": nsq.limits["max_output_buffer_size"] + 1,
              "MAX_MT+1": nsq.limits["max_msg_timeout_ms"] + 1}
    number = limits.get(value, value)
    if field == "output_buffer_timeout" and value in ("MIN_OBT-1", 1) and not nsq.has("ID-42"):
        # before 1.2.0 there is no minimum (ID-42): what 1.2.0 refuses is accepted and echoed
        accepted = max(nsq.limits["min_output_buffer_timeout_ms"] - 1, 1) if value == "MIN_OBT-1" else 1
        nsq.verify.equal(f"output_buffer_timeout {accepted} accepted and echoed (no minimum before 1.2.0: ID-42)",
                         accepted, negotiate(nsq, output_buffer_timeout=accepted)["output_buffer_timeout"])
        return
    if field == "output_buffer_timeout" and value in ("MIN_OBT-1", 1) and not 1 <= number < minimum:
        pytest.skip(f"profile {nsq.profile.name}: with min_output_buffer_timeout_ms {minimum}, {number} is not an "
                    "invalid timeout (0 keeps the default, -1 turns the flush off: ID-03)")
    conn = nsq.connect()
    conn.command("IDENTIFY", body=wire.identify_body({field: number}))
    conn.expect_error("E_BAD_BODY", "IDENTIFY " + text.replace(str(value), str(number)))


def smallest_output_buffer_timeout(nsq) -> int:
    """The smallest output_buffer_timeout the target accepts: the profile's minimum, since 1.2.0 (ID-42), else 1."""
    return nsq.limits["min_output_buffer_timeout_ms"] if nsq.has("ID-42") else 1


@requirement("NSQ-ID-006")
def test_heartbeat_interval_accepted_values(nsq):
    """max-heartbeat-interval, 0 (keep) and 1000 are accepted (ID-02; rec-0063)."""
    conn = nsq.connect()
    for value in (nsq.limits["max_heartbeat_interval_ms"], 0, 1000):
        conn.identify({"heartbeat_interval": value})


@requirement("NSQ-ID-007")
@pytest.mark.parametrize("field, requested, reported_size, reported_timeout", [
    ("output_buffer_timeout", "MIN_OBT", "default", "MIN_OBT"), ("output_buffer_timeout", -1, "default", 0),
    ("output_buffer_timeout", 0, "default", "default"), ("output_buffer_size", 64, 64, "default"),
    ("output_buffer_size", -1, 1, 0), ("output_buffer_size", 0, "default", "default")])
def test_output_buffer_effective_values(nsq, field, requested, reported_size, reported_timeout):
    """Each value on a fresh connection; the response reports the effective size/timeout
    (ID-03, ID-04, ID-43: -1 size forces timeout 0; rec-0067, rec-0070)."""
    minimum = smallest_output_buffer_timeout(nsq)
    requested, reported_timeout = (minimum if value == "MIN_OBT" else value for value in (requested, reported_timeout))
    response = negotiate(nsq, **{field: requested})
    defaults = {"size": nsq.limits["output_buffer_size"], "timeout": nsq.limits["output_buffer_timeout_ms"]}
    if field == "output_buffer_size" and requested == -1 and not nsq.has("ID-43"):
        reported_timeout = "default"  # before 1.2.0 size -1 left the timeout as it was
    expected = (defaults["size"] if reported_size == "default" else reported_size,
                defaults["timeout"] if reported_timeout == "default" else reported_timeout)
    nsq.verify.equal(f"effective (output_buffer_size, output_buffer_timeout) for {field}={requested}",
                     expected, (response["output_buffer_size"], response["output_buffer_timeout"]))


@requirement("NSQ-ID-008")
def test_sample_rate_and_msg_timeout_accepted_values(nsq):
    """sample_rate 99 and 0, msg_timeout 1000 and the max are accepted and echoed (ID-06, ID-07; rec-0074, rec-0078)."""
    maximum = nsq.limits["max_msg_timeout_ms"]
    for fields in ({"sample_rate": 99}, {"sample_rate": 0}, {"msg_timeout": 1000}, {"msg_timeout": maximum}):
        response = negotiate(nsq, **fields)
        for key, value in fields.items():
            nsq.verify.equal(f"echoed {key}", value, response[key])


@requirement("NSQ-ID-009")
def test_validation_order_timeout_before_size(nsq):
    """Both buffer values invalid: the timeout error wins (ID-05; rec-0071); before 1.2.0 the size's (ID-45)."""
    if not nsq.has("ID-05"):  # no minimum timeout then (ID-42): the maximum's successor is the invalid one
        timeout = nsq.limits["max_output_buffer_timeout_ms"] + 1
        conn = nsq.connect()
        conn.command("IDENTIFY", body=wire.identify_body({"output_buffer_timeout": timeout, "output_buffer_size": 1}))
        conn.expect_error("E_BAD_BODY", "IDENTIFY output buffer size (1) is invalid", judges="ID-45")
        return
    timeout = smallest_output_buffer_timeout(nsq) - 1  # below the minimum: invalid (ID-03)
    if timeout < 1:
        pytest.skip(f"profile {nsq.profile.name}: min_output_buffer_timeout_ms {timeout + 1} leaves no invalid "
                    "timeout below it")
    conn = nsq.connect()
    conn.command("IDENTIFY", body=wire.identify_body({"output_buffer_timeout": timeout, "output_buffer_size": 1}))
    conn.expect_error("E_BAD_BODY", f"IDENTIFY output buffer timeout ({timeout}) is invalid", judges="ID-05")


@requirement("NSQ-ID-009")
def test_validation_order_heartbeat_before_msg_timeout(nsq):
    """(ID-08; rec-0079)"""
    conn = nsq.connect()
    conn.command("IDENTIFY", body=wire.identify_body({"heartbeat_interval": 5, "msg_timeout": 5}))
    conn.expect_error("E_BAD_BODY", "IDENTIFY heartbeat interval (5) is invalid", judges="ID-08")


@requirement("NSQ-ID-011")
def test_features_ignored_without_negotiation(nsq):
    """tls_v1/snappy/deflate without feature_negotiation: plain OK and no upgrade (ID-10; rec-0080)."""
    conn = nsq.connect()
    conn.identify({"tls_v1": True, "snappy": True, "deflate": True})
    conn.publish(nsq.topic(), b"plain")


@requirement("NSQ-ID-012")
def test_snappy_and_deflate_together_fail(nsq):
    """(ID-12; rec-0084)"""
    nsq.require("snappy")
    nsq.require("deflate")
    conn = nsq.connect()
    conn.command("IDENTIFY", body=wire.identify_body({"feature_negotiation": True, "snappy": True,
                                                      "deflate": True}))
    conn.expect_error("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")


@requirement("NSQ-ID-013")
@pytest.mark.parametrize("requested, deflate", [(9, True), (-5, True), (3, False), (1, True)])
def test_deflate_level_is_clamped(nsq, requested, deflate):
    """Level 9 -> max, -5 -> 6, and without deflate the reported level is min(6, max) (ID-11; rec-0081..0083);
    level 1, within the max, is kept (the level the session's deflate stream then uses). Before 1.1.0 only a level
    of 0 or less with deflate gives min(6, max), all else 0 (ID-44)."""
    nsq.require("deflate")
    conn = nsq.connect()
    response = conn.identify({"feature_negotiation": True, "deflate": deflate, "deflate_level": requested})
    maximum = nsq.limits["max_deflate_level"]
    if nsq.has("ID-11"):
        expected, item = min(requested if (deflate and requested > 0) else 6, maximum), "ID-11"
    else:
        expected, item = min(6, maximum) if (deflate and requested <= 0) else 0, "ID-44"
    nsq.verify.equal("reported deflate_level", expected, response["deflate_level"], item)


@requirement("NSQ-ID-014", "NSQ-HTTP-008")
def test_metadata_shows_in_stats(nsq):
    """client_id/hostname/user_agent appear in /stats; a later IDENTIFY without them empties them
    (ID-01; rec-0054, rec-0056)."""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify({"client_id": "cid-1", "hostname": "host-1", "user_agent": "agent/1.0"})
    conn.subscribe(topic, "c")
    client = nsq.http.channel_stats(topic, "c")["clients"][0]
    nsq.verify.equal("client metadata in /stats", ("cid-1", "host-1", "agent/1.0"),
                     (client["client_id"], client["hostname"], client["user_agent"]), "ID-01")
    other = nsq.connect()
    other.identify({"client_id": "a", "hostname": "h", "user_agent": "u"})
    other.identify({})
    other.subscribe(topic, "d")
    client = nsq.http.channel_stats(topic, "d")["clients"][0]
    nsq.verify.equal("metadata after IDENTIFY {} (overwritten with empty strings)", ("", "", ""),
                     (client["client_id"], client["hostname"], client["user_agent"]), "ID-01")


@requirement("NSQ-ID-014")
def test_metadata_defaults_to_remote_ip(nsq):
    """Without IDENTIFY, client_id and hostname are the remote IP, user_agent empty (ID-01; rec-0055)."""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    client = nsq.http.channel_stats(topic, "c")["clients"][0]
    address = conn.sock.getsockname()[0]
    nsq.verify.equal("default client metadata", (address, address, ""),
                     (client["client_id"], client["hostname"], client["user_agent"]))


@requirement("NSQ-ID-015")
def test_tls_without_certificate_is_not_negotiated(nsq):
    """tls_v1:true on a server without a certificate: tls_v1 false, no upgrade (ID-21; rec-0085)."""
    if nsq.profile.capabilities["tls"]:
        pytest.skip("the profile says the target has a TLS certificate")  # never with shipped profiles
    conn = nsq.connect()
    response = conn.identify({"feature_negotiation": True, "tls_v1": True})
    nsq.verify.equal("tls_v1 in the response", False, response["tls_v1"])
    conn.publish(nsq.topic(), b"plain")


@pytest.mark.long_wait(6)
@requirement("NSQ-ID-002", "NSQ-TIMEOUT-001")
def test_second_identify_msg_timeout_is_echoed_only(nsq):
    """msg_timeout 1000 then 4000: the response says 4000 but messages still time out after ~1 s
    (ID-40; rec-0088 observed 1.06-1.10 s)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn = nsq.connect()
    conn.identify({"feature_negotiation": True, "msg_timeout": 1000})
    response = conn.identify({"feature_negotiation": True, "msg_timeout": 4000})
    nsq.verify.equal("second msg_timeout echoed", 4000, response["msg_timeout"])
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"t")
    first = conn.expect_message(b"t", attempts=1)
    start = time.monotonic()
    again = conn.expect_message(b"t", attempts=2, timeout=6)
    nsq.verify.equal("redelivered message ID", first.message_id, again.message_id)
    nsq.verify.soft_equal("the pump keeps the first IDENTIFY's msg_timeout (ID-40)", True,
                          nsq.elapsed_since(start) < 3.0)
    nsq.within("redelivery after msg_timeout", nsq.elapsed_since(start), 0.8, 4.5)
