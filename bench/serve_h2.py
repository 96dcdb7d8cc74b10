"""`serve` whose gRPC servers run on bench/h2_connection.py's `H2Connection` instead of serve's own HTTP/2 connection,
for the comparison of issue 24 item 10 (bench/grpc_rest.py --grpc-server serve-h2); product code unchanged.

    .venv/bin/python bench/serve_h2.py start --foreground --ts-config config.properties ...   # serve's own arguments

It replaces the `Server` that serve/frontends/grpc/server.py builds (serve's native gRPC server) with a subclass
that passes `connection_class=H2Connection`, then runs serve's command line in this process. Everything else (the
servicers, the dataplane, REST, the workers) is serve's. With `grpc_server=grpcio` the replacement is never used.
Only `start --foreground` is meaningful: a background start launches `serve.cli.main` itself, without the patch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.h2_connection import H2Connection  # noqa: E402
from serve.frontends.grpc import server as grpc_servers  # noqa: E402
from serve.frontends.grpc.native import Server  # noqa: E402


class H2Server(Server):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, connection_class=H2Connection, **kwargs)  # type: ignore[arg-type, misc]


def main() -> int:
    if "--foreground" not in sys.argv:
        raise SystemExit("bench/serve_h2.py runs serve in this process: pass start --foreground")
    grpc_servers.Server = H2Server  # type: ignore[misc]
    print("bench/serve_h2.py: serve's gRPC servers run on bench/h2_connection.py's H2Connection", file=sys.stderr)
    from serve.cli.main import main as serve_main

    return serve_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
