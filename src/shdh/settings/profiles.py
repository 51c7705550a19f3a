"""Profiles: applying profiles/NAME.yaml to params.yaml (reading and checking params.yaml:
shdh.settings).

Every setting lives in one params.yaml so that DVC can track each key on its own (a change to
`train.epochs` reruns only training). A profile is a small YAML file of overrides under
profiles/; applying one rewrites params.yaml in place with ruamel's round-trip mode, which keeps
the comments that explain each setting.
"""

from __future__ import annotations

import copy
import difflib
import io
from pathlib import Path
from typing import Any

import yaml

from shdh.runtime.atomic import atomic_write_text
from shdh.runtime.errors import ConfigError
from shdh.settings import load_params

PROFILES_DIR = Path("profiles")


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return base with overrides applied key by key (nested mappings merge, others replace)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def profile_path(name: str, profiles_dir: str | Path = PROFILES_DIR) -> Path:
    path = Path(profiles_dir) / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in Path(profiles_dir).glob("*.yaml"))
        raise ConfigError(f"unknown profile '{name}': no {path} (known: {', '.join(known)})")
    return path


def apply_profile(
    name: str, params_file: str | Path = "params.yaml", profiles_dir: str | Path = PROFILES_DIR
) -> dict[str, Any]:
    """Rewrite params_file with the overrides of profiles/NAME.yaml; returns the overrides.

    Keys a profile sets must already exist in params.yaml: a misspelt key in a profile would
    otherwise add a setting that nothing reads.
    """
    from ruamel.yaml import YAML  # DVC depends on ruamel; imported lazily to keep import cheap

    source = profile_path(name, profiles_dir)
    overrides = load_params(source)
    overrides["profile"] = name
    params_file = Path(params_file)
    load_params(params_file)  # not YAML, or not a mapping: named with its line, as elsewhere
    from ruamel.yaml.comments import CommentedSeq

    rt = YAML()
    rt.preserve_quotes = True
    # Keep params.yaml's own style: `null` rather than an empty value, lists as [a, b].
    rt.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    doc = rt.load(params_file.read_text())

    def assign(node: Any, values: dict[str, Any], where: str) -> None:
        for key, value in values.items():
            if key not in node:
                raise ConfigError(_missing_key(source, params_file, f"{where}{key}", node))
            if isinstance(value, dict):
                assign(node[key], value, f"{where}{key}.")
            elif isinstance(value, list) and _in_block_style(node[key]):
                # A list DVC wrote (`dvc exp run -S`) is in block style, with the key's comment
                # held by the list: ruamel loses that line's end if the list is replaced, and
                # the next key lands on the line before. Its items are replaced in place.
                node[key][:] = value
            elif isinstance(value, list):
                seq = CommentedSeq(value)
                seq.fa.set_flow_style()
                node[key] = seq
            else:
                node[key] = value

    assign(doc, overrides, "")
    where = f"{params_file} (with profile '{name}')"
    _place_results(doc, _rewritten(rt, doc, where)[1])
    text, written = _rewritten(rt, doc, where)
    from shdh import settings
    from shdh.settings.locations import check_results_location

    check_results_location(settings.validate(written, where).params, where)
    atomic_write_text(params_file, text)
    return overrides


def _in_block_style(value: Any) -> bool:
    from ruamel.yaml.comments import CommentedSeq

    return isinstance(value, CommentedSeq) and not value.fa.flow_style()


def _missing_key(source: Path, params_file: Path, dotted: str, node: Any) -> str:
    """Which file is wrong is not known: a misspelt key in the profile, or in params.yaml."""
    key = dotted.rpartition(".")[2]
    close = difflib.get_close_matches(key, [str(k) for k in node], n=1)
    found = f"; it has '{dotted[: -len(key)]}{close[0]}': which is misspelt?" if close else ""
    return f"{source}: sets {dotted}, a setting {params_file} does not have{found}"


def _dumped(rt: Any, doc: Any) -> str:
    buffer = io.StringIO()
    rt.dump(doc, buffer)
    return buffer.getvalue()


def _rewritten(rt: Any, doc: Any, where: str) -> tuple[str, Any]:
    """The text the edited document dumps to, and what it parses back to. ruamel's writer, not
    the user, is at fault where it does not parse: say so, before the file is touched."""
    text = _dumped(rt, doc)
    try:
        return text, yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(
            f"{where}: the rewritten file would not be valid YAML ({err}); the file is left as "
            "it was: apply the profile to the shipped params.yaml (git checkout params.yaml)"
        ) from err


def _place_results(doc: Any, params: Any) -> None:
    """Point evaluate.results_dir and evaluate.report at this dataset's and profile's folder
    unless they are already theirs (or a place of the user's own): a profile run on other data
    must never write over the project's published results."""
    from shdh.settings.locations import fitting_location

    if not isinstance(params.get("evaluate"), dict) or not isinstance(params.get("data"), dict):
        return  # settings.validate names what is missing
    for key, value in fitting_location(params).items():
        if key in doc["evaluate"] and doc["evaluate"][key] != value:
            doc["evaluate"][key] = value
