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


def test_every_pip_target_pin_is_installed_apart_by_tox():
    """A library installed into a folder of its own (drivers.toml `path`) is installed there by commands_pre, the
    folder being the variable the driver reads."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI)
    section = tox["testenv:clients"]
    apart = {driver.path: driver.install.removeprefix("pip --target:").split() for driver in drivers().values()
             if driver.install.startswith("pip --target:")}
    assert apart and all(path for path in apart)
    for variable, packages in apart.items():
        folder = next(line.split("=", 1)[1].strip() for line in section["setenv"].splitlines()
                      if line.split("=", 1)[0].strip() == variable)
        assert any(f"--target {folder}" in line and all(package in line.split() for package in packages)
                   for line in section["commands_pre"].splitlines()), (variable, packages)


def test_every_npm_pin_is_installed_by_tox():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI)
    installed = tox["testenv:clients"]["commands_pre"]
    packages = [package for driver in drivers().values() if driver.install.startswith("npm:")
                for package in driver.install.removeprefix("npm:").split()]
    assert packages and all(package in installed.split() for package in packages), (packages, installed)
