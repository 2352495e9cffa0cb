"""The CI example for broker authors (docs/ci/github-actions.yml) calls the suite with options it has."""

import re
import shlex
from pathlib import Path

from conformance.__main__ import parse_args

EXAMPLE = Path(__file__).parents[2] / "docs" / "ci" / "github-actions.yml"


def test_the_ci_example_runs_the_suite_with_options_it_has():
    text = EXAMPLE.read_text()
    command = re.search(r"nsq-conformance (.+?)\n(?!\s+--)", text.replace("\\\n", " "), re.S).group(1)
    args, passthrough = parse_args(shlex.split(command))
    assert (args.nsq_target, args.nsq_http_target, args.nsq_profile, args.nsq_baseline) == (
        "127.0.0.1:4150", "127.0.0.1:4151", "nsqd-defaults", "conformance.baseline")
    assert passthrough == []
    for commented in re.findall(r"# (--[a-z-]+ \S+(?: --[a-z-]+ \S+)?)", text):
        option_args, _ = parse_args(["--target", "127.0.0.1:4150", *shlex.split(commented)])
        assert option_args is not None


def test_the_ci_example_installs_the_suites_extra():
    """Without the `conformance` extra there is no pytest, and nsq-conformance cannot run."""
    install = re.search(r"pip install (.+)", EXAMPLE.read_text()).group(1)
    assert re.search(r"nsq-conformance-toolkit\[conformance\] @ git\+https://", install)
