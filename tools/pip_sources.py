"""Print uv's flags for the package sources pip is configured with (pip.conf and PIP_* variables).

Why: `make setup` installs the lock with uv (about 30 s against pip's 3.5 to 4 minutes, the
largest part of a fresh clone's `make test`), but uv does not read pip's configuration, and a
machine may point pip at local indexes, wheel folders or a constraint file (the development
machines do, through pip.conf and PIP_FIND_LINKS). Reading them from `pip config list` keeps
pip's configuration the single place to say where packages come from.

pip merges the indexes it is given and takes the best match from any of them; uv by default
takes a package from the first index that has it, so `--index-strategy unsafe-best-match` is
given with any extra index, as pip behaves.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's keys, and uv's flag for each; a key that may hold several values, space-separated
FLAGS = {
    "index-url": ("--default-index", False),
    "extra-index-url": ("--index", True),
    "find-links": ("--find-links", True),
    "constraint": ("--constraint", True),
}
# where a key is read from, the strongest first (pip's own order of precedence)
SCOPES = (":env:", "site", "user", "global")


def pip_config(python: str) -> dict[str, str]:
    """{key: value} from `pip config list`, each key from its strongest scope."""
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, dict[str, str]] = {}
    for line in listed.splitlines():
        name, _, value = line.partition("=")
        scope, _, key = name.rpartition(".")
        if scope in SCOPES and value:
            found.setdefault(key, {})[scope] = shlex.split(value)[0]
    return {key: next(by[s] for s in SCOPES if s in by) for key, by in found.items()}


def uv_flags(config: dict[str, str]) -> list[str]:
    flags = []
    for key, (flag, several) in FLAGS.items():
        if key in config:
            for value in config[key].split() if several else [config[key]]:
                flags += [flag, value]
    if "extra-index-url" in config:
        flags += ["--index-strategy", "unsafe-best-match"]
    if "cert" in config:  # pip told which CAs to trust: uv takes the system's, not its own
        flags += ["--native-tls"]
    return flags


if __name__ == "__main__":
    print(shlex.join(uv_flags(pip_config(sys.argv[1] if len(sys.argv) > 1 else sys.executable))))
