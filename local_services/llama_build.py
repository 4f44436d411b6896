"""llama.cpp's own server (`llama-server`), built from the llama.cpp sources
that the llama-cpp-python sdist on PyPI vendors.

Why not llama-cpp-python's Python server: to return log-probabilities it
must run with ``logits_all``, which computes logits for every prompt
position (about 40% of prompt time), and it serves one request at a time.
``llama-server`` computes the first token's top log-probabilities alone,
keeps each slot's prompt cache and batches slots together
(bench/results/judge_speed.json has the measured difference).

The build is cached outside the checkout (``~/.cache/chunkrag`` or
``$XDG_CACHE_HOME/chunkrag``), keyed by the sdist's sha256 and the build
flags, so a fresh clone on the same machine reuses it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from local_services.process import LocalServiceError, Log, exclusive_lock, print_line

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDORED = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp"

# The CPU reports AMX but the VM forbids it: a native build dies with
# "Illegal instruction". These flags are the ones `make llm-setup` always
# used for llama-cpp-python. The web UI is neither built (it needs npm) nor
# downloaded (LLAMA_USE_PREBUILT_UI would fetch it from a model hub).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=ON",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
BUILD_TIMEOUT_SECONDS = 3600.0
FETCH_TIMEOUT_SECONDS = 900.0


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chunkrag"


def build_key() -> str:
    """Changes whenever the sources or the flags do, so a stale binary is never reused."""
    return hashlib.sha256("\n".join((SDIST_SHA256, *CMAKE_FLAGS)).encode()).hexdigest()[:16]


def binary_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the built server lives (or `CHUNKRAG_LLAMA_SERVER`, a binary of your own)."""
    env = os.environ if environ is None else environ
    own = env.get("CHUNKRAG_LLAMA_SERVER", "").strip()
    if own:
        return Path(own)
    return cache_root(env) / f"llama-server-{SDIST_VERSION}-{build_key()}" / "llama-server"


def cmake_configure_args(source: Path, build: Path, generator: str | None) -> list[str]:
    return ["cmake", "-S", str(source), "-B", str(build), *(["-G", generator] if generator else []), *CMAKE_FLAGS]


def cmake_build_args(build: Path, jobs: int) -> list[str]:
    return ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _run(command: list[str], *, cwd: Path, timeout: float, what: str, log_file: Path) -> None:
    with log_file.open("ab") as out:
        try:
            result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        except FileNotFoundError:
            raise LocalServiceError(f"{what} needs `{command[0]}`, which is not installed (install cmake and a C/C++ compiler)") from None
        except subprocess.TimeoutExpired:
            raise LocalServiceError(f"{what} did not finish within {timeout:.0f} s; see {log_file}") from None
    if result.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
        raise LocalServiceError(f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{tail}\n(full log: {log_file})")


def fetch_sdist(directory: Path, log: Log = print_line) -> Path:
    """The pinned sdist, downloaded with pip (PyPI) and sha256-checked."""
    target = directory / SDIST_FILE
    if target.is_file() and _sha256(target) == SDIST_SHA256:
        return target
    target.unlink(missing_ok=True)
    log(f"downloading the {SDIST_NAME} {SDIST_VERSION} sources (llama.cpp is vendored inside) with pip…")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
               "--progress-bar", "off", "--dest", str(directory), f"{SDIST_NAME}=={SDIST_VERSION}"]
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SECONDS)
    if result.returncode != 0 or not target.is_file():
        raise LocalServiceError(f"pip could not download {SDIST_NAME}=={SDIST_VERSION} (exit {result.returncode}):\n{(result.stdout + result.stderr)[-2000:]}")
    actual = _sha256(target)
    if actual != SDIST_SHA256:
        target.unlink(missing_ok=True)
        raise LocalServiceError(f"{SDIST_FILE} has sha256 {actual}, expected {SDIST_SHA256}; deleted it")
    return target


def ensure_llama_server(environ: Mapping[str, str] | None = None, log: Log = print_line) -> Path:
    """The path of a built `llama-server`, building it first if needed (5-10 min on 2 cores)."""
    binary = binary_path(environ)
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    if (environ if environ is not None else os.environ).get("CHUNKRAG_LLAMA_SERVER", "").strip():
        raise LocalServiceError(f"CHUNKRAG_LLAMA_SERVER={binary} is not an executable file")
    root = cache_root(environ)
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / ".llama-build.lock"):
        if binary.is_file():
            return binary
        began = time.monotonic()
        sdist = fetch_sdist(root, log)
        with tempfile.TemporaryDirectory(prefix="llama-build-", dir=root) as scratch:
            work = Path(scratch)
            log_file = root / "llama-build.log"
            log_file.write_bytes(b"")
            with tarfile.open(sdist) as archive:
                members = [m for m in archive.getmembers() if m.name.startswith(VENDORED + "/")]
                archive.extractall(work, members=members, filter="data")
            source, build = work / VENDORED, work / "build"
            generator = "Ninja" if shutil.which("ninja") else None
            log(f"building llama-server from the vendored llama.cpp ({'ninja' if generator else 'make'}, {os.cpu_count()} jobs; 5-10 min on 2 cores)…")
            _run(cmake_configure_args(source, build, generator), cwd=work, timeout=BUILD_TIMEOUT_SECONDS, what="configuring llama.cpp", log_file=log_file)
            _run(cmake_build_args(build, os.cpu_count() or 2), cwd=work, timeout=BUILD_TIMEOUT_SECONDS, what="building llama-server", log_file=log_file)
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise LocalServiceError(f"the build finished but produced no {built}; see {log_file}")
            binary.parent.mkdir(parents=True, exist_ok=True)
            staging = binary.with_suffix(".partial")
            shutil.copy2(built, staging)
            os.replace(staging, binary)  # a half-copied binary never has the final name
        log(f"llama-server built in {time.monotonic() - began:.0f} s: {binary}")
    return binary
