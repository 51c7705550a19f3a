"""A train section changed on the command line: `shdh bundle train --set KEY=VALUE` pairs, read
and merged into the section a bundle carries, as `dvc exp run -S train.KEY=VALUE` changes
params.yaml's."""

from __future__ import annotations

import json
from typing import Any

from shdh.hashers.method_catalogue import names
from shdh.runtime.errors import ConfigError


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE pairs as a train-section override. A dotted key sets a deep method's own
    setting (shdh.alpha); params.yaml's own spelling (train.epochs, train.shdh.alpha) is taken
    too, as `dvc exp run -S` takes it. Names the settings do not know are refused later, by the
    planner, as for params.yaml; here the form and the method are checked, naming the pair."""
    out: dict[str, Any] = {}
    deep = names("deep")
    for pair in pairs:
        key, sep, text = pair.partition("=")
        parts = key.strip().removeprefix("train.").split(".")
        if not sep or not all(p.isidentifier() for p in parts) or len(parts) > 2:
            raise ConfigError(
                f"--set {pair!r}: expected KEY=VALUE or METHOD.KEY=VALUE (e.g. image_size=224)"
            )
        if len(parts) == 2 and parts[0] not in deep:
            raise ConfigError(
                f"--set {pair!r}: {parts[0]} is not a deep method, whose own settings a bundle "
                f"trains with ({', '.join(deep)})"
            )
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a path or a name: backbone=resnet18, pretrained=weights/r18.pth
        if len(parts) == 2:
            own = out.setdefault(parts[0], {})
            if not isinstance(own, dict):
                raise ConfigError(f"--set {pair!r}: {parts[0]} is set as a value and a section")
            own[parts[1]] = value
        elif parts[0] in LISTS and not isinstance(value, list) and value is not None:
            raise ConfigError(f"--set {pair!r}: train.{parts[0]} is a list, e.g. {LISTS[parts[0]]}")
        else:
            out[parts[0]] = value
    return out


LISTS = {"methods": 'methods=["shdh"]', "bits": "bits=[16]", "seeds": "seeds=[0,1,2]"}


def merged_section(section: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The bundle's train section with the overrides; a method's own mapping (train.shdh) is
    updated key by key, so that setting shdh.alpha keeps the bundle's other SHDH settings."""
    out = dict(section)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
