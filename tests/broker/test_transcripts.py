"""Replays every transcript recorded from the real nsqd against the reference broker (issue #2, done #1).

Transcripts of one flag set run in file order against one broker started with that set's recorded flags,
as they were recorded. The `default` set is split into shards, each with its own broker, so they run in
parallel under pytest-xdist; shard 0 keeps the first transcripts, which expect a broker with no topics.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from reference_broker.launcher import running_broker

from .recorded import nsqwire, replay

TRANSCRIPTS = pathlib.Path(__file__).parents[2] / "fixtures" / "transcripts.jsonl"
DEFAULT_SHARDS = 4


def _groups() -> list[tuple[str, list[str], list[dict]]]:
    by_set: dict[str, list[dict]] = {}
    for line in TRANSCRIPTS.read_text().splitlines():
        transcript = json.loads(line)
        by_set.setdefault(transcript["flagset"], []).append(transcript)
    groups = []
    for flagset, transcripts in by_set.items():
        shards = DEFAULT_SHARDS if flagset == "default" else 1
        size = -(-len(transcripts) // shards)
        for shard in range(shards):
            chunk = transcripts[shard * size:(shard + 1) * size]
            groups.append((f"{flagset}-{shard}", transcripts[0]["nsqd_flags"], chunk))
    return groups


GROUPS = _groups()
_FLAGS = {name: flags for name, flags, _ in GROUPS}


@pytest.fixture(scope="module")
def brokers():
    """One broker per group, started on first use and kept for the group's transcripts (file order)."""
    started: dict[str, object] = {}
    stack = []
    authds = []

    def get(group: str):
        if group not in started:
            flags = list(_FLAGS[group])
            if nsqwire.authd_addr_from_flags(flags):
                # The recorded fake auth server, on a free port instead of the recorded 24160.
                authd = nsqwire.FakeAuthd("127.0.0.1", 0).start()
                authds.append(authd)
                flags = [f for f in flags if not f.startswith("--auth-http-address=")]
                flags.append("--auth-http-address=127.0.0.1:%d" % authd.srv.server_address[1])
            context = running_broker(*flags)
            started[group] = context.__enter__()
            stack.append(context)
        return started[group]

    yield get
    for context in reversed(stack):
        context.__exit__(None, None, None)
    for authd in authds:
        authd.stop()


@pytest.mark.parametrize("group,transcript", [
    pytest.param(group, t, id=f"{t['id']}-{group}", marks=pytest.mark.xdist_group(group))
    for group, _, chunk in GROUPS for t in chunk
])
def test_transcript(brokers, group, transcript):
    broker = brokers(group)
    error = replay.replay_one(transcript, broker.host, broker.tcp_port, broker.host, broker.http_port)
    assert error is None, f"{transcript['id']} {transcript['title']}: {error}"
