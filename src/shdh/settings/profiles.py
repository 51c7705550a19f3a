"""Profiles: applying profiles/NAME.yaml to params.yaml (reading and checking params.yaml:
shdh.settings).

Every setting lives in one params.yaml so that DVC can track each key on its own (a change to
`train.epochs` reruns only training). A profile is a small YAML file of overrides under
profiles/; applying one rewrites params.yaml in place with ruamel's round-trip mode, which keeps
the comments that explain each setting.

A profile may build on another: `extends: NAME` at its top applies profiles/NAME.yaml's
overrides first, then its own, merged key by key (a nested mapping merges, any other value
replaces the base's). The base may extend another in turn; a name with no file, or a chain that
comes back to a profile already in it, is refused with the file that names it. `shdh profile
apply`, the Kubeflow front door (`--profile`) and everything else that reads a profile see the
same merged overrides (profile_overrides).
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
EXTENDS = "extends"  # a profile's key naming the profile it builds on


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


def profile_layers(
    name: str, profiles_dir: str | Path = PROFILES_DIR
) -> list[tuple[Path, dict[str, Any]]]:
    """profiles/NAME.yaml and the profiles it extends, as (file, its own overrides without
    `extends`), the furthest base first: the order they apply in."""
    layers: list[tuple[Path, dict[str, Any]]] = []
    chain: list[str] = []
    current: str | None = name
    referrer: Path | None = None  # the file whose `extends` names `current`
    while current is not None:
        if current in chain:
            raise ConfigError(
                f"{referrer}: extends '{current}', which leads back to it "
                f"({' -> '.join([*chain, current])}): a profile cannot extend itself"
            )
        try:
            path = profile_path(current, profiles_dir)
        except ConfigError as err:
            if referrer is None:
                raise
            raise ConfigError(f"{referrer}: extends {err}") from err
        overrides = load_params(path)
        base = overrides.pop(EXTENDS, None)
        if base is not None and (not isinstance(base, str) or not base.strip()):
            raise ConfigError(f"{path}: {EXTENDS}: expected a profile's name, got {base!r}")
        chain.append(current)
        layers.append((path, overrides))
        referrer, current = path, base
    return layers[::-1]


def profile_overrides(name: str, profiles_dir: str | Path = PROFILES_DIR) -> dict[str, Any]:
    """The overrides profiles/NAME.yaml stands for: those of the profiles it extends, then its
    own, deep-merged."""
    return merge_layers(profile_layers(name, profiles_dir))


def merge_layers(layers: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """profile_layers' overrides merged in their order: the base's first, each later one's on
    top."""
    merged: dict[str, Any] = {}
    for _, overrides in layers:
        merged = deep_merge(merged, overrides)
    return merged


def setter(layers: list[tuple[Path, dict[str, Any]]], dotted: str) -> Path:
    """The file of a profile's chain that sets the key `dotted` (the last one, whose value is
    applied), for an error about that key."""
    for path, overrides in reversed(layers):
        node: Any = overrides
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return path
    return layers[-1][0]


def apply_profile(
    name: str, params_file: str | Path = "params.yaml", profiles_dir: str | Path = PROFILES_DIR
) -> dict[str, Any]:
    """Rewrite params_file with the overrides of profiles/NAME.yaml (with those of the profiles
    it extends); returns the overrides.

    Keys a profile sets must already exist in params.yaml: a misspelt key in a profile would
    otherwise add a setting that nothing reads.
    """
    from ruamel.yaml import YAML  # DVC depends on ruamel; imported lazily to keep import cheap

    layers = profile_layers(name, profiles_dir)
    overrides = merge_layers(layers)
    overrides["profile"] = name
    params_file = Path(params_file)
    load_params(params_file)  # not YAML, or not a mapping: named with its line, as elsewhere
    from ruamel.yaml.comments import CommentedSeq

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096  # one line a setting, as params.yaml has it: a long [flow, list] not folded
    # Keep params.yaml's own style: `null` rather than an empty value, lists as [a, b].
    rt.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    doc = rt.load(params_file.read_text())

    def assign(node: Any, values: dict[str, Any], where: str) -> None:
        for key, value in values.items():
            if key not in node:
                source = setter(layers, f"{where}{key}")
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
                _replace(rt, node, key, seq, 2 * where.count("."))
            else:
                _replace(rt, node, key, value, 2 * where.count("."))

    assign(doc, overrides, "")
    where = f"{params_file} (with profile '{name}')"
    _place_results(doc, _rewritten(rt, doc, where)[1])
    text, written = _rewritten(rt, doc, where)
    from shdh import settings
    from shdh.settings.locations import check_results_location

    check_results_location(settings.validate(written, where).params, where)
    atomic_write_text(params_file, text)
    return overrides


def _replace(rt: Any, node: Any, key: str, value: Any, indent: int) -> None:
    """Set node[key] to value. A value longer than the column of its line's comment pushes the
    comment right, to one space after it, and the file keeps it there: its column is lost. So a
    comment found so pushed returns, once a value that fits is back (`shdh profile apply
    default` after a profile with a long list), to the column most of its siblings' comments
    share: the shipped file comes back byte for byte."""
    from collections import Counter

    items = getattr(getattr(node, "ca", None), "items", {})
    token = items.get(key, [None, None, None])[2]
    pushed = token is not None and token.column == indent + _line_length(rt, key, node[key]) + 1
    node[key] = value
    columns = [
        entry[2].column
        for other, entry in items.items()
        if other != key and len(entry) > 2 and entry[2] is not None
    ]
    if not pushed or not columns:
        return
    home = Counter(columns).most_common(1)[0][0]
    if token.column > home and indent + _line_length(rt, key, value) < home:
        token.column = home


def _line_length(rt: Any, key: str, value: Any) -> int:
    """The length of `key: value` as the round trip writes it, before any comment (a loaded
    list holds its line's comment: it is copied without)."""
    from ruamel.yaml.comments import CommentedSeq

    if isinstance(value, list):
        value = CommentedSeq(list(value))
        value.fa.set_flow_style()
    return len(_dumped(rt, {key: value}).splitlines()[0])


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
