"""Replays the restart and disk-queue transcripts recorded from the real nsqd (flag sets `persist`,
`persist-memq2`, `persist-memq0`, `rotate` of fixtures/transcripts-cluster.jsonl) against the reference
broker, with the recordings' own cluster replayer: each transcript starts a fresh broker on a fresh data
path, SIGTERMs or SIGKILLs it and starts it again on the same path and ports, as it did to nsqd.

The `fake-lookupd` transcripts (R-01, R-02, R-03, R-04, R-05, R-06, R-07, R-08, R-09, R-10, R-11: what nsqd sends to
nsqlookupd) run the same way; the replayer runs the fake lookupds itself and checks every command the broker sends
them, with the recorded timing windows of the 15 s PING ticker (about 40 s for the ten).

The `lookupd`, `lookupd-short` and `cluster` transcripts (L-TCP-*, L-HTTP-*: nsqlookupd's V1 protocol and HTTP
API; R-12, R-13, R-14, R-15: the reference nsqd registering with it end to end) run against the reference nsqlookupd,
and the cluster's `exec nsq_tail` step runs tests/lookupd/nsq_tail.py in place of the Go tool.

They run in one xdist group: the replayer uses a fixed block of ports, found free once per module.
"""
from __future__ import annotations

import json
import pathlib
import random
import socket
import stat
import sys

import pytest

from .recorded import replay, replay_cluster

TRANSCRIPTS = pathlib.Path(__file__).parents[2] / "fixtures" / "transcripts-cluster.jsonl"
PERSISTENCE_FLAGSETS = {"persist", "persist-memq2", "persist-memq0", "rotate"}
REGISTRATION_FLAGSETS = {"fake-lookupd"}
LOOKUPD_FLAGSETS = {"lookupd", "lookupd-short", "cluster"}
TLS_FLAGSETS = {"tls", "tls-required", "tls-tcp-https", "tls-require-cert", "tls-require-verify", "tls-min13"}
_PORT_SPAN = 30  # the replayer's ports lie within base .. base + 22


def _transcripts(flagsets: set[str]) -> list[dict]:
    lines = TRANSCRIPTS.read_text().splitlines()
    return [t for t in map(json.loads, lines) if t["flagset"] in flagsets]


def _ephemeral_ports_start() -> int:
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free_port_block(span: int) -> int:
    """A base port such that base .. base + span are all free on 127.0.0.1 now, below the kernel's ephemeral
    range, where no other test's port-0 listener or outgoing connection can take one of them while the
    transcripts run (the block is kept for minutes); the search starts at a random place, so two test runs
    on one machine do not pick the same block."""
    low, high = 10000, _ephemeral_ports_start()
    start = random.randrange(low, high - span, span)
    for base in list(range(start, high - span, span)) + list(range(low, start, span)):
        sockets = []
        try:
            for port in range(base, base + span):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free block of ports")


@pytest.fixture(scope="module")
def broker_binaries(tmp_path_factory) -> dict[str, str]:
    """The replayer starts 'any program that takes nsqd's flags' (nsqlookupd's, nsq_tail's): wrappers that exec
    the reference programs."""
    directory = tmp_path_factory.mktemp("bin")
    repo = pathlib.Path(__file__).parents[2]
    binaries = {}
    for name, module in (("nsqd", "reference_broker"), ("nsqlookupd", "reference_broker.nsqlookupd"),
                         ("nsq_tail", "tests.lookupd.nsq_tail")):
        wrapper = directory / name
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{repo}${{PYTHONPATH:+:$PYTHONPATH}}" '
                           f'exec "{sys.executable}" -m {module} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        binaries[name] = str(wrapper)
    return binaries


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    from .recorded import cluster
    # The recordings' certificates; replay_cluster imports the engine as the top-level module `cluster`.
    sys.modules["cluster"].TLS_DIR = str(pathlib.Path(__file__).parents[2] / "conformance" / "tls")
    return cluster.port_plan(_free_port_block(_PORT_SPAN))


def _params(flagsets: set[str]) -> list:
    return [pytest.param(t, id=f"{t['id']}-{t['flagset']}", marks=pytest.mark.xdist_group("cluster"))
            for t in _transcripts(flagsets)]


def _replay(broker_binaries, ports, transcript, logdir) -> None:
    error = replay_cluster.replay_one(transcript, broker_binaries, ports, replay, logdir=str(logdir))
    logs = "".join(path.read_text(errors="replace")[-3000:] for path in sorted(logdir.iterdir()))
    assert error is None, f"{transcript['id']} {transcript['title']}: {error}\n--- broker log ---\n{logs}"
    assert "Traceback" not in logs, logs


@pytest.mark.parametrize("transcript", _params(PERSISTENCE_FLAGSETS))
def test_persistence_transcript(broker_binaries, ports, transcript, tmp_path):
    _replay(broker_binaries, ports, transcript, tmp_path)


@pytest.mark.parametrize("transcript", _params(REGISTRATION_FLAGSETS))
def test_registration_transcript(broker_binaries, ports, transcript, tmp_path):
    _replay(broker_binaries, ports, transcript, tmp_path)


@pytest.mark.parametrize("transcript", _params(LOOKUPD_FLAGSETS))
def test_lookupd_transcript(broker_binaries, ports, transcript, tmp_path):
    _replay(broker_binaries, ports, transcript, tmp_path)


@pytest.mark.parametrize("transcript", _params(TLS_FLAGSETS))
def test_tls_transcript(broker_binaries, ports, transcript, tmp_path):
    _replay(broker_binaries, ports, transcript, tmp_path)


def test_every_persistence_registration_and_lookupd_transcript_is_collected():
    assert len(_transcripts(PERSISTENCE_FLAGSETS)) == 20
    assert len(_transcripts(REGISTRATION_FLAGSETS)) == 10
    assert len(_transcripts(LOOKUPD_FLAGSETS)) == 44
    assert len(_transcripts(TLS_FLAGSETS)) == 19

