"""`--set KEY=VALUE`, the one override syntax of `shdh pipeline` and `shdh bundle train`
(shdh.plan.overrides): values read without PyYAML, keys that must exist, one error for a key
the settings do not have."""

from __future__ import annotations

import pytest

from shdh.kubeflow import resolve_params
from shdh.plan.overrides import apply_overrides, parse_override, read_value
from shdh.runtime.errors import ConfigError
from tests.conftest import REPO

PARAMS = {"train": {"epochs": 3, "bits": [16], "shdh": {"alpha": 1.0, "e1": "levels"}}}


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("224", 224),
        ("0.5", 0.5),
        ("1e-3", 0.001),
        ("true", True),
        ("null", None),
        ('"x y"', "x y"),
        ("[16, 32]", [16, 32]),
        ("[shdh, dpsh]", ["shdh", "dpsh"]),
        ("[shdh, 2, null]", ["shdh", 2, None]),
        ("[]", []),
        ("resnet18", "resnet18"),
        ("w/lite0.pth", "w/lite0.pth"),
        ('{"alpha": 0.5}', {"alpha": 0.5}),
    ],
)
def test_a_value_is_json_a_list_of_words_or_text(raw, value):
    assert read_value(raw) == value


def test_a_key_is_a_dotted_path_that_the_settings_have():
    got = apply_overrides(PARAMS, ["train.epochs=2", "train.shdh.alpha=0.5", "train.bits=[32]"])
    assert got == {"train": {"epochs": 2, "bits": [32], "shdh": {"alpha": 0.5, "e1": "levels"}}}
    assert PARAMS["train"]["epochs"] == 3  # the settings given are left as they were


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "train.epocs=2",
            "--set train.epocs=2: no setting 'train.epocs' in params.yaml; "
            "did you mean train.epochs?",
        ),
        (
            "train.shdh.alfa=2",
            "no setting 'train.shdh.alfa' in params.yaml; did you mean train.shdh.alpha?",
        ),
        ("trian.epochs=2", "--set trian.epochs=2: no section 'trian' in params.yaml"),
        ("train.epochs.x=2", "--set train.epochs.x=2: no section 'train.epochs' in params.yaml"),
        ("train.epochs", "--set train.epochs: expected KEY=VALUE with KEY a params.yaml key"),
        ("=2", "--set =2: expected KEY=VALUE"),
        ("train..epochs=2", "--set train..epochs=2: expected KEY=VALUE"),
    ],
)
def test_a_bad_override_is_named(text, message):
    with pytest.raises(ConfigError) as err:
        apply_overrides(PARAMS, [text])
    assert message in str(err.value)


def test_the_pipeline_takes_the_same_syntax_and_error():
    params = resolve_params(REPO / "params.yaml", None, ["train.epochs=2", "train.bits=[16]"])
    assert (params["train"]["epochs"], params["train"]["bits"]) == (2, [16])
    with pytest.raises(ConfigError, match=r"no setting 'train\.epocs' in params\.yaml"):
        resolve_params(REPO / "params.yaml", None, ["train.epocs=2"])
    with pytest.raises(ConfigError, match=r"params\.yaml with --set train\.epochs=2\.5: "):
        resolve_params(REPO / "params.yaml", None, ["train.epochs=2.5"])


def test_parse_override_splits_at_the_first_equals_sign():
    assert parse_override("train.pretrained=s3://b/k=v.pth") == (
        "train.pretrained",
        "s3://b/k=v.pth",
    )
