"""The table of a GPU photos session (benchmarks/gpu_photos_session.sh), scored here: every codes
file under FOLDER/VARIANT/codes/ with the project's metrics (shdh.core.codes_file, what `shdh
metrics` prints), beside what its fit record says of the fit (epochs, how it ended under the
convergence rule, the time and the card).

    python benchmarks/photos_table.py gpu-photos [--n 100]

Prints a markdown table for docs/results-gpu.md. The codes carry their own queries, database
and ancestors, so the scores need nothing but the folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shdh.core.codes_file import CODES_DIR, FITS_DIR, evaluate_codes_file
from shdh.training import convergence


def row(variant: Path, codes: Path, n: int) -> str:
    record = json.loads((variant / FITS_DIR / f"{codes.stem}.json").read_text())
    loop = record["params"]["loop"]
    m = evaluate_codes_file(codes, n=n)
    history = record["history"]
    ended = convergence.ended_by(history, loop["patience"], loop["min_delta"]) or "fixed epochs"
    rate = max(e["images_per_sec"] for e in history)
    return (
        f"| {variant.name} | {loop['backbone']} {loop['image_size']} px | {codes.stem} "
        f"| {m[f'ndcg@{n}']:.4f} | {m[f'acg@{n}']:.3f} | {m['map@1000']:.4f} "
        f"| {m['mahp@2500']:.4f} | {record['n_train_items']:,} | {len(history)} | {ended} "
        f"| {record['fit_seconds'] / 60:.1f} | {rate:,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the unpacked gpu-photos folder")
    parser.add_argument("--n", type=int, default=100, help="cut-off of ACG/NDCG")
    args = parser.parse_args()
    variants = sorted(p.parent for p in args.folder.glob(f"*/{CODES_DIR}"))
    if not variants:
        raise SystemExit(f"{args.folder}: no VARIANT/{CODES_DIR}/ folder with codes in it")
    cards = {json.loads((v / "bundle.json").read_text())["device"] for v in variants}
    print(f"trained on: {'; '.join(sorted(cards))}\n")
    print(
        f"| variant | network | fit | NDCG@{args.n} | ACG@{args.n} | mAP@1000 | mAHP@2500 "
        "| training items | epochs | ended by | fit min | best img/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for variant in variants:
        for codes in sorted((variant / CODES_DIR).glob("*.npz")):
            print(row(variant, codes, args.n))


if __name__ == "__main__":
    main()
