"""The JSON records steps hand each other: a damaged one names its file and what it should
hold, and the commands that read evaluate's metrics stop with that line."""

from __future__ import annotations

import json

import pytest

from shdh.reporting.report import read_metrics
from shdh.runtime.json_files import read_json_object


def test_an_object_is_read_as_it_was_written(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"method": "shdh", "bits": 32}))
    assert read_json_object(path, "the fit record") == {"method": "shdh", "bits": 32}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "no such file, expected the fit record; run it again"),
        ('{"method": "sh', "cannot read the fit record (Unterminated string"),
        (b"\xff\xfe{}", "cannot read the fit record ('utf-8' codec can't decode"),
        ("[1, 2]", "expected the fit record as a JSON object, found a list; run it again"),
    ],
)
def test_a_damaged_record_names_its_file_and_what_it_should_hold(tmp_path, text, problem):
    path = tmp_path / "fits" / "shdh-32.json"
    path.parent.mkdir()
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_json_object(path, "the fit record", hint="run it again")
    assert str(caught.value).startswith(f"{path}: {problem}")


def test_metrics_of_another_shape_name_the_method_whose_entry_is_wrong(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"itq": {"32": {}}, "shdh": 0.9}))
    with pytest.raises(ValueError) as caught:
        read_metrics(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'metrics.json'}: field 'shdh': expected the scores by code length, "
        "found a float; run `shdh evaluate`"
    )


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"16": {"ndcg@100": "high"}},
            "field 'itq'.'16'.'ndcg@100': expected a number, got 'high'",
        ),
        ({"16": {"ndcg@100": True}}, "field 'itq'.'16'.'ndcg@100': expected a number, got True"),
        ({"x16": {"ndcg@100": 0.9}}, "field 'itq'.'x16': expected a code length (digits)"),
        ({"16": [0.9]}, "field 'itq'.'16': expected the scores, found a list"),
    ],
)
def test_a_hand_edited_score_names_its_method_length_and_metric(tmp_path, entry, problem):
    """What `shdh results` and `shdh report` would otherwise meet in a table's formatting."""
    (tmp_path / "metrics.json").write_text(json.dumps({"shdh": {"16": {"seeds": 3}}, "itq": entry}))
    with pytest.raises(ValueError) as caught:
        read_metrics(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'metrics.json'}: {problem}")
