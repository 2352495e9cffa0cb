"""Waits (nsq_protocol/monitors/waits.py): a run's message keys held as its IDs give the keys a list of tuples gives,
whole or in stretches, and the waits come out by (due, arrival) whatever the order they went in."""

from hypothesis import given
from hypothesis import strategies as st

from nsq_protocol.monitors.waits import RunKeys, Waits

IDS = st.lists(st.text(alphabet="0123456789abcdef", min_size=16, max_size=16), min_size=1, max_size=12)
ODD_IDS = st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=12)


@given(st.one_of(IDS, ODD_IDS), st.integers(-14, 14), st.integers(-14, 14))
def test_a_runs_keys_are_the_tuples_they_stand_for(msg_ids, start, stop):
    keys = RunKeys(("topic", "channel"), msg_ids)
    tuples = [("topic", "channel", msg_id) for msg_id in msg_ids]
    assert len(keys) == len(tuples) and [keys[index] for index in range(len(keys))] == tuples
    stretch = keys[start:stop]
    assert [stretch[index] for index in range(len(stretch))] == tuples[start:stop]


@given(st.lists(st.tuples(st.floats(0, 10), IDS), min_size=1, max_size=5), st.floats(0, 12))
def test_waits_come_out_by_due_then_arrival(batches, now):
    waits, arrived = Waits(), []
    for first, msg_ids in batches:
        dues = [first + index % 3 - index for index in range(len(msg_ids))]  # some stretches: dues go down
        waits.add(dues, RunKeys(("t", "c"), msg_ids), [0.0] * len(dues))
        arrived += [(due, len(arrived) + index, ("t", "c", msg_id)) for index, (due, msg_id) in
                    enumerate(zip(dues, msg_ids, strict=True))]
    expected = [(due, key) for due, _, key in sorted(arrived) if due <= now]
    assert [(due, key) for due, key, _ in waits.due_by(now)] == expected
    assert waits.first == min((due for due, _, _ in arrived if due > now), default=float("inf"))


def test_an_id_of_another_length_keeps_the_ids_as_they_came():
    keys = RunKeys(("t", "c"), ["0123456789abcdef", "short"])
    assert keys.ids == ["0123456789abcdef", "short"] and RunKeys(("t", "c"), ["0123456789abcdef"] * 2).ids == \
        "0123456789abcdef" * 2
    assert keys[1] == ("t", "c", "short") and keys[0:1][0] == ("t", "c", "0123456789abcdef")
