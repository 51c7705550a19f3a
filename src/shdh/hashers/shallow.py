"""The shallow methods, by name: the hashers fitted on GIST features (numpy, and scipy in some
fits), none of which needs the deep methods' code.

A registry of its own so that fitting them alone (`shdh baselines`, the `baselines` DVC stage)
loads no deep method: importing a module under shdh.hashers runs the package's module body,
which names the deep methods only as strings that its functions resolve (shdh.hashers.REGISTRY
is this registry and the deep one).
"""

from __future__ import annotations

import importlib

SHALLOW: dict[str, str] = {
    "itq": "shdh.hashers.itq:ITQ",
    "kmh": "shdh.hashers.kmh:KMH",
    "ksh": "shdh.hashers.ksh:KSH",
    "ksh+h": "shdh.hashers.ksh:KSHH",
    "lfh": "shdh.hashers.lfh:LFH",
    "cosdish": "shdh.hashers.cosdish:COSDISH",
    "cosdish+h": "shdh.hashers.cosdish:COSDISHH",
}


def import_class(reference: str) -> type:
    """The class a "module:Class" registry entry names, imported on demand, so that a method's
    module (and its optional dependencies) loads only when the method is used."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def shallow_hasher_class(name: str) -> type:
    if name not in SHALLOW:
        raise ValueError(f"'{name}' is not a shallow method (shallow: {', '.join(SHALLOW)})")
    return import_class(SHALLOW[name])
