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


def _profiles(tmp_path, **files: str):
    folder = tmp_path / "profiles"
    folder.mkdir()
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    return folder, params


def test_a_profile_extends_another_its_own_keys_applied_last(tmp_path):
    """`extends: NAME`: the named profile's overrides first (and those of the one it extends),
    then this file's, merged key by key; `shdh profile apply` and the Kubeflow front door's
    resolve_params see the same values."""
    from shdh.kubeflow import resolve_params

    folder, params = _profiles(
        tmp_path,
        root="train:\n  epochs: 2\n  lr: 0.01\n",
        base="extends: root\ntrain:\n  epochs: 5\n  bits: [16]\n",
        child="extends: base\ntrain:\n  bits: [16, 32]\nfeatures:\n  batch_size: 64\n",
    )
    overrides = apply_profile("child", params, folder)
    applied = load_params(params)
    assert "extends" not in overrides and "extends" not in applied
    assert applied["profile"] == "child"
    assert (applied["train"]["epochs"], applied["train"]["lr"]) == (5, 0.01)
    assert applied["train"]["bits"] == [16, 32] and applied["features"]["batch_size"] == 64
    shipped = load_params(REPO / "params.yaml")
    assert applied["train"]["batch_size"] == shipped["train"]["batch_size"]  # not set: kept
    resolved = resolve_params(REPO / "params.yaml", "child", (), folder)
    assert {k: resolved["train"][k] for k in ("epochs", "lr", "bits")} == {
        k: applied["train"][k] for k in ("epochs", "lr", "bits")
    }


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"child": "extends: nope\n"}, r"child.yaml: extends unknown profile 'nope': no .*nope"),
        ({"child": "extends: child\n"}, r"child.yaml: extends 'child', which leads back to it"),
        (
            {"child": "extends: base\n", "base": "extends: child\n"},
            r"base.yaml: extends 'child', which leads back to it \(child -> base -> child\)",
        ),
        ({"child": "extends: [base]\n"}, r"child.yaml: extends: expected a profile's name"),
        (
            {"child": "extends: base\ntrain:\n  epochs: 2\n", "base": "train:\n  epochz: 3\n"},
            r"base.yaml: sets train.epochz, a setting .*params.yaml does not have",
        ),
    ],
)
def test_a_bad_extends_is_refused_with_the_file_that_names_it(tmp_path, files, message):
    from shdh.kubeflow import resolve_params

    folder, params = _profiles(tmp_path, **files)
    with pytest.raises(ConfigError, match=message):
        apply_profile("child", params, folder)
    assert params.read_text() == (REPO / "params.yaml").read_text()
    kubeflow = message.replace(r"sets train.epochz, a setting .*params.yaml does not have", "")
    with pytest.raises(ConfigError, match=kubeflow):
        resolve_params(params, "child", (), folder)


def test_the_methods_profile_is_the_default_with_every_deep_method(tmp_path):
    from shdh.hashers import method_catalogue

    params = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", params)
    apply_profile("methods", params, REPO / "profiles")
    applied, shipped = load_params(params), load_params(REPO / "params.yaml")
    assert applied["train"]["methods"] == list(method_catalogue.names("deep"))
    assert len(applied["train"]["methods"]) == 13 and "oracle" in applied["train"]["methods"]
    assert applied["train"]["bits"] == [32, 48, 64] and applied["train"]["seeds"] is None
    for section in ("data", "baselines"):
        assert applied[section] == shipped[section]
    assert applied["evaluate"]["results_dir"] == "results/methods"
    assert applied["evaluate"]["report"] == "docs/results-methods.md"
    # one line a setting: the long list is not folded onto a second line
    line = next(x for x in params.read_text().splitlines() if x.startswith("  methods: [shdh,"))
    assert line.split("#")[0].rstrip().endswith("orthohash, hpdh]")
