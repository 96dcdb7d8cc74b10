"""`serve start | stop | status`: TorchServe's `torchserve --start/--stop` flags on a subcommand CLI.

    serve start --model-store model_store --models digits=digits.mar   # background; returns once /ping says Healthy
    serve start --foreground --ts-config config.properties             # containers, `make run`
    serve status                                                       # exit 0 running, 3 not running
    serve stop                                                         # "serve has stopped."

`serve --start ...` and `serve --stop` are accepted too, so `torchserve` command lines only change the program
name. Flags as TorchServe's: `--model-store`, `--models` (all | name=archive | archive ...), `--ts-config`,
`--ncs`/`--no-config-snapshots`, `--foreground`, `--disable-token-auth`/`--dt`, `--enable-model-api` (can only
enable), `--log-config` (a Python logging config, see serve/config/logs.py; TorchServe's is log4j2 XML).
`--workflow-store` (where POST /workflows finds .war files; default: the model store).
Without `--model-store` or `model_store`, `./model_store` is used when that directory exists.
A bad configuration prints one line on stderr and exits 2 (as a bad flag does).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from serve.cli import control
from serve.config import Settings, load_settings
from serve.errors import ConfigError
from serve.metrics.metrics_config import read_metrics_config

DEFAULT_MODEL_STORE = Path("model_store")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve", description="A TorchServe-compatible model server, no PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start the server (in the background unless --foreground)")
    start.add_argument("--model-store", metavar="DIR", help="the directory of model archives")
    start.add_argument("--models", nargs="+", metavar="MODEL", help="all, or archives / name=archive to load")
    start.add_argument("--ts-config", metavar="FILE", help="a config.properties file")
    start.add_argument("--log-config", metavar="FILE", help="a Python logging config (.json dictConfig or INI)")
    start.add_argument("--workflow-store", metavar="DIR", help="the directory of workflow archives (.war)")
    start.add_argument("--foreground", action="store_true", help="run in this process (containers)")
    start.add_argument("--ncs", "--no-config-snapshots", dest="ncs", action="store_true", help="no snapshots")
    start.add_argument("--dt", "--disable-token-auth", dest="disable_token_auth", action="store_true")
    start.add_argument("--enable-model-api", action="store_true", help="allow registering and removing models")
    # set by a background start on the process it launches: the launcher owns the pid file
    start.add_argument("--background-child", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("stop", help="stop the running server")
    sub.add_parser("status", help="say whether the server runs, with its pid and addresses")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = _torchserve_spelling(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if args.command == "stop":
        return control.stop()
    if args.command == "status":
        return control.status()
    try:
        settings = _settings(args)
        if args.foreground:
            return control.foreground(settings, owns_pid_file=not args.background_child)
    except ConfigError as e:
        print(f"serve: {e}", file=sys.stderr)
        return 2
    return control.start_background(settings, argv[1:], control.start_wait(settings))


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The `cli` dict of load_settings: only flags that were given (None is 'not given')."""
    return {
        "model_store": args.model_store,
        "workflow_store": args.workflow_store,
        "load_models": args.models,
        "ts_config": args.ts_config,
        "log_config": args.log_config,
        "ncs": args.ncs or None,
        "disable_token_authorization": args.disable_token_auth or None,
        "enable_model_api": args.enable_model_api or None,
    }


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(settings_from_args(args))
    if settings.model_store is None and DEFAULT_MODEL_STORE.is_dir():
        settings = dataclasses.replace(settings, model_store=DEFAULT_MODEL_STORE.absolute())
    if settings.metrics_config is not None:  # a bad file stops the start, not each worker's load
        try:
            read_metrics_config(settings.metrics_config)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return settings


def _torchserve_spelling(argv: list[str]) -> list[str]:
    """`--start`/`--stop` anywhere (torchserve's flags) -> the subcommand first."""
    for flag in ("--start", "--stop"):
        if flag in argv and argv[0] not in ("start", "stop", "status"):
            return [flag[2:], *[a for a in argv if a != flag]]
    return argv


if __name__ == "__main__":
    sys.exit(main())
