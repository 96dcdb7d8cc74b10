"""`model-archiver`: torch-model-archiver's command line, flag for flag, building archives with serve.archive.

    model-archiver --model-name digits --version 1.0 --model-file model.py --serialized-file digits.pt \\
        --handler image_classifier --extra-files index_to_name.json --export-path model_store

Our additions: `--torch-compat` / `--no-torch-compat` (write `"torchCompat": true|false` in the manifest's model
object; TorchServe ignores the key). Without either, the server turns torch compatibility on when the model file or
handler file imports torch, torchvision or ts, so `import torch` in them resolves to serve; the flags force it) and
`--progress/--no-progress` (force the progress bar for large files on or off; by default it shows on a terminal).
Errors are one message on stderr and exit status 1 (2 for a bad command line, as argparse does); like
torch-model-archiver, a successful run prints nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from serve.archive import ARCHIVE_FORMATS, RUNTIMES, package
from serve.errors import ArchiveError

_FORMATS_HELP = (
    "The format in which the model artifacts are archived.\n"
    '"default": <model-name>.mar, a zip archive (deflated), readily hostable by serve and TorchServe.\n'
    '"tgz": <model-name>.tar.gz, every entry under <model-name>/.\n'
    '"no-archive": the directory <export-path>/<model-name>/ with MAR-INF/MANIFEST.json, not archived.\n'
    '"zip-store": <model-name>.mar, a zip archive without compression (faster to build).'
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="model-archiver",
        description="Package a model file, its weights, a handler and extra files into a model archive (.mar).",
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--model-name", required=True, help="Exported model name; the archive is <model-name>.mar")
    p.add_argument("--serialized-file", help="Path to the weights: a state_dict checkpoint (.pt, .pth, .safetensors)")
    p.add_argument("--model-file", help="Path to the python file defining the model (exactly one nn.Module class)")
    p.add_argument("--handler", required=True, help="A built-in handler name or a handler file (path/h.py[:function])")
    p.add_argument("--extra-files", help="Comma-separated files, directories (contents copied) and globs")
    p.add_argument("--runtime", default="python", choices=RUNTIMES, help='The runtime (default "python")')
    p.add_argument("--export-path", default=os.getcwd(), help="Where to write the archive (default: the current dir)")
    p.add_argument("--archive-format", default="default", choices=list(ARCHIVE_FORMATS), help=_FORMATS_HELP)
    p.add_argument("-f", "--force", action="store_true", help="Overwrite an existing archive of the same name")
    p.add_argument("-v", "--version", required=True, help="Model's version")
    p.add_argument("-r", "--requirements-file", help="Path to a requirements.txt of model-specific packages")
    p.add_argument("-c", "--config-file", help="Path to a model-config YAML file (batchSize, minWorkers, handler: ...)")
    p.add_argument(
        "--torch-compat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Force torch compatibility on or off (manifest torchCompat); by default it is on when the model or "
        "handler file imports torch, torchvision or ts ('import torch' then resolves to serve)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Show a progress bar for large files (default: only when stderr is a terminal)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(levelname)s - %(message)s")
    try:
        package(
            args.model_name,
            args.version,
            args.handler,
            serialized_file=args.serialized_file,
            model_file=args.model_file,
            extra_files=args.extra_files,
            requirements_file=args.requirements_file,
            config_file=args.config_file,
            export_path=args.export_path,
            archive_format=args.archive_format,
            runtime=args.runtime,
            force=args.force,
            torch_compat=args.torch_compat,
            progress=args.progress,
        )
    except ArchiveError as e:
        print(f"model-archiver: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        print(f"model-archiver: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("model-archiver: interrupted; nothing was written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
