"""Hostile sessions against one broker (the generator, the runner and the invariants are in hostile/):
10,000 seeded sessions, then the broker must be healthy; a hypothesis test over the same grammar, which shrinks
a failing session to a small one; regression tests for what the fuzzer found; and checks that the session
checker catches what it claims to, so that a quiet run means something.

Environment: FUZZ_SEED (default 0; `random` draws one, printed), FUZZ_SESSIONS (default 10000), FUZZ_SESSION
(play only that index of the seed: how a reported failure is replayed alone), e.g.
    FUZZ_SEED=0 FUZZ_SESSION=4711 pytest tests/broker/test_fuzz.py -k seeded -s
`tox -e fuzz` runs 100,000 sessions (benchmarks/broker_fuzz.py).
"""
from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.launcher import running_broker

from .hostile.grammar import generate_session, session_rng
from .hostile.health import check_health, run_sessions, thread_names, tracebacks
from .hostile.play import ERROR_PATTERN, InboundFrames, Outcome, check_http_responses, play
from .hostile.session import BROKER_FLAGS, Session, Write

SEED = os.environ.get("FUZZ_SEED", "0")
if SEED == "random":
    SEED = str(random.SystemRandom().randrange(1 << 32))
SESSIONS = int(os.environ.get("FUZZ_SESSIONS", "10000"))
ONLY_SESSION = os.environ.get("FUZZ_SESSION")
WORKERS = 32
# 10,000 sessions take ~20 s on 2 cores; CI's share is well under 90 s, and a broker this slow is a failure.
BUDGET_SECONDS = 75 * max(1, SESSIONS / 10_000)
RSS_LIMIT = 96 << 20  # the broker starts at ~30 MiB and peaks at ~50 MiB over these 10,000 sessions


@pytest.fixture(scope="module")
def fuzz_broker():
    with running_broker(*BROKER_FLAGS) as broker:
        yield broker


@pytest.fixture(scope="module")
def baseline_threads(fuzz_broker):
    """The broker's threads before any session."""
    return thread_names((fuzz_broker.host, fuzz_broker.http_port))


def test_seeded_hostile_sessions_leave_a_healthy_broker(fuzz_broker, baseline_threads):
    indices = [int(ONLY_SESSION)] if ONLY_SESSION else range(SESSIONS)
    print(f"\nFUZZ_SEED={SEED}: {len(indices)} sessions")
    report = run_sessions(fuzz_broker.tcp_address, (fuzz_broker.host, fuzz_broker.http_port), SEED, indices,
                          workers=WORKERS, budget_seconds=BUDGET_SECONDS)
    print(f"{report.sessions} sessions in {report.seconds:.1f} s ({report.sessions / report.seconds:.0f}/s); "
          f"frames {dict(report.frames)}; errors {dict(report.error_codes)}; HTTP {dict(report.http_statuses)}; "
          f"compressed {dict(report.layers)}")
    assert report.failed_sessions == 0, (
        f"{report.failed_sessions} sessions of FUZZ_SEED={SEED} broke an invariant; replay one alone with "
        f"FUZZ_SEED={SEED} FUZZ_SESSION=<index> pytest tests/broker/test_fuzz.py -k seeded -s\n\n"
        + report.describe_failures())
    assert report.not_run == 0, f"only {report.sessions} of {len(indices)} sessions ran in {BUDGET_SECONDS} s"
    health = check_health(fuzz_broker, RSS_LIMIT, baseline_threads)
    print(f"broker afterwards: /ping in {health.ping_seconds * 1000:.1f} ms, peak RSS "
          f"{health.peak_rss_bytes >> 20} MiB, {health.threads} threads")


def test_drawn_hostile_sessions_shrink_to_a_minimal_failure(fuzz_broker, baseline_threads):
    http_address = (fuzz_broker.host, fuzz_broker.http_port)

    # The grammar's random.Random calls answered by hypothesis, so that a failing session shrinks: towards the
    # common case of every choice, fewer commands, shorter bytes.
    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.randoms(use_true_random=False))
    def one_session(rng):
        outcome = play(generate_session(rng, "hypothesis"), fuzz_broker.tcp_address, http_address)
        assert not outcome.problems, outcome.describe()

    one_session()
    check_health(fuzz_broker, RSS_LIMIT, baseline_threads)


# -- what the fuzzer found ------------------------------------------------------------------------------------

@pytest.fixture
def new_broker_log(fuzz_broker):
    """What the broker prints from now on, read after a /ping that proves it served everything sent before."""
    start = len(fuzz_broker.log)

    def read() -> str:
        time.sleep(0.2)  # the broker prints a handler's traceback after the handler ends
        with socket.create_connection((fuzz_broker.host, fuzz_broker.http_port)) as sock:
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while sock.recv(4096):
                pass
        return "".join(fuzz_broker.log[start:])
    return read


@pytest.mark.parametrize("request_start", [b"GET /pi", b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"])
def test_an_http_peer_that_resets_leaves_no_traceback(fuzz_broker, new_broker_log, request_start):
    # Go's net/http drops such a connection without a word; socketserver printed ConnectionResetError's traceback.
    with socket.create_connection((fuzz_broker.host, fuzz_broker.http_port)) as sock:
        sock.sendall(request_start)
        time.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert "Traceback" not in new_broker_log()


@pytest.mark.parametrize("chunk_size", [b"-2", b"-1", b"0x5", b"+5", b"5_0", b"1" * 17, b""])
def test_a_chunk_size_go_cannot_parse_is_a_broken_body(fuzz_broker, new_broker_log, chunk_size):
    # Go's parseHexUint takes 1..16 hex digits; /pub's body read then fails: 500 INTERNAL_ERROR (nsqd http.go).
    # int(size, 16) took signs, "0x" and "_", and a negative size raised ValueError: a traceback, no response.
    with socket.create_connection((fuzz_broker.host, fuzz_broker.http_port), timeout=5) as sock:
        sock.sendall(b"POST /pub?topic=fz-chunks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunk_size + b"\r\nhello\r\n0\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        response = b""
        while data := sock.recv(4096):
            response += data
    assert response.startswith(b"HTTP/1.1 500 "), response
    assert response.endswith(b'{"message":"INTERNAL_ERROR"}'), response
    assert "Traceback" not in new_broker_log()


# -- the checker catches what it claims to ----------------------------------------------------------------------

def _frame(frame_type: int, data: bytes) -> bytes:
    return struct.pack(">Ii", 4 + len(data), frame_type) + data


def _problems_for(*frames: bytes) -> list[str]:
    outcome = Outcome(Session("checker", 0, "tcp"))
    InboundFrames(outcome).feed(b"".join(frames))
    return outcome.problems


@pytest.mark.parametrize("frames, problem", [
    ([_frame(3, b"OK")], "frame type 3"),
    ([struct.pack(">Ii", 2, 0)], "frame size 2"),
    ([_frame(1, b"E_INVALID Traceback (most recent call last)")], "not in Appendix A"),
    ([_frame(1, b"E_INVALID invalid command X"), _frame(0, b"OK")], "after a fatal error"),
    ([_frame(0, b"KO")], "never sends"),
    ([_frame(2, struct.pack(">qH", 1, 1) + b"0123456789ABCDEF")], "malformed message"),
    ([_frame(2, struct.pack(">qH", 1, 0) + b"0123456789abcdef")], "malformed message"),
])
def test_the_checker_reports_what_nsqd_never_sends(frames, problem):
    problems = _problems_for(*frames)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_checker_accepts_what_nsqd_sends():
    message = _frame(2, struct.pack(">qH", 1, 1) + b"0123456789abcdef" + b"body")
    assert _problems_for(_frame(0, b"OK"), message, _frame(1, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in "
                                                                b"flight"), _frame(0, b"CLOSE_WAIT"),
                         _frame(1, b"E_BAD_TOPIC SUB topic name \"a b\" is not valid")) == []
    assert ERROR_PATTERN.fullmatch(b"E_INVALID RDY count -1 out of range 0-2500")
    assert not ERROR_PATTERN.fullmatch(b"E_INVALID RDY count x out of range 0-2500")


def test_the_checker_reports_an_http_500_other_than_a_broken_body():
    outcome = Outcome(Session("checker", 0, "http", steps=[Write(b"GET /stats HTTP/1.1\r\n\r\n", "request")]))
    body = b'{"message":"KeyError"}'
    check_http_responses(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body), outcome.session, outcome)
    assert any("not in Appendix B" in problem for problem in outcome.problems), outcome.problems


def test_a_session_is_the_same_whatever_ran_before_it():
    first = generate_session(session_rng(7, 123), 7, 123)
    generate_session(session_rng(7, 122), 7, 122)
    assert generate_session(session_rng(7, 123), 7, 123).describe() == first.describe()


def test_tracebacks_are_found_in_the_log():
    assert tracebacks(["INFO: fine\n", "Traceback (most recent call last):\n", "Exception in thread conn-1:\n"]) == [
        "Traceback (most recent call last):\n", "Exception in thread conn-1:\n"]
