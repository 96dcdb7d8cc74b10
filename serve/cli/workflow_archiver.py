"""`workflow-archiver`: torch-workflow-archiver's command line, flag for flag, writing a `.war` (serve.archive.war).

    workflow-archiver --workflow-name dog_breed_wf --spec-file workflow.yaml --handler workflow_handler.py \\
        --export-path wf_store -f
    python -m serve.cli.workflow_archiver ...        # the same, without the console script

Errors are one message on stderr and exit status 1 (2 for a bad command line, as argparse does); a successful run
prints nothing, as torch-workflow-archiver.
"""

from __future__ import annotations

import argparse
import os
import sys

from serve.archive.war import package_workflow
from serve.errors import ArchiveError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workflow-archiver", description="Package a workflow spec (YAML: models and "
                                "DAG) and its handler file into a workflow archive (.war).")  # fmt: skip
    p.add_argument("--workflow-name", required=True, help="Exported workflow name; the archive is <name>.war")
    p.add_argument("--spec-file", required=True, help="Path to the .yaml file with the workflow's models and DAG")
    p.add_argument("--handler", help="Path to the python file with the workflow's function nodes")
    p.add_argument("--export-path", default=os.getcwd(), help="Where to write the .war (default: the current dir)")
    p.add_argument("-f", "--force", action="store_true", help="Overwrite an existing .war of the same name")
    p.add_argument("--extra-files", help="Comma-separated paths to extra files")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        package_workflow(args.workflow_name, args.spec_file, handler=args.handler, extra_files=args.extra_files,
                         export_path=args.export_path, force=args.force)  # fmt: skip
    except ArchiveError as e:
        print(f"workflow-archiver: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"workflow-archiver: error: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
