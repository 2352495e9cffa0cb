"""A broken broker's JSON answers, for the tests that feed them to the monitors: its documents with fields at every
depth (the document's, a topic's, a channel's, a producer's) replaced by any JSON value."""

from __future__ import annotations

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3),
    max_leaves=10)


def damaged(draw, value, fields: list[str]):
    """``value`` with up to two of ``fields`` set to any JSON value in each of its objects, however deep."""
    if isinstance(value, list):
        return [damaged(draw, item, fields) for item in value]
    if not isinstance(value, dict):
        return value
    changed = {key: damaged(draw, item, fields) for key, item in value.items()}
    for field in draw(st.lists(st.sampled_from(fields), max_size=2)):
        changed[field] = draw(JSON_VALUES)
    return changed
