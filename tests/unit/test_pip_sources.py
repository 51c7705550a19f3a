"""tools/pip_sources.py: `make setup` hands uv the package sources pip is configured with."""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("pip_sources", REPO / "tools" / "pip_sources.py")
pip_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_sources)

# What `pip config list` prints on the development machines: PIP_* variables as ":env:",
# pip.conf files by scope, values quoted, several indexes in one space-separated value.
LISTED = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other-wheels'
"""


@pytest.fixture
def listed(monkeypatch):
    def run(cmd, **kwargs):
        assert cmd[1:] == ["-m", "pip", "config", "list"]
        return subprocess.CompletedProcess(cmd, 0, stdout=LISTED, stderr="")

    monkeypatch.setattr(pip_sources.subprocess, "run", run)


def test_each_key_comes_from_its_strongest_scope(listed):
    config = pip_sources.pip_config("python")
    assert config["find-links"] == "/opt/wheels"  # the variable wins over pip.conf
    assert config["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert config["constraint"] == "/etc/xdg/pip/constraints.txt"


def test_the_development_machines_sources_become_uv_flags(listed):
    flags = pip_sources.uv_flags(pip_sources.pip_config("python"))
    assert flags == [
        "--index", "file:///opt/pypi/simple",
        "--index", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--index-strategy", "unsafe-best-match",  # pip's choice among several indexes
        "--native-tls",
    ]  # fmt: skip


def test_no_configuration_gives_uvs_defaults():
    assert pip_sources.uv_flags({}) == []
    assert pip_sources.uv_flags({"index-url": "https://mirror.example/simple"}) == [
        "--default-index",
        "https://mirror.example/simple",
    ]
