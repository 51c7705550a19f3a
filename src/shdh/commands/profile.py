"""shdh profile: apply a named profile (profiles/NAME.yaml) to params.yaml, or list them."""

from __future__ import annotations

import argparse

from shdh.commands.common import script_main
from shdh.settings.profiles import PROFILES_DIR, apply_profile, load_params

HELP = "apply a profile's overrides to params.yaml (keeps comments), or list the profiles"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("apply", "list"))
    parser.add_argument("name", nargs="?", help="profile name, e.g. smoke, default, paper")
    parser.add_argument("--params", default="params.yaml", help="file to rewrite")
    parser.add_argument("--profiles-dir", default=str(PROFILES_DIR))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.action == "list":
        # by name, not file name: `photos` before `photos-smoke` ('-' sorts before '.yaml')
        for name in sorted(path.stem for path in Path(args.profiles_dir).glob("*.yaml")):
            print(name)
        return 0
    if not args.name:
        raise SystemExit("shdh profile apply: give a profile name")
    apply_profile(args.name, args.params, args.profiles_dir)
    evaluate = load_params(args.params)["evaluate"]
    print(
        f"{args.params}: applied profile '{args.name}'; results go to "
        f"{evaluate['results_dir']} (report: {evaluate.get('report')})"
    )
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
