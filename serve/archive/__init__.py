"""Model archives: TorchServe's manifest, the packager behind `model-archiver`, and safe opening of archives.

    from serve.archive import open_archive, package
    package("digits", "1.0", "image_classifier", model_file="model.py", serialized_file="digits.pt")
    with open_archive("digits.mar") as archive:
        archive.model_dir, archive.manifest, archive.handler, archive.model_config

Files: manifest.py (schema, names, validation), packager.py + sources.py (building the four formats),
reader.py + extract.py + safety.py (opening and safe extraction), model_config.py + yaml_scalars.py (the
model-config YAML subset), progress.py (the archiver's progress bar). Serving stack: no tensors here.
"""

from serve.archive.manifest import (
    ARCHIVE_FORMATS,
    BUILTIN_HANDLERS,
    MANIFEST_PATH,
    RUNTIMES,
    build_manifest,
    check_model_name,
    parse_manifest,
    shown,
)
from serve.archive.model_config import load_model_config, parse_model_config
from serve.archive.packager import package
from serve.archive.reader import ModelArchive, open_archive
from serve.archive.safety import DEFAULT_LIMITS, Limits
