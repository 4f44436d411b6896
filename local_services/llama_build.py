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

from chunkrag_core.artifacts import file_sha256
from local_services.process import LocalServiceError, Log, exclusive_lock, print_line

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDORED = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp"

# Never `GGML_NATIVE`: on these VMs the CPU reports AMX but the hypervisor
# forbids it ("Illegal instruction"). Each x86 extension is switched on only
# when /proc/cpuinfo lists it: the machines this project runs on differ (an
# Intel Xeon with AVX-512, an AMD EPYC without), and a binary built for one
# dies on the other. The flags are part of the cache key, so each CPU kind
# gets its own build. The web UI is neither built (it needs npm) nor
# downloaded (LLAMA_USE_PREBUILT_UI would fetch it from a model hub).
BASE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)
# GGML option -> the /proc/cpuinfo flags it needs (all of them).
CPU_OPTIONS = (
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    # ggml's AVX512 build uses the F, CD, VL, DQ and BW subsets together.
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
)
NEVER = ("-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_cmake_flags(flags: frozenset[str]) -> tuple[str, ...]:
    """`-DGGML_<X>=ON|OFF` for what this CPU can run, AMX and native always off."""
    return (
        *NEVER,
        *(f"-D{option}={'ON' if all(f in flags for f in needs) else 'OFF'}" for option, needs in CPU_OPTIONS),
    )


def cmake_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    return (*BASE_FLAGS, *cpu_cmake_flags(cpu_flags(cpuinfo)))


BUILD_TIMEOUT_SECONDS = 3600.0
FETCH_TIMEOUT_SECONDS = 900.0


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chunkrag"


def build_key(flags: tuple[str, ...] | None = None) -> str:
    """Changes whenever the sources or the flags do, so a stale binary (or
    one built for another CPU) is never reused."""
    return hashlib.sha256("\n".join((SDIST_SHA256, *(cmake_flags() if flags is None else flags))).encode()).hexdigest()[
        :16
    ]


def binary_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the built server lives (or `CHUNKRAG_LLAMA_SERVER`, a binary of your own)."""
    env = os.environ if environ is None else environ
    own = env.get("CHUNKRAG_LLAMA_SERVER", "").strip()
    if own:
        return Path(own)
    return cache_root(env) / f"llama-server-{SDIST_VERSION}-{build_key()}" / "llama-server"


def cmake_configure_args(
    source: Path, build: Path, generator: str | None, flags: tuple[str, ...] | None = None
) -> list[str]:
    return [
        "cmake",
        "-S",
        str(source),
        "-B",
        str(build),
        *(["-G", generator] if generator else []),
        *(cmake_flags() if flags is None else flags),
    ]


def cmake_build_args(build: Path, jobs: int) -> list[str]:
    return ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)]


def _run(command: list[str], *, cwd: Path, timeout: float, what: str, log_file: Path) -> None:
    with log_file.open("ab") as out:
        try:
            result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        except FileNotFoundError:
            raise LocalServiceError(
                f"{what} needs `{command[0]}`, which is not installed (install cmake and a C/C++ compiler)"
            ) from None
        except subprocess.TimeoutExpired:
            raise LocalServiceError(f"{what} did not finish within {timeout:.0f} s; see {log_file}") from None
    if result.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
        raise LocalServiceError(
            f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{tail}\n(full log: {log_file})"
        )


def fetch_sdist(directory: Path, log: Log = print_line) -> Path:
    """The pinned sdist, downloaded with pip (PyPI) and sha256-checked."""
    target = directory / SDIST_FILE
    if target.is_file() and file_sha256(target) == SDIST_SHA256:
        return target
    target.unlink(missing_ok=True)
    log(f"downloading the {SDIST_NAME} {SDIST_VERSION} sources (llama.cpp is vendored inside) with pip…")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--dest",
        str(directory),
        f"{SDIST_NAME}=={SDIST_VERSION}",
    ]
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SECONDS)
    if result.returncode != 0 or not target.is_file():
        raise LocalServiceError(
            f"pip could not download {SDIST_NAME}=={SDIST_VERSION} (exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-2000:]}"
        )
    actual = file_sha256(target)
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
            log(
                f"building llama-server from the vendored llama.cpp ({'ninja' if generator else 'make'}, "
                f"{os.cpu_count()} jobs; 5-10 min on 2 cores)…"
            )
            _run(
                cmake_configure_args(source, build, generator),
                cwd=work,
                timeout=BUILD_TIMEOUT_SECONDS,
                what="configuring llama.cpp",
                log_file=log_file,
            )
            _run(
                cmake_build_args(build, os.cpu_count() or 2),
                cwd=work,
                timeout=BUILD_TIMEOUT_SECONDS,
                what="building llama-server",
                log_file=log_file,
            )
            built = build / "bin" / "llama-server"
            if not built.is_file():
                raise LocalServiceError(f"the build finished but produced no {built}; see {log_file}")
            binary.parent.mkdir(parents=True, exist_ok=True)
            staging = binary.with_suffix(".partial")
            shutil.copy2(built, staging)
            os.replace(staging, binary)  # a half-copied binary never has the final name
        log(f"llama-server built in {time.monotonic() - began:.0f} s: {binary}")
    return binary


if __name__ == "__main__":
    # `python -m local_services.llama_build --cpu-flags`: the GGML flags for
    # this CPU, for the Makefile's llama-cpp-python build.
    if sys.argv[1:] == ["--cpu-flags"]:
        print(" ".join(cpu_cmake_flags(cpu_flags())))
    else:
        print(ensure_llama_server())
