"""What the kernel keeps about a process: its CPU time and its peak resident memory; and a
database server's CPU, its postmaster and every backend it started.

Read from ``/proc`` rather than asked of the worker, so the figures include everything the
process does (every thread, the Pub/Sub client's included) and cost the worker nothing. CPU
time is the figure that matters on Cloud Run (the bill, and events per vCPU), and it moves
less with the other load on a shared machine than wall time does.
"""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` after the parenthesized command name (which may itself hold spaces):
    the first is the state, field 3 of man 5 proc."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _ticks(fields: list[str], first: int, last: int) -> int:
    return sum(int(value) for value in fields[first : last + 1])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far, all its threads."""
    # utime and stime: fields 14 and 15.
    return _ticks(_stat_fields(pid), 11, 12) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(postmaster_pid: int) -> float:
    """CPU time of a PostgreSQL server so far: the postmaster's own, that of the children it
    has reaped (``cutime``/``cstime``: every backend whose connection closed) and that of its
    living children (the other backends, checkpointer, WAL writer, I/O workers, autovacuum).
    A difference of two readings is what the server spent between them, whatever processes
    started or ended meanwhile, since a child that ends moves from the living into the reaped."""
    own = _ticks(_stat_fields(postmaster_pid), 11, 14)  # utime, stime, cutime, cstime
    children = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):  # ended while we looked
            continue
        if int(fields[1]) == postmaster_pid:  # ppid: field 4
            children += _ticks(fields, 11, 12)
    return (own + children) / os.sysconf("SC_CLK_TCK")


def peak_rss_kb(pid: int) -> int:
    """``VmHWM``: the most resident memory the process ever had, kept by the kernel."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for process {pid}")
