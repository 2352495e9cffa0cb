"""pytest plugin of the conformance suite: options, the target, graded verdicts, baseline, reports.

Registered through the ``pytest11`` entry point, so ``pytest --nsq-target HOST:PORT`` runs the suite's cases in
any project that installs the package; it stays inert (no fixtures started, no verdicts, other tests untouched)
until one of its ``--nsq-*`` options is given. ``python -m conformance`` gives them.

Split as pytest's own plugins are: this module holds the run's hooks (options, configuration, collection) and its
state, kept on ``config.stash`` and ``item.stash`` under the keys below; ``fixtures.py`` holds the targets and the
case fixtures; ``verdicts.py`` turns each case's outcome into its verdict (the way ``_pytest/skipping.py`` sets
xfail).
"""

from __future__ import annotations

import pytest

from conformance import options
from conformance.authd import AuthServer
from conformance.case import Case, LookupdCase
from conformance.catalogue import requirements
from conformance.client import Unsupported
from conformance.options import Settings
from conformance.report.fresh import SHARED_BROKER_LOG, start_fresh
from conformance.spec import behaviour_ids_of, not_in_version
from conformance.target import TargetError

pytest_plugins = ("conformance.plugin.fixtures", "conformance.plugin.verdicts")

SETTINGS = pytest.StashKey[Settings]()  # present when the suite's options turned the plugin on
AUTHD_ADDRESS = pytest.StashKey[str | None]()  # the fake auth server's HOST:PORT (profiles with `auth`)
AUTHD = pytest.StashKey[AuthServer]()  # that server, on the process that started it (the xdist controller)
CASE = pytest.StashKey[Case | LookupdCase]()  # the Case a case's fixture made, for its verdict
COMPARED = pytest.StashKey[dict]()  # --compare: the case's run against the second broker


def settings_of(config) -> Settings | None:
    """The run's checked settings; None while the plugin is inert."""
    return config.stash.get(SETTINGS, None)


def pytest_addoption(parser):
    options.add_to_pytest(parser.getgroup("nsq-conformance", "NSQ conformance suite (any --nsq-* option turns it on)"))


def _active(config) -> bool:
    """Any of the suite's options given (a value other than its default) turns the plugin on."""
    return any(config.getoption(option.dest) not in (option.default, [], False)
               for option in (*options.OPTIONS, options.EMBEDDED))


def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(*ids): the catalogue requirement IDs a case checks")
    config.addinivalue_line("markers", "long_wait(seconds): the case waits about this long on the broker's timers; "
                            "such cases start first, longest first, so that parallel workers end together")
    config.addinivalue_line("markers", "monitors_expect(*ids): behaviour items the case makes the broker's monitors "
                            "see broken on purpose (conformance/monitoring.py); others fail the case")
    config.addinivalue_line("markers", "transcript_varies(why): --compare judges this case by its verdict only, "
                            "its transcript differs from run to run by design (e.g. concurrent clients)")
    if not _active(config):
        return
    try:
        settings = config.stash[SETTINGS] = options.settings(config.getoption)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1  # pytest-xdist then sends each worker 2 cases first, then 1 at a time
    if hasattr(config, "workerinput"):
        config.stash[AUTHD_ADDRESS] = config.workerinput.get("nsq_authd_address")
    elif config.option.collectonly:  # nothing runs (explain, --list): no run to start afresh, no verdicts
        config.stash[AUTHD_ADDRESS] = None
    else:  # the auth server and the report writers run on the controller only (xdist)
        # the shared broker python -m conformance started before pytest is logging to its file already
        start_fresh(settings.reports_dir, keep=(SHARED_BROKER_LOG,) if settings.embedded and settings.tcp else ())
        _start_authd(config, settings)
        from conformance.report.collector import ResultCollector
        config.pluginmanager.register(ResultCollector(settings), "nsq-results")


def _start_authd(config, settings: Settings) -> None:
    """One fake auth server per run, so that a ``ttl1-`` secret is answered once whichever worker asks."""
    config.stash[AUTHD_ADDRESS] = None
    if not settings.profile.capabilities.get("auth"):
        return
    try:
        authd = config.stash[AUTHD] = AuthServer(settings.authd or ("127.0.0.1", 0)).start()
    except OSError as exc:
        where = "%s:%d" % settings.authd if settings.authd else "a free loopback port"
        raise pytest.UsageError(f"cannot start the fake auth server on {where}: {exc.strerror or exc}") from None
    config.stash[AUTHD_ADDRESS] = authd.address


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if settings_of(node.config):
        node.workerinput["nsq_authd_address"] = node.config.stash[AUTHD_ADDRESS]


def pytest_unconfigure(config):
    if AUTHD in config.stash:
        config.stash[AUTHD].stop()


def pytest_report_header(config):
    settings = settings_of(config)
    if settings is None:
        return None
    where = f"{settings.tcp[0]}:{settings.tcp[1]}" if settings.tcp else "embedded reference broker"
    http = f"{settings.http[0]}:{settings.http[1]}" if settings.http else (
        "embedded" if not settings.tcp else "none (HTTP cases UNSUPPORTED)")
    authd = config.stash[AUTHD_ADDRESS]
    return [f"nsq target: {where}  http: {http}",
            f"nsq profile: {settings.profile.name} ({settings.profile.description}); time scale "
            f"{settings.time_scale:g}; strict {settings.strict}; judged as {settings.nsq_version.label}"
            + (f"; fake auth server {authd}" if authd else "")]


def case_requirements(item) -> list[str]:
    return [requirement_id for marker in item.iter_markers("requirement") for requirement_id in marker.args]


CASE_FIXTURES = frozenset({"nsq", "restartable", "registration", "lookupd", "crashable"})


def is_case(item) -> bool:
    """A conformance case: it works with one of this plugin's Case fixtures (a project's own fixture of the same
    name does not count). Other tests in the run are left alone."""
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(fixtures[name][-1].func.__module__ == f"{__name__}.fixtures"
               for name in CASE_FIXTURES.intersection(fixtures))


def pytest_collection_modifyitems(config, items):
    cases = [item for item in items if is_case(item)]
    settings = settings_of(config)
    if settings is None:
        if cases:
            raise pytest.UsageError(f"{cases[0].nodeid} is an NSQ conformance case: give the suite's options, e.g. "
                                    "--nsq-target HOST:PORT --nsq-http-target HOST:PORT, or --nsq-embedded")
        return
    catalogue = requirements()
    for item in cases:
        ids = case_requirements(item)
        if not ids:
            raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.requirement(...)")
        unknown = [requirement_id for requirement_id in ids if requirement_id not in catalogue]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid} names unknown requirements {unknown}")
    items[:] = _long_waits_first(items)
    prefixes = settings.requirement_prefixes
    if prefixes:
        deselected = [item for item in cases
                      if not any(i.startswith(p) for i in case_requirements(item) for p in prefixes)]
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A case whose items the chosen release lacks (--nsq-version) is UNSUPPORTED before it starts anything."""
    settings = settings_of(item.config)
    if settings is not None and is_case(item):
        judged = [behaviour for requirement_id in case_requirements(item)
                  for behaviour in behaviour_ids_of(requirements()[requirement_id])]
        why = not_in_version(judged, settings.nsq_version)
        if why:
            raise Unsupported(why)


def _long_waits_first(items: list) -> list:
    """The long_wait cases first, longest first, each followed by one other case: pytest-xdist's first hand to a
    worker is two cases (with maxschedchunk 1), so every worker starts one long wait at once and no worker gets
    two. The rest keep their order."""
    markers = {item: item.get_closest_marker("long_wait") for item in items}
    waits = {item: marker.args[0] for item, marker in markers.items() if marker}
    long = sorted(waits, key=waits.get, reverse=True)
    rest = [item for item in items if item not in waits]
    paired = [item for pair in zip(long, rest, strict=False) for item in pair]
    return paired + long[len(rest):] + rest[len(long):]
