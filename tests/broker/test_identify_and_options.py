"""IDENTIFY's JSON decoding and nsqd's flags, as nsqd's Go decoding and flag package treat them."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from reference_broker import options
from reference_broker.identify import decode_identify
from reference_broker.launcher import running_broker
from reference_broker.nsqlookupd import options as lookupd_options
from reference_broker.options import MS, SECOND, parse_duration, parse_options


@pytest.mark.parametrize("body,field,value", [
    (b'{"Feature_Negotiation":true}', "feature_negotiation", True),  # section 3.1: keys case-insensitive
    (b'{"MSG_TIMEOUT":5000}', "msg_timeout", 5000),
    (b'{"unknown":1,"heartbeat_interval":1000}', "heartbeat_interval", 1000),
    (b'{"client_id":null}', "client_id", ""),  # a null leaves the zero value
    (b"null", "hostname", ""),
    (b"{}", "sample_rate", 0),
])
def test_identify_decoding_accepts(body, field, value):
    assert decode_identify(body)[field] == value


@pytest.mark.parametrize("body", [
    b'{"heartbeat_interval":"abc"}', b'{"msg_timeout":1000.5}', b'{"msg_timeout":1e3}', b"[]",
    b"{", b'{"sample_rate":2147483648}', b'{"snappy":1}', b'{"client_id":5}',
])
def test_identify_decoding_rejects(body):
    # section 3.1: E_BAD_BODY IDENTIFY failed to decode JSON body
    assert decode_identify(body) is None


@pytest.mark.parametrize("text,nanoseconds", [
    ("100ms", 100 * MS), ("60s", 60 * SECOND), ("15m", 900 * SECOND), ("1h", 3600 * SECOND),
    ("1m30s", 90 * SECOND), ("1.5s", 1500 * MS), ("0", 0),
])
def test_go_durations(text, nanoseconds):
    assert parse_duration(text) == nanoseconds


def test_flags_use_nsqd_names_and_defaults():
    options = parse_options(["--max-rdy-count=50", "-msg-timeout", "2s", "--snappy=false", "--deflate"])
    assert (options.max_rdy_count, options.msg_timeout, options.snappy_enabled, options.deflate_enabled) == (
        50, 2 * SECOND, False, True)
    assert parse_options([]).max_msg_size == 1048576 and parse_options([]).mem_queue_size == 10000


@pytest.mark.parametrize("program", [options, lookupd_options], ids=["nsqd", "nsqlookupd"])
def test_every_flag_given_its_default_as_help_writes_it_keeps_the_default(program):
    """One table (options.flag) makes both the command line and the dataclass: each flag that --help shows with a
    default takes that text back to the same value."""
    parser, defaults = program.build_parser(), program.Options()
    argv, names = [], []
    for name, spec in options.flags(program.Options).values():
        shown = re.search(r"\(default (.*)\)$", parser._option_string_actions[f"--{spec.name}"].help or "")
        if shown and not spec.refused:
            text = shown.group(1)
            argv.append(f"--{spec.name}={text[1:-1] if text.startswith(chr(39)) else text}")
            names.append(name)
    assert len(names) >= 6, names
    parsed = program.parse_options(argv)
    parsed = parsed[0] if isinstance(parsed, tuple) else parsed  # nsqlookupd's: (options, --version)
    assert [getattr(parsed, name) for name in names] == [getattr(defaults, name) for name in names], argv


@pytest.mark.parametrize("flag", ["--bogus", "--msg-timeout=10", "--max-rdy-count=x", "--node-id=2000",
                                  "--snappy=maybe", "--tls-required", "--tls-min-version=ssl3.0",
                                  "--tls-client-auth-policy=require"])
def test_a_bad_flag_is_one_line_and_exit_status_2(flag):
    result = subprocess.run([sys.executable, "-m", "reference_broker", flag], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--statsd-address=127.0.0.1:8125", "--statsd-prefix=nsq",
                                  "--e2e-processing-latency-percentile=0.99", "--queue-scan-selection-count=5",
                                  "--enable-experiment=topology-aware-consumption", "--statsd-mem-stats"])
def test_a_flag_this_broker_does_not_implement_is_refused_in_one_line(flag):
    result = subprocess.run([sys.executable, "-m", "reference_broker", flag], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "not implemented" in result.stderr, result.stderr


def test_refused_flags_keep_nsqd_defaults_for_config_lookups():
    # H-CFG-01: GET /config/statsd_prefix answers nsqd's default even though the flag is refused.
    options = parse_options([])
    assert (options.statsd_prefix, options.statsd_interval, options.nsqlookupd_tcp_addresses) == (
        "nsq.%s", 60 * SECOND, [])


def test_two_brokers_cannot_share_a_data_path(tmp_path):
    # nsqd's dirlock: the second one fails at startup, with one line and a non-zero status.
    with running_broker(data_path=str(tmp_path)):
        second = subprocess.run([sys.executable, "-m", "reference_broker", "--tcp-address=127.0.0.1:0",
                                 "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"], capture_output=True,
                                text=True, timeout=30)
    assert second.returncode == 1
    assert second.stderr.count("\n") == 1 and "failed to lock data-path" in second.stderr, second.stderr
