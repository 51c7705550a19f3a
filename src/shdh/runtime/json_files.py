"""Reading the small JSON records steps hand each other (metrics, fit records, run references):
a file cut short by a killed step, edited by hand or swapped for another must stop the reader
with its path and what it should have held, not with a bare JSONDecodeError or a KeyError from
three calls further on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json_object(
    path: str | os.PathLike[str], what: str, *, hint: str | None = None
) -> dict[str, Any]:
    """The JSON object at path; a ValueError naming path and `what` ("the metrics") otherwise,
    ending in `hint` (how to make the file anew) where one is given."""
    path = Path(path)
    tail = f"; {hint}" if hint else ""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file, expected {what}{tail}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read {what} ({err}){tail}") from err
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise ValueError(f"{path}: expected {what} as a JSON object, found a {kind}{tail}")
    return value
