"""AUTH against an auth server (P-AUTH-01, P-AUTH-02, P-AUTH-03, P-AUTH-04, P-AUTH-05, P-AUTH-06, P-AUTH-07, P-AUTH-08,
P-AUTH-09, P-AUTH-10, P-AUTH-11, P-AUTH-12, P-AUTH-13, P-AUTH-14, P-AUTH-15 in conformance/spec/auth.toml; recordings'
`auth` flag set, rec-0251..rec-0266).

The target's --auth-http-address points at the suite's fake auth server (conformance/authd.py), whose
replies depend on the secret as the recordings' did. Every connection here skips the suite's automatic
AUTH (``authenticate=False``). AUTH without an auth server is in test_cls_state.py.
"""

import pytest

from conformance.authd import ALLOW_ALL_SECRET, AUTHORIZED_SUFFIX
from nsq_protocol import wire

requirement = pytest.mark.requirement

ALICE = {"identity": "alice", "identity_url": "http://authd.test/alice", "permission_count": 2}


@pytest.fixture
def auth(nsq):
    """The case's harness, after checking that the target has an auth server."""
    nsq.require("auth")
    return nsq


def authenticate(conn, secret: bytes) -> dict:
    conn.command("AUTH", body=secret)
    return conn.expect_json_response()


@requirement("NSQ-AUTH-002")
def test_identify_reports_auth_required(auth):
    """(P-AUTH-14; rec-0251)"""
    conn = auth.connect(authenticate=False)
    response = conn.identify({"feature_negotiation": True})
    auth.verify.equal("IDENTIFY auth_required with an auth server (P-AUTH-14)", True, response["auth_required"])


@requirement("NSQ-AUTH-003")
@pytest.mark.parametrize("command", ["PUB", "SUB", "MPUB", "DPUB"])
def test_command_before_auth_is_fatal(auth, command):
    """SUB, PUB, MPUB and DPUB before AUTH: fatal E_AUTH_FIRST (P-AUTH-09; rec-0252..rec-0255)."""
    topic = auth.topic(AUTHORIZED_SUFFIX)
    conn = auth.connect(authenticate=False)
    if command == "SUB":
        conn.command("SUB", topic, "c1")
    elif command == "MPUB":
        conn.command("MPUB", topic, body=wire.mpub_body([b"x"]))
    elif command == "DPUB":
        conn.command("DPUB", topic, 10, body=b"x")
    else:
        conn.command("PUB", topic, body=b"x")
    conn.expect_error("E_AUTH_FIRST", f"AUTH required before {command}")


@requirement("NSQ-AUTH-003")
def test_nop_and_rdy_do_not_check_auth(auth):
    """NOP stays silent and RDY fails on the state, not on auth (P-AUTH-09; rec-0256)."""
    conn = auth.connect(authenticate=False)
    conn.command("NOP")
    conn.expect_silence(0.3)
    conn.command("RDY", 1)
    conn.expect_error("E_INVALID", "cannot RDY in current state")


@requirement("NSQ-AUTH-004", "NSQ-AUTH-005")
def test_auth_ok_allows_and_refuses(auth):
    """AUTH answers identity JSON; the permitted PUB and SUB work; PUB to another topic is refused with the
    channel "" (P-AUTH-08, P-AUTH-10, P-AUTH-11; rec-0257)."""
    topic, other = auth.topic(AUTHORIZED_SUFFIX), auth.topic()
    conn = auth.connect(authenticate=False)
    auth.verify.equal("AUTH response (P-AUTH-08)", ALICE, authenticate(conn, b"ok"))
    conn.publish(topic, b"x")
    conn.subscribe(topic, "c1")
    conn.command("PUB", other, body=b"x")
    conn.expect_error("E_UNAUTHORIZED", f'AUTH failed for PUB on "{other}" ""')


@requirement("NSQ-AUTH-005")
def test_sub_to_channel_not_allowed(auth):
    """(P-AUTH-10; rec-0258)"""
    topic = auth.topic(AUTHORIZED_SUFFIX)
    conn = auth.connect(authenticate=False)
    authenticate(conn, b"ok")
    conn.command("SUB", topic, "c2")
    conn.expect_error("E_UNAUTHORIZED", f'AUTH failed for SUB on "{topic}" "c2"')


@requirement("NSQ-AUTH-004", "NSQ-AUTH-005")
def test_publish_needs_channel_regex_matching_empty(auth):
    """Channels `^c1$` allow SUB to c1 but no publish: publishes are checked with channel "" (P-AUTH-11;
    rec-0259)."""
    topic = auth.topic()
    conn = auth.connect(authenticate=False)
    auth.verify.equal("AUTH response (P-AUTH-08)", {"identity": "bob", "identity_url": "", "permission_count": 1},
                      authenticate(conn, b"chanonly"))
    conn.subscribe(topic, "c1")
    conn.command("PUB", topic, body=b"x")
    conn.expect_error("E_UNAUTHORIZED", f'AUTH failed for PUB on "{topic}" ""')


@requirement("NSQ-AUTH-006")
def test_second_auth_is_fatal(auth):
    """(P-AUTH-04; rec-0260)"""
    conn = auth.connect(authenticate=False)
    authenticate(conn, b"ok")
    conn.command("AUTH", body=b"ok")
    conn.expect_error("E_INVALID", "AUTH already set")


@requirement("NSQ-AUTH-007")
@pytest.mark.parametrize("secret, code, text", [
    (b"empty", "E_UNAUTHORIZED", "AUTH no authorizations found"),
    (b"fail500", "E_AUTH_FAILED", "AUTH failed"),
    (b"badperm", "E_AUTH_FAILED", "AUTH failed")], ids=["no-authorizations", "http-500", "unknown-permission"])
def test_auth_server_refusals(auth, secret, code, text):
    """An empty authorization list, a non-200 answer or an unknown permission end the connection
    (P-AUTH-06, P-AUTH-07; rec-0261, rec-0262, rec-0263)."""
    conn = auth.connect(authenticate=False)
    conn.command("AUTH", body=secret)
    conn.expect_error(code, text)


@requirement("NSQ-AUTH-008")
def test_expired_authorization_is_asked_again(auth):
    """After the ttl of 1 s the next PUB asks the auth server again; its 500 ends the connection
    (P-AUTH-12; rec-0264)."""
    topic = auth.topic(AUTHORIZED_SUFFIX)
    conn = auth.connect(authenticate=False)
    authenticate(conn, f"ttl1-{topic}".encode())  # a secret of its own: the fake answers it once
    conn.publish(topic, b"x")
    auth.wait(1.5, "the authorization's ttl of 1 s runs out (P-AUTH-12)")
    conn.command("PUB", topic, body=b"y")
    conn.expect_error("E_AUTH_FAILED", "AUTH failed")


@requirement("NSQ-AUTH-009")
def test_auth_before_identify(auth):
    """AUTH first, then IDENTIFY and SUB work (P-AUTH-01, P-AUTH-14; rec-0265)."""
    topic = auth.topic(AUTHORIZED_SUFFIX)
    conn = auth.connect(authenticate=False)
    auth.verify.equal("AUTH response (P-AUTH-08)", ALICE, authenticate(conn, b"ok"))
    response = conn.identify({"feature_negotiation": True})
    auth.verify.equal("IDENTIFY auth_required after AUTH (P-AUTH-14)", True, response["auth_required"])
    conn.subscribe(topic, "c1")


@requirement("NSQ-AUTH-010")
def test_http_pub_is_not_subject_to_auth(auth):
    """(P-AUTH-15; rec-0266)"""
    auth.require("http")
    topic = auth.topic()
    response = auth.http.post(f"/pub?topic={topic}", b"x")
    auth.verify.equal("POST /pub without any AUTH (P-AUTH-15)", (200, b"OK"), (response.status, response.body))
    stats = auth.http.stats(topic)
    auth.verify.equal("topic depth after the HTTP publish", 1, stats and stats["depth"])


@requirement("NSQ-AUTH-011")
def test_the_auth_server_is_asked_with_every_field(auth):
    """AUTH with a secret of the case's own, over plain TCP: one query to the auth server, by the profile's method
    (GET; POST under --auth-http-request-method=post), carrying secret, remote_ip, tls=false and an empty
    common_name (P-AUTH-13, X-16; rec-0257)."""
    method = auth.profile.offers("auth_request_method") or "get"
    if method == "post":
        auth.require_behaviour("P-AUTH-16")
    secret = f"{ALLOW_ALL_SECRET}-{auth.name_prefix}"
    authenticate(auth.connect(authenticate=False), secret.encode())
    auth.verify.equal("the auth server's queries: (method, secret, remote_ip given, tls, common_name) (P-AUTH-13)",
                      [(method.upper(), secret, True, "false", "")],
                      [(query.get("http_method"), query.get("secret"), bool(query.get("remote_ip")), query.get("tls"),
                        query.get("common_name")) for query in auth.auth_queries(secret)])
