"""Fetching a pinned artifact from Maven Central with `mvn`.

Shared by the Elasticsearch and OpenSearch nodes (and the OpenSearch k-NN
plugin): Maven Central is the one registry that carries their server zips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from chunkrag_core.artifacts import file_sha256
from local_services.process import LocalServiceError, Log

MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
FETCH_TIMEOUT_SECONDS = 1800.0


def maven_file_name(artifact: str) -> str:
    """The file name `dependency:copy` writes for ``group:artifact:version:type``."""
    parts = artifact.split(":")
    if len(parts) != 4:
        raise ValueError(f"expected group:artifact:version:type, got {artifact!r}")
    _, name, version, kind = parts
    return f"{name}-{version}.{kind}"


def fetch_pinned(artifact: str, sha256: str, target: Path, log: Log, *, cleanup_hint: str) -> Path:
    """``target`` holding ``artifact`` with the pinned sha256: kept if the
    cached copy matches, else downloaded with mvn and checked before it is
    moved into place (a half-downloaded or altered file is never used)."""
    if target.is_file():
        actual = file_sha256(target)
        if actual == sha256:
            return target
        log(f"cached {target.name} has sha256 {actual}, expected {sha256}; fetching again")
        target.unlink()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalServiceError(
            f"Maven ('mvn') is needed to download {artifact} from Maven Central but is not on PATH. "
            f"Install it ('apt-get install maven'), or place {target.name} (sha256 {sha256}) at {target}."
        )
    log(f"fetching {artifact} from Maven Central with mvn…")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as staging:
        command = [
            mvn,
            "-B",
            "-q",
            f"{MAVEN_DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact={artifact}",
            f"-DoutputDirectory={staging}",
        ]
        try:
            # cwd=staging: a pom.xml in the caller's directory would turn this
            # into a build of that project.
            result = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise LocalServiceError(
                f"mvn did not finish downloading {artifact} within {FETCH_TIMEOUT_SECONDS:.0f} s; "
                f"check network access to Maven Central and retry"
            ) from None
        downloaded = Path(staging) / maven_file_name(artifact)
        if result.returncode != 0 or not downloaded.is_file():
            output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise LocalServiceError(
                f"mvn failed to download {artifact} (exit {result.returncode}). Command: {' '.join(command)}\n{output}"
            )
        actual = file_sha256(downloaded)
        if actual != sha256:
            raise LocalServiceError(
                f"downloaded {downloaded.name} has sha256 {actual}, expected {sha256}; "
                f"refusing to use it. {cleanup_hint}"
            )
        os.replace(downloaded, target)
    return target
