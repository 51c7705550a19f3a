"""The shallow methods, by name: the hashers fitted on GIST features (numpy, and scipy in some
fits), none of which needs the deep methods' code.

A registry of its own so that fitting them alone (`shdh baselines`, the `baselines` DVC stage)
loads no deep method. The names, kinds and classes are declared in shdh.hashers.method_catalogue;
CODE spells where this kind's classes live the way the import graph reads a lazy import, so that the
DVC stage fitting them depends on exactly their modules (tests/unit/test_hashers_contract.py keeps
it equal to the declarations).
"""

from __future__ import annotations

from shdh.hashers.method_catalogue import by_name, names

CODE = (
    "shdh.hashers.itq:ITQ",
    "shdh.hashers.kmh:KMH",
    "shdh.hashers.ksh:KSH",
    "shdh.hashers.ksh:KSHH",
    "shdh.hashers.lfh:LFH",
    "shdh.hashers.cosdish:COSDISH",
    "shdh.hashers.cosdish:COSDISHH",
)
SHALLOW: dict[str, str] = {name: by_name()[name].location for name in names("shallow")}


def shallow_hasher_class(name: str) -> type:
    found = by_name().get(name)
    if found is None or found.kind != "shallow":
        raise ValueError(
            f"'{name}' is not a shallow method (shallow: {', '.join(names('shallow'))})"
        )
    return found.load_class()
