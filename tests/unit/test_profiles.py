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


def test_a_params_file_dvc_rewrote_takes_every_profile(tmp_path):
    """`dvc exp run -S` rewrites params.yaml with its own YAML writer: lists in block style, the
    key's comment held by the list. Every profile then applies (a replaced list used to take its
    line's end along, and the key after it landed on the line before) and `default` gives back
    the shipped values."""
    from dvc.utils.serialize import modify_yaml

    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    with modify_yaml(params) as doc:  # what `dvc exp run -S train.bits=[64] ...` writes
        doc["train"]["bits"] = [64]
        doc["train"]["methods"] = ["shdh"]
        doc["baselines"]["methods"] = ["itq", "ksh"]
    assert "bits:" in params.read_text() and "  - 64\n" in params.read_text()
    for name in sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")):
        overrides = apply_profile(name, params, REPO / "profiles")
        applied = load_params(params)
        assert applied["profile"] == name
        for section in ("train", "baselines"):
            for key, value in overrides.get(section, {}).items():
                assert applied[section][key] == value, (name, section, key)
    apply_profile("default", params, REPO / "profiles")
    assert load_params(params) == load_params(REPO / "params.yaml")


def test_a_rewrite_that_would_not_parse_is_refused_and_leaves_the_file(tmp_path, monkeypatch):
    from shdh.settings import profiles

    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    monkeypatch.setattr(profiles, "_dumped", lambda rt, doc: "train:\n  bits: [16] seeds: null\n")
    with pytest.raises(ConfigError, match=r"with profile 'smoke'\): the rewritten file would not"):
        apply_profile("smoke", params, REPO / "profiles")
    assert params.read_text() == (REPO / "params.yaml").read_text()


def test_profiles_are_listed_by_name(capsys):
    from shdh.cli import main

    assert main(["profile", "list"]) == 0
    names = capsys.readouterr().out.split()
    assert names == sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
    assert names.index("photos") < names.index("photos-smoke")
