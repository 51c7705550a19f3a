"""Every hashing method behind one contract (shdh.hashers.base.Hasher), selected by name.

The methods are declared in shdh.hashers.method_catalogue; a name resolves to its class on demand,
so that importing shdh.hashers stays cheap and a method's optional dependencies load only when it
is used. The shallow methods have a registry of their own (shdh.hashers.shallow, which fitting
them alone reads). CODE spells where the deep methods' classes live, the way the import graph
reads a lazy import, so that the stages using this registry depend on their modules
(tests/unit/test_hashers_contract.py keeps it equal to the declarations). DEEP and REGISTRY map
the declared names to their classes' places.

May import: core, nets, ranking, runtime, training.
"""

from __future__ import annotations

from shdh.hashers.method_catalogue import METHODS, by_name, method, names

CODE = (
    "shdh.hashers.deep:SHDH",
    "shdh.hashers.deep:DPSH",
    "shdh.hashers.oracle:Oracle",
)
DEEP: dict[str, str] = {name: by_name()[name].location for name in names("deep")}
REGISTRY: dict[str, str] = {m.name: m.location for m in METHODS}


def get_hasher_class(name: str):
    if method(name).deep:
        return method(name).load_class()
    from shdh.hashers.shallow import shallow_hasher_class  # the shallow kind's registry

    return shallow_hasher_class(name)


def is_deep(name: str) -> bool:
    """Deep methods train a network on images; the others fit GIST features."""
    return method(name).deep


def load_hasher(directory):
    """A saved hasher of whichever method its params.json names (Hasher.save's folder)."""
    from pathlib import Path

    from shdh.hashers.base import read_meta

    name = read_meta(directory).get("method", "")
    if name not in by_name():
        raise ValueError(f"{Path(directory) / 'params.json'}: holds unknown method '{name}'")
    return get_hasher_class(name).load(directory)
