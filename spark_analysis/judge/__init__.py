"""Judging: the passive checks over one connection's events, named by catalogue requirement (``violations``)."""
