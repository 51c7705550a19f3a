"""Every hashing method behind one contract (shdh.hashers.base.Hasher), selected by name.

The methods are declared in shdh.hashers.method_catalogue, their settings in
shdh.hashers.method_settings; a name resolves to its class on demand, so that importing
shdh.hashers stays cheap and a method's code (and what it needs: PyTorch, scipy) loads only when
it is used.

May import: core, nets, ranking, runtime, training.
"""

from __future__ import annotations

from pathlib import Path


def hasher_class(name: str) -> type:
    """The class of the declared method `name` (a ValueError listing the known ones if none)."""
    from shdh.hashers.method_catalogue import method

    return method(name).load_class()


def load_hasher(directory: str | Path):
    """A saved hasher of whichever method its params.json names (Hasher.save's folder)."""
    from shdh.hashers.base import read_meta
    from shdh.hashers.method_catalogue import by_name

    name = read_meta(directory).get("method", "")
    if name not in by_name():
        raise ValueError(f"{Path(directory) / 'params.json'}: holds unknown method '{name}'")
    return hasher_class(name).load(directory)
