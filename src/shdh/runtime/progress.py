"""Progress bars for the long loops, from tqdm when it is installed.

The training loop takes a bar factory (shdh.training.loop's `progress`) rather than making tqdm's
bars itself, so that it runs where only PyTorch is; the steps and the front doors pass
`bars(enabled)`, and `open_bar` gives the loop a bar that does nothing when none was asked for.
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


class NoBar:
    """What a loop calls on a progress bar, doing nothing: no bar was asked for."""

    def update(self, n: int = 1) -> None: ...

    def set_postfix(self, **kwargs: Any) -> None: ...

    def close(self) -> None: ...


def open_bar(progress: Bars | None, total: int, description: str) -> Any:
    """progress(total, description), or a NoBar without a factory."""
    return progress(total, description) if progress is not None else NoBar()
