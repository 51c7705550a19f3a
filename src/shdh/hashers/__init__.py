"""Every hashing method behind one contract (shdh.hashers.base.Hasher), selected by name.

The registry maps a method name (as params.yaml writes it) to "module:Class", imported on
demand so that importing shdh.hashers stays cheap and a method's optional dependencies load
only when it is used. It is two registries: the shallow methods' (shdh.hashers.shallow, which
fitting them alone reads) and the deep methods', here.
"""

from __future__ import annotations

from shdh.hashers.shallow import SHALLOW, import_class

DEEP: dict[str, str] = {
    "dpsh": "shdh.hashers.deep:DPSH",
    "shdh": "shdh.hashers.deep:SHDH",
    "oracle": "shdh.hashers.oracle:Oracle",  # a reference row: classifier codes
}
REGISTRY: dict[str, str] = {**SHALLOW, **DEEP}


def get_hasher_class(name: str):
    if name not in REGISTRY:
        raise ValueError(f"unknown method '{name}' (known: {', '.join(REGISTRY)})")
    return import_class(REGISTRY[name])


def is_deep(method: str) -> bool:
    """Deep methods train a network on images; the others fit GIST features."""
    return get_hasher_class(method).input_kind == "images"


def load_hasher(directory):
    """A saved hasher of whichever method its params.json names (Hasher.save's folder)."""
    from pathlib import Path

    from shdh.hashers.base import read_meta

    method = read_meta(directory).get("method", "")
    if method not in REGISTRY:
        raise ValueError(f"{Path(directory) / 'params.json'}: holds unknown method '{method}'")
    return get_hasher_class(method).load(directory)
