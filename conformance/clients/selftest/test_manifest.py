"""The drivers' manifest and tox agree: every package a driver's `install` pins (drivers/drivers.toml) is a dep of
tox's clients env, pinned the same, so a fresh machine's `tox -e clients` has what each driver imports."""
import configparser
from pathlib import Path

from conformance.clients.driver import drivers

TOX_INI = Path(__file__).parents[3] / "tox.ini"


def _pins(words) -> set[str]:
    return {word.strip() for word in words if word.strip()}


def test_every_pip_pin_is_a_tox_dep():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI)
    deps = _pins(tox["testenv:clients"]["deps"].splitlines())
    pinned = {name: _pins(driver.install.removeprefix("pip:").split()) for name, driver in drivers().items()
              if driver.install.startswith("pip:")}
    missing = {name: sorted(pins - deps) for name, pins in pinned.items() if pins - deps}
    assert not missing, f"pinned in drivers.toml but not in tox.ini [testenv:clients] deps: {missing}"


def test_every_npm_pin_is_installed_by_tox():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI)
    installed = tox["testenv:clients"]["commands_pre"]
    packages = [package for driver in drivers().values() if driver.install.startswith("npm:")
                for package in driver.install.removeprefix("npm:").split()]
    assert packages and all(package in installed.split() for package in packages), (packages, installed)
