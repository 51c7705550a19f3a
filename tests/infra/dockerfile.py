"""Reading a Dockerfile and a .dockerignore the way `docker build` does, for the image tests.

Only what the tests need: the instructions (with line continuations joined), the stages of a
multi-stage build, the final USER, the sources of COPY, and whether the build context keeps a
path. The .dockerignore rules are
those of Docker's pattern matcher (moby/patternmatcher): Go filepath.Match syntax plus `**`,
`!` re-includes, the last matching line wins, and a pattern that matches a directory matches
everything below it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; comments dropped, continued lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            keyword, _, arguments = whole.partition(" ")
            result.append((keyword.upper(), arguments.strip()))
    if pending:
        raise ValueError(f"{dockerfile}: the last instruction ends with a line continuation")
    return result


@dataclass(frozen=True)
class Stage:
    """One FROM ... AS name section: its base (an image, or an earlier stage) and its steps."""

    name: str
    base: str
    steps: list[tuple[str, str]]

    def arguments(self, keyword: str) -> list[str]:
        return [arguments for key, arguments in self.steps if key == keyword]

    def user(self) -> str | None:
        users = self.arguments("USER")
        return users[-1] if users else None


def stages(dockerfile: Path) -> dict[str, Stage]:
    """The stages by name (unnamed ones by their index), in order."""
    found: dict[str, Stage] = {}
    for keyword, arguments in instructions(dockerfile):
        if keyword == "FROM":
            words = [w for w in arguments.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(found))
            found[name] = Stage(name, words[0], [])
        elif found:
            found[list(found)[-1]].steps.append((keyword, arguments))
    return found


def final_user(dockerfile: Path) -> str:
    """The argument of the last USER instruction (what the container runs as)."""
    users = [arguments for keyword, arguments in instructions(dockerfile) if keyword == "USER"]
    if not users:
        raise ValueError(f"{dockerfile}: no USER instruction, so the image runs as root")
    return users[-1]


def arg_defaults(dockerfile: Path) -> dict[str, str]:
    """Every `ARG NAME=DEFAULT` of the file (a later one of the same name wins)."""
    found = {}
    for keyword, arguments in instructions(dockerfile):
        if keyword == "ARG" and "=" in arguments:
            name, _, default = arguments.partition("=")
            found[name.strip()] = default.strip().strip('"')
    return found


def global_args(dockerfile: Path) -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults: what a FROM line may use."""
    found = {}
    for keyword, arguments in instructions(dockerfile):
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = arguments.partition("=")
            found[name.strip()] = default.strip().strip('"')
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """${NAME} and $NAME replaced by values[NAME], as the builder substitutes ARGs."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def copy_sources(dockerfile: Path) -> list[str]:
    """The build-context paths that COPY and ADD read (not those copied from another stage),
    with build arguments at their defaults."""
    sources: list[str] = []
    defaults = arg_defaults(dockerfile)
    for keyword, arguments in instructions(dockerfile):
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(arguments)
        if any(word.startswith("--from") for word in words):
            continue
        paths = [expand(word, defaults) for word in words if not word.startswith("--")]
        sources.extend(paths[:-1])  # the last one is the destination
    return sources


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    exclusion: bool  # a `!` line: re-include what earlier lines left out


def _compile(pattern: str) -> re.Pattern[str]:
    """Docker's translation: `**` any number of directories, `*` and `?` within one name."""
    out = ""
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out += "(.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif char == "*":
            out += "[^/]*"
            i += 1
        elif char == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(char)
            i += 1
    return re.compile(f"^{out}$")


class DockerIgnore:
    """The rules of one .dockerignore file."""

    def __init__(self, lines: list[str]) -> None:
        self._patterns: list[_Pattern] = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclusion = line.startswith("!")
            if exclusion:
                line = line[1:].strip()
            cleaned = posixpath.normpath(line).lstrip("/")
            self._patterns.append(_Pattern(_compile(cleaned), exclusion))

    @classmethod
    def from_file(cls, path: Path) -> DockerIgnore:
        return cls(path.read_text().splitlines())

    def excludes(self, path: str) -> bool:
        """Whether the build context leaves out `path` (relative to the context, "/" separated)."""
        parts = posixpath.normpath(path).split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for pattern in self._patterns:
            # An include line can only change an excluded path, and the other way round.
            if pattern.exclusion != excluded:
                continue
            if any(pattern.regex.match(candidate) for candidate in candidates):
                excluded = not pattern.exclusion
        return excluded
