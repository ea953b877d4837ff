"""The one place that imports pgserver: quietly, and with the seam that makes it run another
PostgreSQL installation.

pgserver names a runtime directory for its lock file when its module is imported; without
``XDG_RUNTIME_DIR`` (containers, CI, ``sudo``) platformdirs warns about the fallback on stderr,
a line every ``llm-bot`` command that starts a local server would print. The fallback is right
for a local tool, so that warning is silenced for this import alone.

pgserver runs the binaries inside its wheel and takes no parameter for another install: its
command wrappers and its server class read the module-level ``POSTGRES_BIN_PATH`` at each call.
:func:`run_servers_from` points both at another ``pginstall``, so every ``initdb``, ``pg_ctl``
and server pgserver starts in this process is that install's.
"""

from __future__ import annotations

import warnings
from pathlib import Path

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    import pgserver._commands
    import pgserver.postgres_server
    from pgserver.postgres_server import PostgresServer, get_server
    from pgserver.utils import PostmasterInfo, ensure_user_exists

WHEEL_PGINSTALL: Path = pgserver._commands.POSTGRES_BIN_PATH.parent

__all__ = [
    "WHEEL_PGINSTALL",
    "PostgresServer",
    "PostmasterInfo",
    "ensure_user_exists",
    "get_server",
    "run_servers_from",
    "servers_bin_dir",
]


def run_servers_from(pginstall: Path) -> None:
    """Make pgserver run ``pginstall``'s binaries from now on, in this process."""
    bin_dir = pginstall / "bin"
    pgserver._commands.POSTGRES_BIN_PATH = bin_dir
    pgserver.postgres_server.POSTGRES_BIN_PATH = bin_dir  # type: ignore[attr-defined]


def servers_bin_dir() -> Path:
    """Where the binaries pgserver runs lie."""
    return Path(pgserver._commands.POSTGRES_BIN_PATH)
