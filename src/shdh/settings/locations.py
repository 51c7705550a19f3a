"""Where a run's results and report go: a folder per dataset and profile, never another's.

The project publishes its own Fashion-MNIST-H results, written by the profiles that own them
(PROJECT_RESULTS: `results/` and docs/results.md for `default`, `results/methods/` and
docs/results-methods.md for `methods`, `results/paper/` and docs/results-paper.md for `paper`,
`results/gpu/` and docs/results-gpu.md for `gpu`). Every
other run writes to results/DATASET/PROFILE/, its report beside its metrics (report.md).
Writing into a location that belongs to another dataset or profile is refused before any work,
so evaluating your own data never rewrites the project's tables, nor the results of your other
data sets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shdh.runtime.errors import ConfigError

RESULTS_ROOT = "results"
REPORT_NAME = "report.md"
# (dataset, profile) -> (evaluate.results_dir, evaluate.report) the project publishes.
PROJECT_RESULTS = {
    ("fashion-mnist-h", "default"): ("results", "docs/results.md"),
    ("fashion-mnist-h", "methods"): ("results/methods", "docs/results-methods.md"),
    ("fashion-mnist-h", "paper"): ("results/paper", "docs/results-paper.md"),
    ("fashion-mnist-h", "gpu"): ("results/gpu", "docs/results-gpu.md"),
}
OWN_DATA = ("folder", "table")
NO_PROFILE = "custom"  # the folder of a params file that names no profile


def dataset_label(data: Mapping[str, Any]) -> str:
    """The dataset's folder name under results/: the built-in data set's name, or for your own
    data its name (data.name; by default the folder's or the table file's name, as the
    converters name the dataset)."""
    dataset = str(data["dataset"])
    if dataset not in OWN_DATA:
        return dataset
    if data.get("name"):
        return str(data["name"])
    raw = Path(str(data["raw_dir"]))
    return (raw.stem if dataset == "table" else raw.resolve().name) or dataset


def results_location(label: str, profile: str | None) -> tuple[str, str]:
    """(results_dir, report) of a run on dataset `label` with `profile`."""
    owned = PROJECT_RESULTS.get((label, profile or NO_PROFILE))
    if owned:
        return owned
    folder = f"{RESULTS_ROOT}/{label}/{profile or NO_PROFILE}"
    return folder, f"{folder}/{REPORT_NAME}"


def dvc_project_root() -> Path | None:
    """The checkout the run is in: the nearest folder at or above the working directory with a
    dvc.yaml (DVC runs every stage there). Elsewhere no location is anyone's."""
    here = Path.cwd()
    return next((d for d in (here, *here.parents) if (d / "dvc.yaml").is_file()), None)


def owner(path: str | Path) -> tuple[str, str] | None:
    """The (dataset, profile) whose results `path` is or lies in; None for a place of no run's
    (outside the checkout's results/ and not a published report)."""
    root = dvc_project_root()
    if root is None:
        return None
    target = Path(os.path.abspath(path))
    for pair, locations in PROJECT_RESULTS.items():
        if any(target == root / place for place in locations):
            return pair
    parts = Path(os.path.relpath(target, root / RESULTS_ROOT)).parts
    if not parts or parts[0] == os.pardir:
        return None
    for pair, (folder, _) in PROJECT_RESULTS.items():
        if folder != RESULTS_ROOT and root / RESULTS_ROOT / parts[0] == root / folder:
            return pair  # inside a published subfolder (results/paper/...)
    if len(parts) == 1:  # results/NAME: an entry of the default profile's own folder
        return next(pair for pair, (f, _) in PROJECT_RESULTS.items() if f == RESULTS_ROOT)
    return parts[0], parts[1]


def check_results_location(
    params: Mapping[str, Any],
    source: str,
    *,
    results_dir: str | None = None,
    report: str | None = None,
) -> None:
    """Refuse, before any work, a results folder or report that belongs to another dataset or
    profile; the message gives the two settings to use instead."""
    evaluate = params["evaluate"]
    label, profile = dataset_label(params["data"]), params.get("profile") or NO_PROFILE
    places = (
        ("evaluate.results_dir", results_dir or evaluate["results_dir"]),
        ("evaluate.report", report or evaluate.get("report")),
    )
    for key, path in places:
        found = owner(path) if path else None
        if found is not None and found != (label, profile):
            want_dir, want_report = results_location(label, profile)
            _check_own_place(want_dir, label, profile, params["data"], source)
            raise ConfigError(
                f"{source}: {key}: {path} holds the results of dataset {found[0]}, profile "
                f"{found[1]}, and this run (dataset {label}, profile {profile}) would overwrite "
                f"them; set evaluate.results_dir: {want_dir} and evaluate.report: {want_report} "
                f"(`shdh profile apply {profile}` sets both)"
            )


def _check_own_place(
    folder: str, label: str, profile: str, data: Mapping[str, Any], source: str
) -> None:
    """Refuse a dataset whose own results folder is a published one's (a dataset named `paper`
    or `gpu`: results/paper/smoke lies in the paper profile's results), rather than suggest a
    folder that the check would refuse again."""
    taken = owner(folder)
    if taken is None or taken == (label, profile):
        return
    key = "data.name" if data.get("name") else "data.raw_dir"
    raise ConfigError(
        f"{source}: {key}: the dataset's name {label} is also the name of the project's "
        f"published results folder {RESULTS_ROOT}/{label} (dataset {taken[0]}, profile "
        f"{taken[1]}), so this run's results, {folder}, would overwrite them; set data.name "
        "to another name"
    )


def fitting_location(params: Mapping[str, Any]) -> dict[str, str]:
    """The evaluate.results_dir and evaluate.report that `shdh profile apply` writes: kept when
    they are this run's or a place of the user's own choosing, moved to this dataset's and
    profile's folder when they belong to another run."""
    label, profile = dataset_label(params["data"]), params.get("profile") or NO_PROFILE
    want = dict(zip(("results_dir", "report"), results_location(label, profile), strict=True))
    evaluate = params["evaluate"]
    return {
        key: want[key]
        if evaluate.get(key) and owner(evaluate[key]) not in (None, (label, profile))
        else evaluate.get(key)
        for key in want
    }
