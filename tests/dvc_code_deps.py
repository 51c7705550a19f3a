"""The code dependencies of every DVC stage, computed from the import graph, so that `dvc repro`
reruns a stage whenever any module its command can load changes, wherever modules move.

A stage's `cmd:` runs `shdh STEP`; the CLI loads the command module of STEP, and the stage's code
is everything that module imports, transitively (tests/import_graph.py), written as compactly as
DVC allows: a folder when the stage needs every module in it, else the files.

    python -m tests.dvc_code_deps [dvc.yaml]   # rewrite the code entries (`make dvc-deps`)
"""

from __future__ import annotations

import io
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq
from ruamel.yaml.tokens import CommentToken

from shdh.runtime.atomic import atomic_write_text
from tests import import_graph

# How a `cmd:` names the code it runs: entry point -> where its command module STEP lives, the
# first one that exists.
COMMANDS: dict[str, tuple[str, ...]] = {"shdh": ("shdh.commands.{}",)}
_SHELL_SEPARATORS = {"&&", "||", ";", "|"}
HEADER = "the code this stage runs (make dvc-deps; tests/unit/test_dvc_deps.py)"
Packages = Sequence[tuple[str, str]]


def stage_code_deps(
    dvc_yaml: Path, packages: Packages = import_graph.PACKAGES, commands=COMMANDS
) -> dict[str, list[str]]:
    """{stage: the source paths (relative to dvc.yaml's folder) of the code its cmd runs}.

    A `foreach`/`do` stage is one entry: its commands differ only in ${item}, never in the step.
    A stage with `always_changed: true` runs on every repro whatever its deps say, so it gets
    none: they would only make dvc.yaml longer."""
    dvc_yaml = Path(dvc_yaml)
    root = dvc_yaml.parent.resolve()
    imports = import_graph.scan(root, packages)
    tops = [root / folder for folder in code_roots(root, packages)]
    code = {}
    for name, stage in (_load(dvc_yaml).get("stages") or {}).items():
        body = stage.get("do", stage)
        modules: set[str] = set()
        if not body.get("always_changed"):
            for module in _command_modules(
                body.get("cmd"), imports.files, commands, dvc_yaml, name
            ):
                modules |= import_graph.closure(imports.edges, module, imports.eager)
        needed = {imports.files[module] for module in modules}
        paths = _compact(needed, imports.files.values(), tops)
        code[name] = sorted(path.relative_to(root).as_posix() for path in paths)
    return code


def code_roots(root: Path, packages: Packages = import_graph.PACKAGES) -> list[str]:
    """The package folders, relative to root: a dep in one of them is generated, never written
    by hand."""
    root = root.resolve()
    return [
        (root / folder / package).resolve().relative_to(root).as_posix()
        for folder, package in packages
    ]


def is_code(dep: object, roots: Iterable[str]) -> bool:
    return isinstance(dep, str) and any(
        dep.rstrip("/") == r or dep.startswith(r + "/") for r in roots
    )


def declared_code_deps(dvc_yaml: Path, packages: Packages = import_graph.PACKAGES) -> dict:
    """{stage: its code entries in dvc.yaml, sorted}: what the test compares."""
    roots = code_roots(Path(dvc_yaml).parent, packages)
    stages = _load(Path(dvc_yaml)).get("stages") or {}
    return {
        name: sorted(d for d in stage.get("do", stage).get("deps") or [] if is_code(d, roots))
        for name, stage in stages.items()
    }


def write_code_deps(
    dvc_yaml: Path, packages: Packages = import_graph.PACKAGES, commands=COMMANDS
) -> dict[str, list[str]]:
    """Replace the code entries of every stage's deps with the computed ones, after the other
    deps; the rest of the file (comments, data deps, ${...}) is kept as written."""
    dvc_yaml = Path(dvc_yaml)
    code = stage_code_deps(dvc_yaml, packages, commands)
    roots = code_roots(dvc_yaml.parent, packages)
    yaml = _round_trip()
    document = yaml.load(dvc_yaml.read_text(encoding="utf-8"))
    for name, stage in (document.get("stages") or {}).items():
        body = stage.get("do", stage)
        if "deps" not in body and code[name]:
            # right after cmd, as `dvc stage add` writes it
            body.insert(list(body).index("cmd") + 1 if "cmd" in body else 0, "deps", CommentedSeq())
        if "deps" in body:
            _drop_header_after_key(body)
            # the header comment goes where the dashes are: the key's column + the offset of 2
            dashes = body["deps"].lc.col
            _replace_code(
                body["deps"], code[name], roots, body.lc.col + 2 if dashes is None else dashes
            )
            if not body["deps"]:
                del body["deps"]  # DVC reads `deps: []` fine, people would wonder
    out = io.StringIO()
    yaml.dump(document, out)
    atomic_write_text(dvc_yaml, out.getvalue())
    return code


def _replace_code(deps: CommentedSeq, code: list[str], roots: list[str], indent: int) -> None:
    """Keep the other deps and their comments. ruamel stores a full-line comment with the entry
    above it, so the header of the last run is dropped from there, and full-line comments after
    a last entry that is code (they belong to what follows the list) move to the new last one."""
    comments = deps.ca.items
    tail = comments.get(len(deps) - 1) if deps and is_code(deps[-1], roots) else None
    kept = [(dep, comments.get(i)) for i, dep in enumerate(deps) if not is_code(dep, roots)]
    deps.clear()
    comments.clear()
    for i, (dep, comment) in enumerate(kept):
        deps.append(dep)
        if comment and comment[0] is not None:
            comment[0] = _retext(comment[0], _own(comment[0]), _lines_after(comment[0]))
        if comment and any(comment):
            comments[i] = comment
    deps.extend(code)
    if code:
        deps.yaml_set_comment_before_after_key(len(kept), before=HEADER, indent=indent)
    if tail and tail[0] is not None and _lines_after(tail[0]) and deps:
        last = comments.setdefault(len(deps) - 1, [None, None, None, None])
        if last[0] is None:
            last[0] = _retext(tail[0], "", _lines_after(tail[0]))
        else:
            lines = _lines_after(last[0]) + _lines_after(tail[0])
            last[0] = _retext(last[0], _own(last[0]), lines)


def _drop_header_after_key(body) -> None:
    """When no other dep comes first, ruamel keeps the header of the last run both with the
    `deps` key and as the list's opening comment."""
    entry = body.ca.items.get("deps")
    if entry and len(entry) > 3 and entry[3]:
        entry[3] = _without_header(entry[3])
        if not any(entry):
            del body.ca.items["deps"]
    opening = body["deps"].ca.comment
    if opening and len(opening) > 1 and opening[1]:
        opening[1] = _without_header(opening[1])


def _without_header(tokens: list[CommentToken]) -> list[CommentToken] | None:
    return [t for t in tokens if t.value.strip() != f"# {HEADER}"] or None


def _own(token: CommentToken) -> str:
    """The entry's end-of-line comment ("" when it has none)."""
    return token.value.split("\n")[0]


def _lines_after(token: CommentToken) -> list[str]:
    """The full-line comments that ruamel keeps with the entry above them, less the header."""
    lines = token.value.split("\n")[1:]
    return [line for line in lines if line.strip() and line.strip() != f"# {HEADER}"]


def _retext(token: CommentToken, own: str, lines: list[str]) -> CommentToken | None:
    """The token (its position kept, which the emitter needs) with new text; None when that is
    a bare newline, which ruamel would print as a blank line."""
    text = own + "\n" + "".join(f"{line}\n" for line in lines)
    if not text.strip():
        return None
    token.value = text
    return token


def _command_modules(cmd, files: Mapping[str, Path], commands, dvc_yaml: Path, stage: str):
    """The command module of each `ENTRY STEP` at the start of a command (`--method shdh` is an
    argument, not a command)."""
    for line in [cmd] if isinstance(cmd, str) else cmd or []:
        words = shlex.split(line)
        for i, (entry, step) in enumerate(zip(words, words[1:], strict=False)):
            if entry not in commands or (i > 0 and words[i - 1] not in _SHELL_SEPARATORS):
                continue
            candidates = [template.format(step) for template in commands[entry]]
            found = [module for module in candidates if module in files]
            if not found:
                raise ValueError(
                    f"{dvc_yaml}: stages.{stage}.cmd: `{entry} {step}` names no command module "
                    f"(looked for {', '.join(candidates)})"
                )
            yield found[0]


def _compact(needed: set[Path], every: Iterable[Path], tops: Iterable[Path]) -> list[Path]:
    """The needed files, with a folder in place of its files when every module in it is
    needed."""
    every = set(every)

    def walk(folder: Path) -> list[Path]:
        inside = {f for f in every if folder in f.parents}
        if inside <= needed:
            return [folder]
        found = [f for f in needed if f.parent == folder]
        subfolders = {folder / f.relative_to(folder).parts[0] for f in inside if f.parent != folder}
        for sub in sorted(subfolders):
            if any(sub in f.parents for f in needed):
                found += walk(sub)
        return found

    return [path for top in tops if any(top in f.parents for f in needed) for path in walk(top)]


def _round_trip() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never wrap a long command
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _load(dvc_yaml: Path) -> dict:
    return YAML(typ="safe", pure=True).load(dvc_yaml.read_text(encoding="utf-8")) or {}


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    dvc_yaml = Path(args[0] if args else "dvc.yaml")
    for stage, paths in write_code_deps(dvc_yaml).items():
        print(f"{stage}: {len(paths)} code paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())
