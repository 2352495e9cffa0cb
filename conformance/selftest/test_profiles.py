"""A profile that ``extends`` another inherits it and starts the embedded program with a flag for each limit it
changes (target.py, LIMIT_FLAGS): the real reference programs then hold the profile's limits."""

import json
import urllib.request

import pytest

from conformance.case import Case, Target
from conformance.target import EmbeddedBroker, EmbeddedLookupd, Profile, TargetError


def config(address: tuple[str, int], name: str):
    with urllib.request.urlopen("http://%s:%d/config/%s" % (*address, name), timeout=10) as response:
        return json.loads(response.read())


def test_the_tight_broker_holds_the_limits_its_profile_changes():
    profile = Profile.load("nsqd-tight")
    assert profile.limits["max_msg_size"] == 100 and profile.limits["msg_timeout_ms"] == 60000  # inherited
    with EmbeddedBroker(profile) as broker:
        assert config(broker.http_address, "max_msg_size") == 100
        assert config(broker.http_address, "max_rdy_count") == 50
        assert config(broker.http_address, "max_req_timeout") == 5000 * 10**6
        assert config(broker.http_address, "msg_timeout") == 60000 * 10**6  # nsqd's default, no flag


def test_a_tls_profile_extends_the_tls_base_with_its_own_flags():
    base, required = Profile.load("nsqd-tls"), Profile.load("nsqd-tls-required")
    assert required.broker_flags[:len(base.broker_flags)] == base.broker_flags
    assert "--tls-required=true" in required.broker_flags
    assert required.capabilities["tls"] is True and required.capabilities["tls_required"] == "true"
    assert required.limits == Profile.load("nsqd-defaults").limits


def test_the_short_timeouts_nsqlookupd_starts_with_their_flags():
    """The timeouts themselves are the lookupd cases' to check (tox -e conformance-durability)."""
    profile = Profile.load("nsqlookupd-short-timeouts")
    assert profile.broker_flags == ("--inactive-producer-timeout=1000ms", "--tombstone-lifetime=1000ms")
    with EmbeddedLookupd(profile=profile) as lookupd:  # a flag it refused: it would not start (TargetError)
        assert lookupd.http_address is not None


def test_a_profile_that_extends_itself_is_one_line(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    with pytest.raises(TargetError, match=r"extends itself \(a -> b -> a\)"):
        Profile.load(str(tmp_path / "a.toml"))


def test_a_limit_flag_beside_extends_is_refused(tmp_path):
    (tmp_path / "mine.toml").write_text('extends = "nsqd-defaults"\nbroker_flags = ["--max-rdy-count=5"]\n')
    with pytest.raises(TargetError, match="--max-rdy-count=5 in broker_flags: it comes from"):
        Profile.load(str(tmp_path / "mine.toml"))


def test_an_unknown_base_is_named(tmp_path):
    (tmp_path / "mine.toml").write_text('extends = "nsqd-nonesuch"\n')
    with pytest.raises(TargetError, match="unknown profile 'nsqd-nonesuch'"):
        Profile.load(str(tmp_path / "mine.toml"))


def test_a_case_deletes_its_topics_with_the_profiles_delete_topic_command(tmp_path):
    """A broker without POST /topic/delete is not left with every case's topics (issue 34 item 5): the profile's
    ``[setup] delete_topic`` runs for each topic a case made, as ``create_topic`` does before."""
    deleted = tmp_path / "deleted"
    (tmp_path / "mine.toml").write_text(f'extends = "nsqd-defaults"\n[setup]\n'
                                        f'delete_topic = "echo {{topic}} >> {deleted}"\n')
    profile = Profile.load(str(tmp_path / "mine.toml"))
    with EmbeddedBroker(profile) as broker:
        case = Case(Target(profile, broker.tcp_address, broker.http_address, 1.0), "cleaned")
        topics = [case.topic(), case.topic(create=False)]
        case.close()
        assert deleted.read_text().split() == topics
