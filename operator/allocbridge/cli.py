"""The `allocbridge` command: `run`, `check-config` and `dev`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from allocbridge import __version__, config, logs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="allocbridge",
        description="Nomad's allocations API over Kubernetes Allocation custom resources.",
    )
    parser.add_argument("--version", action="version", version=f"allocbridge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the operator and its listeners")
    run.add_argument("--config", "-c", required=True, metavar="FILE", help="HCL configuration")

    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", metavar="FILE")

    dev = commands.add_parser(
        "dev", help="run everything on a local control plane, with state under .dev/"
    )
    dev.add_argument("--state-dir", default=".dev", help="where the local cluster keeps its files")
    dev.add_argument("--api-port", type=int, default=4646)
    dev.add_argument("--ops-port", type=int, default=9203)
    dev.add_argument(
        "--kwok", action="store_true", help="run pods on kwok's fake node, not the real node"
    )

    args = parser.parse_args(argv)
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "run":
        return run_command(args.config)
    try:  # only `dev` needs the local cluster, a package of its own (not in the image)
        from allocbridge_localcluster.devmode import run_dev  # noqa: PLC0415
    except ModuleNotFoundError as err:
        if err.name != "allocbridge_localcluster":
            raise
        print(
            "error: `allocbridge dev` needs the local cluster package: "
            "pip install -e ./localcluster (make dev does this)",
            file=sys.stderr,
        )
        return 2
    return run_dev(args.state_dir, api_port=args.api_port, ops_port=args.ops_port, kwok=args.kwok)


def check_config(path: str) -> int:
    try:
        settings = config.load_file(path)
    except config.ConfigError as exc:
        print(f"{len(exc.problems)} problem(s) in {exc.source}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(config.render(settings), end="")
    return 0


def run_command(path: str) -> int:
    try:
        settings = config.load_file(path)
    except config.ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    logs.configure(settings.log.format, settings.log.level)
    from allocbridge import app  # noqa: PLC0415 - keeps check-config free of Kopf

    return app.run(settings)


if __name__ == "__main__":
    sys.exit(main())
