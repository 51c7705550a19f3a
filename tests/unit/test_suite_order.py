"""The order `make test` hands files to its workers: the heaviest first (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import HEAVIEST_FILES, REPO, slow_files_first


@dataclass
class Item:
    """What slow_files_first reads of a pytest item: its file and its markers."""

    path: Path
    markers: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_every_heaviest_file_exists():
    """A renamed file would drop silently to the back of the queue."""
    for path in HEAVIEST_FILES:
        assert (REPO / path).is_file(), f"HEAVIEST_FILES names {path}, which is not there"


def test_heaviest_first_in_their_order_then_slow_then_the_rest_each_file_kept_in_order():
    """Items come as pytest collects them: each file's tests together, in their order."""
    first, second = (REPO / path for path in HEAVIEST_FILES[:2])
    quick, slow, server = (REPO / "tests" / name for name in ("a.py", "b.py", "c.py"))
    items = [
        Item(quick, {"x"}),
        Item(quick),
        Item(slow),
        Item(slow, {"slow"}),
        Item(second),
        Item(server, {"integration"}),
        Item(first, {"slow"}),
        Item(first),
    ]
    ordered = slow_files_first(items)
    order = [first, first, second, slow, slow, server, quick, quick]
    assert [item.path for item in ordered] == order
    assert [item.markers for item in ordered if item.path == first] == [{"slow"}, set()]
    assert [item.markers for item in ordered if item.path == slow] == [set(), {"slow"}]
