"""The capacity model: from ``bench capacity``'s measured figures and a stated use, what one
primary holds and when sharding is needed (docs/performance.md, "Capacity").

What is assumed is :class:`Usage` (every figure of it a guess, stated so it can be changed);
what is measured comes from the report: the database's CPU and WAL per event of each kind,
and each table's bytes per row. Retention is the settings' defaults (``llm-bot maintain``):
turns are kept ``RETENTION_HISTORY_DAYS``, event records and tool calls
``RETENTION_PROCESSED_EVENTS_DAYS``. The limits of one primary are Cloud SQL's largest
machines and disk, the default deployment's database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from llm_bot.settings import Settings
from llm_bot_tools.bench.capacity import CapacityReport, KindReport, StorageReport
from llm_bot_tools.bench.storage import RowCost

DAYS_PER_MONTH = 365 / 12
SECONDS_PER_MONTH = DAYS_PER_MONTH * 86_400
MILLION = 1_000_000
PAGE_BYTES = 8192
HISTORY_DAYS: int = Settings.model_fields["retention_history_days"].default
RECORD_DAYS: int = Settings.model_fields["retention_processed_events_days"].default
# Cloud SQL for PostgreSQL: Enterprise Plus up to 128 vCPUs and 864 GB of memory (Enterprise 96
# and 624 GB), storage to 64 TB.
LARGEST_PRIMARY_VCPUS = 128
LARGEST_PRIMARY_MEMORY_BYTES = 864 * 10**9
LARGEST_PRIMARY_BYTES = 64 * 10**12
# What grows with what (tables not named: constant, or not written by the bench's events).
PER_EVENT_KEPT = ("conversation_turns",)  # kept HISTORY_DAYS
PER_EVENT_RECORD = ("processed_events",)  # kept RECORD_DAYS
PER_TOOL_CALL = ("tool_calls",)  # kept RECORD_DAYS
PER_MEMORY = ("memories", "memory_versions")
PER_USER = ("conversation_threads",)


@dataclass(frozen=True)
class Usage:
    """What the model assumes of a user and of the platform."""

    events_per_user_month: float = 100.0  # messages that reach llm-bot
    kind_shares: dict[str, float] = field(
        default_factory=lambda: {"dm": 0.45, "shared": 0.45, "memory": 0.10}
    )
    memories_per_user: float = 50.0  # the cap (RETENTION_MEMORIES_PER_USER) is 1,000
    tool_calls_per_event: float = 0.1
    peak_to_mean: float = 4.0  # the busiest hour's rate over the month's mean
    cpu_target: float = 0.7  # a primary's CPU kept below this


@dataclass(frozen=True)
class SizeModel:
    """One embedding size: per event, per vCPU, per user, and the limits of one primary."""

    dimensions: int
    db_cpu_ms_per_event: float  # the usage's mix of kinds
    wal_bytes_per_event: float
    pages_per_event: float  # 8 kB page accesses, from shared buffers or not
    events_per_s_per_vcpu: float  # at the CPU target
    bytes_per_user: float  # a year in, every retention at its default
    bytes_by_table: dict[str, float]  # per user
    peak_events_per_s_per_million_users: float
    vcpus_per_million_users: float
    wal_mb_per_s_per_million_users: float  # at the peak
    page_gb_per_s_per_million_users: float  # at the peak: memory (or disk) read bandwidth
    storage_tb_per_million_users: float
    users_by_cpu_millions: float  # on LARGEST_PRIMARY_VCPUS at the CPU target
    users_by_storage_millions: float  # on LARGEST_PRIMARY_BYTES
    # Users whose rows all fit in LARGEST_PRIMARY_MEMORY_BYTES: recall reads a typical user's
    # every turn, so an event of a user beyond them reads that user's history from disk.
    users_in_memory_millions: float
    first_limit: str


@dataclass(frozen=True)
class CapacityModel:
    usage: Usage
    sizes: list[SizeModel]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def model_of(report: CapacityReport, usage: Usage | None = None) -> CapacityModel:
    usage = usage or Usage()
    sizes = []
    for stored in report.storage:
        kinds = {
            k.kind: k
            for k in report.kinds
            if k.target == "postgres" and k.dimensions == stored.dimensions
        }
        sizes.append(size_model(stored, kinds, usage))
    return CapacityModel(usage, sizes)


def size_model(stored: StorageReport, kinds: dict[str, KindReport], usage: Usage) -> SizeModel:
    def mix(figure: str) -> float:
        return sum(
            share * float(getattr(kinds[k], figure)) for k, share in usage.kind_shares.items()
        )

    cpu_ms, wal, pages = (
        mix("db_cpu_ms_per_event"),
        mix("wal_bytes_per_event"),
        mix("pages_per_event"),
    )
    per_vcpu = usage.cpu_target * 1000 / cpu_ms
    peak = MILLION * usage.events_per_user_month / SECONDS_PER_MONTH * usage.peak_to_mean
    by_table = bytes_per_user(stored, usage)
    per_user = sum(by_table.values())
    users_by_cpu = LARGEST_PRIMARY_VCPUS * per_vcpu / (peak / MILLION) / MILLION
    users_by_storage = LARGEST_PRIMARY_BYTES / per_user / MILLION
    return SizeModel(
        dimensions=stored.dimensions,
        db_cpu_ms_per_event=cpu_ms,
        wal_bytes_per_event=wal,
        pages_per_event=pages,
        events_per_s_per_vcpu=per_vcpu,
        bytes_per_user=per_user,
        bytes_by_table=by_table,
        peak_events_per_s_per_million_users=peak,
        vcpus_per_million_users=peak / per_vcpu,
        wal_mb_per_s_per_million_users=peak * wal / 10**6,
        page_gb_per_s_per_million_users=peak * pages * PAGE_BYTES / 10**9,
        storage_tb_per_million_users=per_user * MILLION / 10**12,
        users_by_cpu_millions=users_by_cpu,
        users_by_storage_millions=users_by_storage,
        users_in_memory_millions=LARGEST_PRIMARY_MEMORY_BYTES / per_user / MILLION,
        first_limit="CPU" if users_by_cpu <= users_by_storage else "storage",
    )


def bytes_per_user(stored: StorageReport, usage: Usage) -> dict[str, float]:
    """Each growing table's bytes for one user a year in: its rows per unit (as the bench
    wrote them) times the units the usage keeps, times its bytes per row."""
    rows = {r.table: r for r in stored.rows}
    events_kept = usage.events_per_user_month * min(HISTORY_DAYS, 365) / DAYS_PER_MONTH
    records_kept = usage.events_per_user_month * RECORD_DAYS / DAYS_PER_MONTH
    memories = rows.get("memories")
    units: dict[str, tuple[float, float]] = {}  # table: (units kept per user, rows per unit)
    for table in PER_EVENT_KEPT:
        units[table] = (events_kept, _rows(rows, table) / stored.events)
    for table in PER_EVENT_RECORD:
        units[table] = (records_kept, _rows(rows, table) / stored.events)
    for table in PER_TOOL_CALL:
        units[table] = (records_kept * usage.tool_calls_per_event, 1.0)
    for table in PER_MEMORY:
        per_memory = _rows(rows, table) / memories.rows if memories else 0.0
        units[table] = (usage.memories_per_user, per_memory)
    for table in PER_USER:
        units[table] = (1.0, _rows(rows, table) / stored.users)
    return {
        table: kept * per_unit * rows[table].bytes_per_row
        for table, (kept, per_unit) in units.items()
        if table in rows
    }


def _rows(rows: dict[str, RowCost], table: str) -> float:
    cost = rows.get(table)
    return float(cost.rows) if cost else 0.0


def render(report: CapacityReport, model: CapacityModel) -> str:
    """The report and the model as text tables."""
    lines = [
        f"{report.started}, {report.cpus} CPUs, load {report.load_before[0]:.1f} before, "
        f"{report.load_after[0]:.1f} after",
        "",
        "target    dims  kind    events/s  beyond p50  db cpu ms/ev  active ms/ev  "
        "WAL kB/ev  pages/ev  worker cpu ms/ev",
    ]
    for k in report.kinds:
        lines.append(
            f"{k.target:8s}  {k.dimensions:4d}  {k.kind:6s}  {k.events_per_s:8.1f}  "
            f"{k.beyond_model_p50_ms:10.0f}  {k.db_cpu_ms_per_event:12.2f}  "
            f"{k.db_active_ms_per_event:12.2f}  {k.wal_bytes_per_event / 1024:9.1f}  "
            f"{k.pages_per_event:8.0f}  {k.worker_cpu_ms_per_event:16.2f}"
        )
    cluster = [k.distributed_tables for k in report.kinds if k.target == "citus"]
    if cluster:
        lines.append(f"citus: {max(cluster)} tables distributed or reference (llm-bot migrate)")
    for k in report.kinds:
        if k.statements:
            lines += ["", f"{k.dimensions} dimensions, {k.kind}: ms/event (plan + execute), calls"]
            lines += [
                f"  {s.total_ms:6.3f} ({s.plan_ms:.3f} + {s.execute_ms:.3f})  "
                f"{s.calls_per_event:5.2f}  {s.statement}"
                for s in k.statements
            ]
    for stored in report.storage:
        lines += ["", f"{stored.dimensions} dimensions: bytes per row (heap, TOAST, indexes)"]
        lines += [
            f"  {r.table:22s} {r.rows:7d} rows  {r.bytes_per_row:8.0f}  ({r.heap_per_row:.0f}, "
            f"{r.toast_per_row:.0f}, {sum(r.index_per_row.values()):.0f})"
            for r in stored.rows
        ]
    for m in model.sizes:
        lines += [
            "",
            f"{m.dimensions} dimensions: {m.db_cpu_ms_per_event:.2f} ms database CPU an event, "
            f"{m.events_per_s_per_vcpu:.0f} events/s per vCPU at "
            f"{model.usage.cpu_target:.0%}; {m.bytes_per_user / 10**6:.1f} MB a user, "
            f"{m.storage_tb_per_million_users:.2f} TB per million users; per million users "
            f"{m.peak_events_per_s_per_million_users:.0f} events/s at the peak, "
            f"{m.vcpus_per_million_users:.1f} vCPUs, {m.wal_mb_per_s_per_million_users:.2f} "
            f"MB/s of WAL, {m.page_gb_per_s_per_million_users:.1f} GB/s of page accesses; "
            f"one primary holds {m.users_by_cpu_millions:.1f}M users by CPU, "
            f"{m.users_by_storage_millions:.1f}M by storage: {m.first_limit} first; the data "
            f"of {m.users_in_memory_millions * 1000:.0f}k users fits in its memory",
        ]
    return "\n".join(lines)
