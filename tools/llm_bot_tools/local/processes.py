"""Whether a process, or a process group, still runs, counting a zombie as ended; and a
command run as another user without a fork of this process.

The local stack's servers (the emulator's Java child, the postmaster) are orphans once their
parents exit, so init reaps them, and some inits do that only every second or two. A zombie
holds no port, memory or file: waiting for init to reap it only costs time. Where there is no
/proc (not Linux), a process counts as running until it is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def as_user(command: list[str], user: str | None) -> list[str]:
    """``command`` run as ``user`` (its own group, no other) by ``setpriv``, or as it is for
    None. Not ``subprocess``'s ``user=``: to change users the child must be a ``fork()`` of this
    process, which runs every ``pthread_atfork`` handler in it, and gRPC's (the Pub/Sub clients
    beside a local cluster) crashes the child when its threads are busy: ``initdb`` ends by
    SIGSEGV before it runs. Without a change of user, ``subprocess`` starts the child by
    ``vfork()``, which runs none."""
    if user is None:
        return command
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *command]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    stat = _stat(_PROC / str(pid))
    return stat is None or stat[0] != "Z"


def group_running(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    if not _PROC.is_dir():
        return True
    return any(state != "Z" for state in group_members(pgid).values())


def group_members(pgid: int) -> dict[int, str]:
    """pid -> state (``Z`` for a zombie) of every process in the group, read from /proc."""
    return {pid: state for pid, (state, _, group) in _stats().items() if group == pgid}


def group_commands(pgid: int) -> list[str]:
    """The command line of every live process in the group, its arguments joined by spaces
    (none for a process that ended meanwhile, or without /proc)."""
    commands = []
    for pid, state in group_members(pgid).items():
        if state == "Z":
            continue
        try:
            raw = (_PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        commands.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return commands


def descendants(pid: int) -> set[int]:
    """Every process whose chain of parents reaches ``pid``, read from /proc (none without)."""
    children: dict[int, list[int]] = {}
    for child, (_, parent, _) in _stats().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        frontier = [
            child for each in frontier for child in children.get(each, ()) if child not in found
        ]
        found.update(frontier)
    return found


def _stats() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, parent, process group) of every process, empty without /proc."""
    if not _PROC.is_dir():
        return {}
    stats = {}
    for entry in _PROC.iterdir():
        stat = _stat(entry) if entry.name.isdigit() else None
        if stat is not None:
            stats[int(entry.name)] = stat
    return stats


def _stat(process: Path) -> tuple[str, int, int] | None:
    """(state, parent, process group), or None without /proc or when the process just ended."""
    try:
        stat = (process / "stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command: state, ppid, pgrp, ...
    state, parent, group = stat.rsplit(")", 1)[1].split()[:3]
    return state, int(parent), int(group)
