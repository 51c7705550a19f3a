"""Settings: params.yaml read once and every section and key checked before a step does work.

Every front door goes through here: the CLI and the DVC stages (shdh.commands.common), `shdh
profile apply`, and the Kubeflow compile step and components (shdh.commands.pipeline). A typo
("unknown setting data.skip_bad_imgs; did you mean data.skip_bad_images?") or a value of the
wrong kind ("train.epochs: expected an integer >= 1, got 2.5") fails at once, on one line that
names the file and the key, instead of being ignored or failing deep inside a step.

`load`, the commands' entry, also checks that your own data is where data.raw_dir says
(shdh.settings.raw_data): the results folder and the inputs stage derive from that path.

The schema is shdh.settings.sections (one typed section object per params.yaml section). The
steps take plain dicts, so that a library user can call one without this package:
`Settings.params` is the file as read, checked against the schema.

May import: core, data, hashers, nets, ranking, runtime, training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shdh.runtime.errors import ConfigError
from shdh.settings import sections
from shdh.settings.checks import parse_section, unknown_key
from shdh.settings.raw_data import check_raw_dir


@dataclass(frozen=True)
class Settings:
    """A validated params file: as plain dicts (what the steps take) and as typed sections."""

    params: dict[str, Any]
    typed: Any  # an instance of the schema's params class (shdh.settings.sections.schema)
    source: str

    def section(self, name: str) -> dict[str, Any]:
        return self.params[name]


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last,
    so a setting edited in one place and left in another would silently take the other value."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    f"'{key}' is set twice", seen[key], "again", key_node.start_mark
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read params.yaml as plain dicts; the file must be a mapping."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a params file (params.yaml)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: params file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the params file as UTF-8 text ({exc})") from exc
    try:
        params = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return params


def validate(params: dict[str, Any], source: str | Path = "params.yaml") -> Settings:
    """Check every section and key of a params mapping; a ConfigError names the first problem."""
    source = str(source)
    typed = parse_section(sections.current().params, params, "", source)
    _check_tree_source(typed.tree.source, source)
    _check_loop(typed.train, source)
    return Settings(params=params, typed=typed, source=source)


def load(path: str | Path = "params.yaml") -> Settings:
    """Read and validate a params file, and check that your own data is where data.raw_dir
    says: every command starts here, and the results folder's name and the inputs stage derive
    from that path, so a misspelt one must be named before anything reads it."""
    checked = validate(load_params(path), path)
    check_raw_dir(checked.params["data"], str(path))
    return checked


def validate_section(name: str, mapping: Any, source: str) -> Any:
    """One section on its own (a Kubeflow component gets one section as a parameter)."""
    known = sections.current().sections
    if name not in known:
        raise ConfigError(f"{source}: {unknown_key(name, list(known), '')}")
    typed = parse_section(known[name], mapping, name, source)
    if name == "tree":
        _check_tree_source(typed.source, source)
    return typed


def _check_loop(train: Any, source: str) -> None:
    """The deep loop's checks across keys (pretrained weights from the web need their SHA-256,
    ...), which each key's own check cannot see: here, at the first step, not when a fit
    starts an hour later."""
    import dataclasses

    from shdh.training.loop_settings import LoopSettings

    values = {f.name: getattr(train, f.name) for f in dataclasses.fields(LoopSettings)}
    try:
        LoopSettings(**values)
    except ValueError as err:
        problem = str(err).removeprefix(f"{LoopSettings.__name__}.")
        raise ConfigError(f"{source}: train.{problem}") from err


def _check_tree_source(value: str, source: str) -> None:
    from shdh.data.dataset_catalogue import BUILTIN_TREES

    if value.startswith("builtin:") and value.removeprefix("builtin:") not in BUILTIN_TREES:
        raise ConfigError(
            f"{source}: tree.source: unknown built-in tree {value!r}; choose one of "
            + ", ".join(f"builtin:{name}" for name in BUILTIN_TREES)
        )
