"""Profiles rewrite params.yaml in place; `default` must restore exactly what ships."""

from __future__ import annotations

import shutil

import pytest

from shdh.settings.profiles import ConfigError, apply_profile, load_params
from tests.conftest import REPO


def test_default_profile_restores_params_yaml_after_any_other(tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    shipped = params.read_text()
    for name in sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")):
        apply_profile(name, params, REPO / "profiles")
        assert load_params(params)["profile"] == name
        apply_profile("default", params, REPO / "profiles")
        # byte for byte: comments, `null` and [flow, lists] survive the round trip
        assert params.read_text() == shipped, name


def test_smoke_profile_changes_what_it_lists_and_nothing_else(tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    before = load_params(params)
    apply_profile("smoke", params, REPO / "profiles")
    after = load_params(params)
    assert after["data"]["max_items"] == 600 and after["train"]["bits"] == [16]
    assert after["seed"] == before["seed"] and after["tree"] == before["tree"]
    assert "[16]" in params.read_text()


def test_a_profile_with_an_unknown_key_is_refused_and_leaves_the_file(tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    (tmp_path / "typo.yaml").write_text("train:\n  epochz: 3\n")
    message = r"typo.yaml: sets train.epochz, a setting .*params.yaml does not have; it has "
    with pytest.raises(ConfigError, match=message + r"'train.epochs': which is misspelt\?"):
        apply_profile("typo", params, tmp_path)
    assert params.read_text() == (REPO / "params.yaml").read_text()
    # A params.yaml that is not YAML is named with its line, and left as it is.
    params.write_text(params.read_text().replace("epochs: 3 ", "epochs: [3 "))
    broken = params.read_text()
    with pytest.raises(ConfigError, match=r"(?s)params.yaml: not valid YAML: .*line \d+"):
        apply_profile("smoke", params, REPO / "profiles")
    assert params.read_text() == broken
