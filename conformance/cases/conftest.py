"""Loads the suite's plugin for every case module (``pytest conformance/cases`` works directly)."""

from conformance.plugin import *  # noqa: F401,F403  (hooks and fixtures must be module globals here)
