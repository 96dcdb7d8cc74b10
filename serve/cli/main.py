"""`serve start | stop | status`. The server is not built yet: `start` says so plainly and shows the runtime."""

from __future__ import annotations

import argparse
import sys

NOT_YET = (
    "serve: the model server (REST, management, metrics, batching) is not built yet; it is the next issue. "
    "What exists today is the runtime, checkpoints, archives and handlers; here the runtime computes a small example:"
)


def _demo() -> str:
    import serve

    w = serve.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = (w @ serve.ones(2)).softmax(0)
    y[0].backward()
    return f"  softmax(w @ 1) = {y}\n  d y[0] / d w = {w.grad}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve", description="A model server on its own tensor runtime.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start the server (not built yet: prints a notice and a runtime demo)")
    start.add_argument("--foreground", action="store_true")
    start.add_argument("--model-store")
    start.add_argument("--models", nargs="*")
    sub.add_parser("stop", help="stop the server")
    sub.add_parser("status", help="report whether the server runs")
    args = parser.parse_args(argv)
    if args.command == "start":
        print(NOT_YET)
        print(_demo())
        return 0
    print("serve: no server is running (the server is not built yet).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
