"""What the kernel keeps about a worker process: its CPU time and its peak resident memory.

Read from ``/proc`` rather than asked of the worker, so the figures include everything the
process does (every thread, the Pub/Sub client's included) and cost the worker nothing. CPU
time is the figure that matters on Cloud Run (the bill, and events per vCPU), and it moves
less with the other load on a shared machine than wall time does.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User plus system CPU time the process has used so far, all its threads, or the one
    ``thread`` (its id; the main thread's is the process's)."""
    where = f"/proc/{pid}" if thread is None else f"/proc/{pid}/task/{thread}"
    stat = Path(f"{where}/stat").read_text()
    # Fields after the parenthesized command name (which may itself hold spaces): state is
    # field 3, utime and stime are fields 14 and 15 (man 5 proc).
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def peak_rss_kb(pid: int) -> int:
    """``VmHWM``: the most resident memory the process ever had, kept by the kernel."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for process {pid}")


def server_cpu_seconds(pid: int) -> float:
    """CPU time of a server and every process it started (a PostgreSQL postmaster and its
    backends): those that ended were added to its children's time when it reaped them."""
    own = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(field) for field in own[11:15]) / os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile: its time is in the parent's by now
            continue
        if int(fields[1]) == pid:  # its utime and stime, from the one read (read again, a
            # child that ended meanwhile would raise ProcessLookupError)
            total += sum(int(field) for field in fields[11:13]) / os.sysconf("SC_CLK_TCK")
    return total
