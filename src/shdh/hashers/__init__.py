"""Every hashing method behind one contract (shdh.hashers.base.Hasher), selected by name.

The registry maps a method name (as params.yaml writes it) to "module:Class", imported on
demand so that importing shdh.hashers stays cheap and a method's optional dependencies load
only when it is used.
"""

from __future__ import annotations

import importlib

REGISTRY: dict[str, str] = {
    "itq": "shdh.hashers.itq:ITQ",
    "kmh": "shdh.hashers.kmh:KMH",
    "ksh": "shdh.hashers.ksh:KSH",
    "ksh+h": "shdh.hashers.ksh:KSHH",
    "lfh": "shdh.hashers.lfh:LFH",
    "cosdish": "shdh.hashers.cosdish:COSDISH",
    "cosdish+h": "shdh.hashers.cosdish:COSDISHH",
    "dpsh": "shdh.hashers.deep:DPSH",
    "shdh": "shdh.hashers.deep:SHDH",
    "oracle": "shdh.hashers.oracle:Oracle",  # a reference row: classifier codes
}


def get_hasher_class(name: str):
    if name not in REGISTRY:
        raise ValueError(f"unknown method '{name}' (known: {', '.join(REGISTRY)})")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def load_hasher(directory):
    """A saved hasher of whichever method its params.json names (Hasher.save's folder)."""
    from pathlib import Path

    from shdh.hashers.base import read_meta

    method = read_meta(directory).get("method", "")
    if method not in REGISTRY:
        raise ValueError(f"{Path(directory) / 'params.json'}: holds unknown method '{method}'")
    return get_hasher_class(method).load(directory)
