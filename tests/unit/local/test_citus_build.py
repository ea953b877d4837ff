"""The Citus build's cache: found where it is finished, built again where it was left half-way,
reused once built; driven by a stand-in source whose configure and make are tiny scripts, so
the cache logic is tested without compiling Citus."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from llm_bot_tools.local.citus_build import (
    CACHE_ENV,
    SOURCE_ENV,
    CitusBuildError,
    build,
    find_install,
    main,
    unavailable_reason,
)

INSTALLED = "lib/postgresql/stand-in.so"
MAKEFILE = f"all:\n\ttouch built\ninstall: built\n\tcp built $(PGINSTALL)/{INSTALLED}\n"


def stand_in_source(path: Path, configure_exit: int = 0) -> Path:
    """A source tarball whose configure records PG_CONFIG's install and exits as told."""
    configure = (
        "#!/bin/sh\n"
        'echo "configuring with $1"\n'
        'echo "PGINSTALL=$(dirname $(dirname ${1#PG_CONFIG=}))" > config.mk\n'
        f"exit {configure_exit}\n"
    )
    files = {"configure": configure, "Makefile": f"include config.mk\n{MAKEFILE}"}
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"citus-0.0/{name}")
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_without_the_source_the_reason_names_it_and_make_test_goes_on(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent.tar.gz"
    monkeypatch.setenv(SOURCE_ENV, str(missing))
    assert find_install() is None
    assert unavailable_reason() == f"no Citus source at {missing} (set {SOURCE_ENV})"
    assert main(["--if-source"]) == 0
    assert main([]) == 1


def test_a_build_is_cached_by_the_sources_hash_and_then_reused(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = stand_in_source(tmp_path / "citus-0.0.tar.gz")
    monkeypatch.setenv(SOURCE_ENV, str(source))
    assert unavailable_reason() == "Citus is not built for citus-0.0.tar.gz: run `make citus`"
    lines: list[str] = []
    install = build(lines.append)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert install.root.is_relative_to(cache / f"citus-{digest}")
    assert (install.root / INSTALLED).is_file()
    assert (install.bin_dir / "pg_config").is_file(), "a copy of the wheel's PostgreSQL"
    assert find_install() == install
    assert unavailable_reason() is None
    assert build(lines.append) == install
    assert lines[-1] == f"citus: reusing {install.root.parent}"


def test_a_failed_build_leaves_no_cache_and_the_next_one_starts_over(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SOURCE_ENV, str(stand_in_source(tmp_path / "c.tar.gz", configure_exit=3)))
    with pytest.raises(CitusBuildError, match=r"configure failed \(3\)") as failure:
        build(lambda _: None)
    assert "configuring with PG_CONFIG=" in str(failure.value), "the log's tail"
    assert find_install() is None
    lines: list[str] = []
    with pytest.raises(CitusBuildError):
        build(lines.append)
    assert lines[0].startswith("citus: removing a half-built cache at ")
