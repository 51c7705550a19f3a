"""Progress bars for the long loops, from tqdm when it is installed.

The core takes a bar factory rather than importing tqdm (shdh.training.loop's `progress`), so that
it runs where only PyTorch is; the steps and the front doors pass `bars(enabled)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Bars = Callable[[int, str], Any]  # bars(total, description) -> a bar: update, set_postfix, close


def bars(enabled: bool = True) -> Bars | None:
    """tqdm's bars, or None when they are not wanted or tqdm is not installed (a bare GPU
    machine may lack it: training then runs without a bar rather than failing)."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return lambda total, desc: tqdm(total=total, desc=desc, leave=False)
