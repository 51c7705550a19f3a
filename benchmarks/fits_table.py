"""The table of a GPU session's fits, scored here: every codes file of an unpacked session folder
with the project's metrics (shdh.core.codes_file, what `shdh metrics` prints), beside what its fit
record says of the fit (epochs, how it ended under the convergence rule, the time and the card).

    python benchmarks/fits_table.py gpu-session/gpu-run [--n 100]   # benchmarks/gpu_session.sh
    python benchmarks/fits_table.py gpu-photos [--n 100]   # benchmarks/gpu_photos_session.sh

FOLDER holds codes/ and fits/ itself (one variant, named after the folder) or in VARIANT/
subfolders. The rows go variant by variant, then family by family in the tables' order
(shdh.reporting.figures.grouped_methods: pairwise and triplet, classes and centres,
hierarchical, the oracle last), then by code length and seed, so that twenty methods read as
their kinds. Prints a markdown table for docs/results-gpu.md. The codes carry their own
queries, database and ancestors, so the scores need nothing but the folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh.core.codes_file import CODES_DIR, FITS_DIR, evaluate_codes_file
from shdh.reporting.figures import grouped_methods
from shdh.runtime.json_files import read_json_object
from shdh.training import convergence

HEADER = (
    "| variant | family | network | fit | NDCG@{n} | ACG@{n} | mAP@1000 | mAHP@2500 "
    "| training items | epochs | ended by | fit min | best img/s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def read_record(path: Path, what: str) -> dict:
    """A JSON record of the session; an unreadable one stops the table, naming the file."""
    try:
        return read_json_object(path, what)
    except ValueError as err:
        raise SystemExit(str(err)) from err


def record_of(variant: Path, codes: Path) -> dict:
    return read_record(variant / FITS_DIR / f"{codes.stem}.json", f"the fit record of {codes.name}")


def row(variant: Path, codes: Path, record: dict, family: str, n: int) -> str:
    loop = record["params"]["loop"]
    m = evaluate_codes_file(codes, n=n)
    history = record["history"]
    ended = convergence.ended_by(history, loop["patience"], loop["min_delta"]) or "fixed epochs"
    rate = max(e["images_per_sec"] for e in history)
    return (
        f"| {variant.name} | {family} | {loop['backbone']} {loop['image_size']} px | {codes.stem} "
        f"| {m[f'ndcg@{n}']:.4f} | {m[f'acg@{n}']:.3f} | {m['map@1000']:.4f} "
        f"| {m['mahp@2500']:.4f} | {record['n_train_items']:,} | {len(history)} | {ended} "
        f"| {record['fit_seconds'] / 60:.1f} | {rate:,.0f} |"
    )


def variant_rows(variant: Path, n: int) -> list[str]:
    """The variant's fits, family by family, then by method, code length and seed."""
    fits = [(codes, record_of(variant, codes)) for codes in (variant / CODES_DIR).glob("*.npz")]
    groups = grouped_methods({record["method"] for _, record in fits})
    family = {name: group for group, names in groups for name in names}
    rank = {name: i for i, name in enumerate(family)}  # the groups' order, family by family
    fits.sort(key=lambda fit: (rank[fit[1]["method"]], fit[1]["bits"], fit[1]["seed"]))
    return [row(variant, codes, record, family[record["method"]], n) for codes, record in fits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an unpacked session folder")
    parser.add_argument("--n", type=int, default=100, help="cut-off of ACG/NDCG")
    args = parser.parse_args()
    if (args.folder / CODES_DIR).is_dir():
        variants = [args.folder]
    else:
        variants = sorted(p.parent for p in args.folder.glob(f"*/{CODES_DIR}"))
    if not variants:
        raise SystemExit(f"{args.folder}: no {CODES_DIR}/ folder, nor VARIANT/{CODES_DIR}/ ones")
    cards = {read_record(v / "bundle.json", "the session's manifest")["device"] for v in variants}
    print(f"trained on: {'; '.join(sorted(cards))}\n")
    print(HEADER.format(n=args.n))
    for variant in variants:
        for line in variant_rows(variant, args.n):
            print(line)


if __name__ == "__main__":
    main()
