"""shdh fetch: bring the raw dataset files into data/, verified (Debian package, a folder, URLs)."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.steps.prepare import fetch

HELP = "fetch the raw dataset files into data.raw_dir and verify their checksums"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--source",
        action="append",
        metavar="SRC",
        help="where to look, in order: debian, official, a folder, file://, "
        "https:// or s3:// (repeatable; default: data.sources)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checksum verification, with a warning (a re-packed copy of your own; "
        "default: data.verify)",
    )


def run(args: argparse.Namespace) -> int:
    _, data = params_section(args, "data")
    out = fetch(
        data["raw_dir"],
        dataset=data["dataset"],
        sources=args.source or data["sources"],
        verify=data.get("verify", True) and not args.no_verify,
    )
    print(f"raw data ready in {out}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
