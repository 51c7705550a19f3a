"""Settings changed on the command line: `--set KEY=VALUE`, the one override syntax of every
command that takes overrides (`shdh pipeline compile|run|submit`, `shdh bundle train`), parsed
here, as `dvc exp run -S KEY=VALUE` changes params.yaml for the DVC pipeline.

KEY is the setting's dotted path in params.yaml (train.epochs, train.shdh.alpha,
baselines.ksh.n_anchors), and it must be one that the settings being changed already have: a
misspelt key is refused by name, with the closest one, never added as a new setting that nothing
reads. VALUE is JSON (2, 0.1, 1e-3, null, true, "text", [16, 32]), or a bracketed list of bare
words ([shdh, dpsh]), or else plain text (resnet18, weights/r18.pth): what YAML's flow values are
for these settings, read without PyYAML, which a bare GPU machine training from a bundle lacks.
The values are then checked with every other setting (shdh.settings, or the planner for a
bundle), so a bad value is named by its key there.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterable
from typing import Any

from shdh.runtime.errors import ConfigError

EXAMPLE = "train.epochs=2"


def read_value(raw: str) -> Any:
    """A VALUE as the module docstring says: JSON, a bracketed list of words, else text."""
    text = raw.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [read_value(item) for item in inner.split(",")] if inner else []
    return text


def parse_override(text: str) -> tuple[str, Any]:
    """'train.epochs=2' -> ('train.epochs', 2)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not all(part.strip() for part in key.split(".")):
        raise ConfigError(
            f"--set {text}: expected KEY=VALUE with KEY a params.yaml key, e.g. {EXAMPLE}"
        )
    return key, read_value(raw)


def apply_overrides(
    params: dict[str, Any], texts: Iterable[str], where: str = "params.yaml"
) -> dict[str, Any]:
    """A copy of params with each `KEY=VALUE` of texts set, in order; a key that `params` (the
    settings named `where` in the error) does not have is refused, naming the closest one."""
    out = copy.deepcopy(params)
    for text in texts:
        key, value = parse_override(text)
        *parents, last = key.split(".")
        node: Any = out
        for i, name in enumerate(parents):
            node = node.get(name) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                section = ".".join(parents[: i + 1])
                raise ConfigError(f"--set {text}: no section '{section}' in {where}")
        if last not in node:
            close = difflib.get_close_matches(last, [str(k) for k in node], n=1, cutoff=0.6)
            hint = f"; did you mean {'.'.join([*parents, close[0]])}?" if close else ""
            raise ConfigError(f"--set {text}: no setting '{key}' in {where}{hint}")
        node[last] = value
    return out
