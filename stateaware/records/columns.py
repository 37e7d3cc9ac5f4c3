"""The record store's tables as plain data: every column's name, type and nullability.

The one definition of the tables (``stateaware.records.schema`` describes them and builds
their Arrow schemas from this). It imports nothing but the standard library, so a reader
that needs only the columns — ``analysis sql`` answering from checked parts, whose footers
the part-check cache already holds — starts without pyarrow and numpy (about 0.15 s of a
0.3 s query on the store's bench, ``bench/bench_store.py``).

A column's type is the text Arrow prints for it (``str(pa.int32())`` is ``"int32"``), so a
``Columns`` is read like a ``pyarrow.Schema`` where only names and types matter
(``names``, ``field(name).type``, iteration), and the part-check cache's digest of a table
is the same for both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "ARROW_TYPES",
    "IDENTITY_COLUMNS",
    "OUTCOMES",
    "RENAMED",
    "RESULT_COLUMNS",
    "SCHEMA_VERSION",
    "STATUSES",
    "TABLE_COLUMNS",
    "Column",
    "Columns",
    "columns_for",
]

#: Every column type a table uses, as Arrow prints it.
ARROW_TYPES = ("string", "int16", "int32", "int64", "double", "bool", "timestamp[us, tz=UTC]", "list<item: string>")


class Column(NamedTuple):
    """One column: its name, its type as Arrow prints it (one of ``ARROW_TYPES``), and
    whether it may hold nulls."""

    name: str
    type: str
    nullable: bool = True


class Columns(tuple[Column, ...]):
    """A table's columns in order, read like a ``pyarrow.Schema``'s fields.

    ``ValueError`` naming the column for a type outside ``ARROW_TYPES`` or a name given twice.
    """

    def __new__(cls, columns: Iterable[Column]) -> Columns:
        made = super().__new__(cls, columns)
        seen: set[str] = set()
        for column in made:
            if column.type not in ARROW_TYPES:
                raise ValueError(f"column {column.name!r}: type {column.type!r}; allowed: {', '.join(ARROW_TYPES)}")
            if column.name in seen:
                raise ValueError(f"column {column.name!r} given twice")
            seen.add(column.name)
        return made

    @property
    def names(self) -> list[str]:
        """The column names in order (as ``pyarrow.Schema.names``)."""
        return [column.name for column in self]

    def field(self, name: str) -> Column:
        """The column called ``name``; ``KeyError`` naming it otherwise (as ``pyarrow.Schema.field``)."""
        for column in self:
            if column.name == name:
                return column
        raise KeyError(f"no column {name!r}; columns: {', '.join(self.names)}")


#: Bumped whenever a column is added, renamed or retyped. Rows and file metadata carry it.
#: 2: records.observed, records.card_source, policies.seed (the CIFAR application);
#: 3: records.outcome may be ``error`` (an unexpected exception; before, it read ``reject``);
#: 4: timings.cpu_ms, epochs.cpu_seconds; processes: the system context (load, CPUs,
#:    affinity, governor, other processes' CPU share, torch threads, GPU clocks and
#:    temperature: what loaded a measurement);
#: 5: runs.kind and runs.report_sections (the report picks sections by them);
#:    records.check renamed records.check_name (``check`` is a DuckDB keyword: see RENAMED);
#: 6: processes.parts_json (what a process's attempt wrote, so verification and resume can
#:    count its rows);
#: 7: runs.pair_id and runs.side (the two runs of an interleaved comparison, ``compare_to=``:
#:    side ``a`` the code launched, side ``b`` the code compared to it);
#: 8: processes.stdout_path and processes.stderr_path (the attempt's log files), and the
#:    ``requeued`` status (an attempt Slurm requeued, recorded by the next one).
SCHEMA_VERSION = 8

#: Columns renamed since an older schema version: old name -> (new name, version that renamed
#: it). A part stamped with an older version may carry the old name; the part check accepts
#: it there and the views read it under the new name, so old results still query and render.
RENAMED: dict[str, tuple[str, int]] = {"check": ("check_name", 5)}

#: Semantic outcomes (paper Table 2): ``match`` preserved execution, ``reject`` the
#: framework refused explicitly, ``diverge`` an observed mismatch, ``unsupported`` refused
#: by our own admission check before execution (e.g. integer-write differentiation),
#: ``error`` an unexpected exception (a bug, not a refusal; ``exception_type`` and
#: ``exception_message`` say which) — since schema version 3.
OUTCOMES = ("match", "reject", "diverge", "unsupported", "error")

#: Terminal process statuses. ``source_drift``: the worker found different code from what
#: the launcher hashed at submission and refused to run. ``cancelled``: ended by the
#: scheduler (scancel, preemption without requeue). The launcher writes ``lost`` for a
#: process that died without writing any status (SIGKILL, OOM killer, node failure).
#: ``damaged``: written by a resuming launcher when a part of the process was found
#: damaged or foreign and moved to ``OUT/.quarantine/``; the process then runs again.
#: ``requeued``: a Slurm attempt that Slurm requeued (``scontrol requeue``, preemption, the
#: time limit) before it recorded anything; the next attempt of the same job writes it, with
#: the old attempt's number, and so does ``lost`` for an attempt ``sacct -D`` shows ended
#: otherwise (a node failure). Since schema version 8.
STATUSES = ("completed", "failed", "source_drift", "cancelled", "lost", "damaged", "requeued")

_TIMESTAMP = "timestamp[us, tz=UTC]"

IDENTITY_COLUMNS = Columns(
    [
        Column("run_id", "string", nullable=False),
        Column("cohort", "string", nullable=False),
        Column("process_index", "int32", nullable=False),
        Column("source_hash", "string", nullable=False),
        Column("schema_version", "int16", nullable=False),
        # Which hardware profile produced the row, and its declared shape scale (1.0 = paper).
        Column("hardware", "string", nullable=False),
        Column("scale", "double", nullable=False),
    ]
)

# Columns shared by the tables that describe one workload configuration (timing cohorts,
# policies, profiles), so a join on them lines up measured and planned rows.
_WORKLOAD = [
    ("workload", "string"),  # feature_queue | prototype_memory | unrolled_recurrence | cifar
    ("cell", "string"),  # a cohort's name for the shape (e.g. "large_sparse", "q1024-f0.001-l64")
    ("buffer_bytes", "int64"),
    ("write_fraction", "double"),
    ("live_segments", "int32"),
    ("granularity_bytes", "int64"),
    ("width", "int32"),
    ("batch", "int32"),
    ("budget_bytes", "int64"),
]

_OWN_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "runs": [
        ("launcher", "string"),
        ("processes", "int32"),
        ("started_at", _TIMESTAMP),
        ("git_commit", "string"),
        ("git_dirty", "bool"),
        ("host", "string"),
        ("python", "string"),
        ("torch", "string"),
        ("jax", "string"),
        ("cuda", "string"),
        ("driver", "string"),
        ("config_yaml", "string"),
        ("launches", "int32"),  # 1, plus one per resume of the same run
        # The cohort kind (its module: a name in stateaware.cohorts or a dotted path) and the
        # report sections it declares (module names, the kind's ``REPORT``: stateaware.kinds.Kind), written
        # when the run is planned so the report never imports a kind. Null before version 5.
        ("kind", "string"),
        ("report_sections", "list<item: string>"),
        # An interleaved comparison (``compare_to=``) launches two runs together: the same
        # pair_id, side "a" (the code launched) and "b" (the code compared). Null otherwise.
        ("pair_id", "string"),
        ("side", "string"),
    ],
    "processes": [
        ("status", "string"),  # one of STATUSES
        ("attempt", "int32"),  # 1 for the first try; resumes and requeues count up
        ("node", "string"),
        ("pid", "int64"),
        ("launcher", "string"),
        ("slurm_job_id", "string"),  # null off Slurm
        ("slurm_array_task_id", "int32"),
        ("started_at", _TIMESTAMP),
        ("finished_at", _TIMESTAMP),
        ("wall_s", "double"),
        ("exception_type", "string"),
        ("exception_message", "string"),
        ("traceback", "string"),
        ("spec_json", "string"),  # the process spec's seeds and parameters
        # The attempt's log files as submitit named them (OUT/.submitit/<run_id>/<job>_0_log.out
        # and .err: the traceback of a failed process is there too); null inline and before 8.
        ("stdout_path", "string"),
        ("stderr_path", "string"),
        # The parts this attempt wrote, as the worker saw them land: a JSON list of
        # {"table", "part", "rows"} (stateaware.records.writer.RecordWriter.parts_written).
        # Verification and resume compare each table's rows of the process with it; null on
        # rows the launcher writes (lost, damaged) and before version 6.
        ("parts_json", "string"),
        # The system context of the attempt (stateaware.launch.context; null where unreadable,
        # and on rows the launcher writes for a process that died).
        ("load_before", "double"),  # 1-minute load average when the process started
        ("load_after", "double"),  # ... and when it ended
        ("cpu_model", "string"),  # /proc/cpuinfo "model name" (or the platform's processor)
        ("logical_cpus", "int32"),  # logical CPUs of the machine
        ("affinity", "string"),  # CPUs the process may run on, as a list "0-3,6"
        ("cpu_governor", "string"),  # the frequency governor(s) of those CPUs, "," joined
        # Share of the CPU time of the affinity CPUs that other processes took while this one
        # ran: (busy time on those CPUs - this process's CPU time) / their total time.
        ("other_cpu_share", "double"),
        ("process_cpu_s", "double"),  # user + system CPU seconds of the process while the kind ran
        ("torch_threads", "int32"),  # torch.get_num_threads() at the end, where torch was loaded
        ("gpu_name", "string"),
        ("gpu_sm_clock_mhz_start", "int32"),
        ("gpu_sm_clock_mhz_end", "int32"),
        ("gpu_mem_clock_mhz_start", "int32"),
        ("gpu_mem_clock_mhz_end", "int32"),
        ("gpu_temperature_c_start", "int32"),
        ("gpu_temperature_c_end", "int32"),
    ],
    "records": [
        ("backend", "string"),  # torch | jax | finite
        ("method", "string"),
        ("family", "string"),
        ("precision", "string"),  # fp32 | fp64
        ("seed", "int64"),
        ("outcome", "string"),  # one of OUTCOMES
        ("check_name", "string"),  # which check produced the row when a cohort runs several (``check`` before 5)
        ("phase", "string"),  # forward | backward1 | backward2 | state_readback | ...
        ("exception_type", "string"),
        ("exception_message", "string"),
        ("max_error", "double"),
        ("tolerance", "double"),
        ("forward_calls", "int32"),
        ("backward_calls", "int32"),
        ("recompute_calls", "int32"),
        ("dimension", "int32"),
        ("operations", "int32"),
        ("coordinates", "int32"),  # complex-step coordinates checked
        ("retained_bytes", "int64"),
        ("workload", "string"),
        ("sha256", "string"),  # e.g. of an application's test-score file
        ("detail", "string"),  # free-form diagnostics only; no query may depend on it
        # finite engines: the generator's write density (sparse | dense) and the measured mean
        # fraction of float cells each operation writes
        ("writes", "string"),
        ("write_fraction", "double"),
        # the CIFAR application (cohorts/cifar.py): complete-encoder seconds (initialisation,
        # epochs, validation, checkpoint; probe excluded), the test scores read back from the
        # score file, the hash binding the probe to its encoder, and whether the archive's
        # official checksums were verified (false for generated archives)
        ("encoder_seconds", "double"),
        ("test_accuracy", "double"),
        ("test_mean_loss", "double"),
        ("encoder_sha256", "string"),
        ("checksum_verified", "bool"),
        # false for a quality-only seed (no allocator reads; left out of Table 9 and Figure 3C)
        ("observed", "bool"),
        ("card_source", "string"),  # frozen | measured_in_process
    ],
    "timings": [
        ("method", "string"),
        ("precision", "string"),
        ("step", "int32"),  # 0-based; warm-ups and measured steps each count from 0
        ("warmup", "bool"),
        ("step_ms", "double"),  # wall time (synchronized on a GPU)
        # The timed thread's CPU time over the same step (stateaware.clocks, NOTE [ Two
        # clocks ]); on a GPU the host thread's, not device time.
        ("cpu_ms", "double"),
        ("peak_allocated_bytes", "int64"),
        ("peak_reserved_bytes", "int64"),
        # Where the peak came from: cuda_allocator | torch_profiler | memtracker — never a
        # prediction (a budget is checked against what was measured).
        ("peak_source", "string"),
        ("device", "string"),
        ("seed", "int64"),
        *_WORKLOAD,
    ],
    "policies": [
        ("method", "string"),
        ("planner", "string"),  # joint | eager_whole | agnostic | eager | whole | region
        ("feasible", "bool"),
        ("policy", "list<item: string>"),  # per segment: eager | whole | region
        ("predicted_peak_bytes", "int64"),
        ("predicted_ms", "double"),
        ("min_peak_bytes", "int64"),  # the least achievable peak (set when infeasible)
        ("frontier_size", "int64"),
        ("truncated", "bool"),
        ("card_digest", "string"),
        ("plan_digest", "string"),
        ("seed", "int64"),  # the application's training seed (null where one plan serves every seed)
        *_WORKLOAD,
    ],
    "profiles": [
        ("card_digest", "string"),
        ("segment", "int32"),
        ("option", "string"),  # eager | whole | region
        ("retained_bytes", "int64"),
        ("temp_bytes", "int64"),
        ("ms", "double"),
        ("persistent_bytes", "int64"),
        ("provenance_json", "string"),
        *_WORKLOAD,
        # The preservation share of retained_bytes / temp_bytes / ms (planner/profile_card.py, NOTE
        # [ The state_* fields ]): what the state-agnostic control omits. 0 for eager.
        ("state_retained_bytes", "int64"),
        ("state_temp_bytes", "int64"),
        ("state_ms", "double"),
    ],
    "epochs": [
        ("method", "string"),
        ("seed", "int64"),
        ("phase", "string"),  # encoder | probe
        ("epoch", "int32"),
        ("loss", "double"),
        ("accuracy", "double"),
        ("seconds", "double"),  # wall seconds of the epoch
        # the process's CPU seconds over the epoch, every thread (time.process_time): the
        # application trains with several intra-op threads, so one thread's clock would not do
        ("cpu_seconds", "double"),
        ("peak_allocated_bytes", "int64"),
        ("peak_reserved_bytes", "int64"),
        ("peak_source", "string"),
        ("checksum_verified", "bool"),  # the CIFAR archive's official checksums checked
    ],
    "peaks": [
        ("method", "string"),
        ("seed", "int64"),
        ("event", "string"),  # before_reset | exit
        ("event_index", "int64"),
        ("peak_allocated_bytes", "int64"),
        ("peak_reserved_bytes", "int64"),
        ("peak_source", "string"),
        ("checksum_verified", "bool"),  # the CIFAR archive's official checksums checked
    ],
    "artifacts": [
        ("method", "string"),
        ("seed", "int64"),
        ("name", "string"),
        ("path", "string"),  # relative to the results directory
        ("bytes", "int64"),
        ("sha256", "string"),
        ("checksum_verified", "bool"),  # the CIFAR archive's official checksums checked
    ],
}


#: table -> its columns: the identity columns, then its own (every one nullable).
TABLE_COLUMNS: dict[str, Columns] = {
    name: Columns([*IDENTITY_COLUMNS, *(Column(col, typ) for col, typ in own)]) for name, own in _OWN_COLUMNS.items()
}


# The tables the analysis itself writes beside the records. Each is a DuckDB view of the same
# name from the start — empty, with these columns, until something is computed — so a query
# the README shows (``SELECT * FROM comparisons``) runs on any results directory.

#: ``comparisons``: one row per prespecified comparison of a run
#: (``stateaware.analysis.stats.comparisons`` computes and writes them).
_COMPARISONS = Columns(
    [
        *(c for c in IDENTITY_COLUMNS if c.name in ("run_id", "cohort")),  # the record tables' own, so joins line up
        Column("comparison", "string", nullable=False),
        Column("metric", "string", nullable=False),
        Column("numerator", "string", nullable=False),
        Column("denominator", "string", nullable=False),
        Column("subset", "string"),  # the comparison's `where` as JSON; null for all rows
        Column("estimate", "double", nullable=False),
        Column("lower", "double", nullable=False),
        Column("upper", "double", nullable=False),
        Column("confidence", "double", nullable=False),  # two-sided, = 1 - alpha/m
        Column("alpha", "double", nullable=False),
        Column("m", "int32", nullable=False),  # prespecified comparisons in the cohort
        Column("draws", "int64", nullable=False),
        Column("seed", "int64", nullable=False),
        Column("processes", "int32", nullable=False),  # paired processes in this ratio
        Column("expected_processes", "int32"),  # the run's declared process count
        Column("partial", "bool", nullable=False),
        Column("numerator_mean", "double"),  # mean over processes of per-process means
        Column("denominator_mean", "double"),
        # A step-time comparison's clock (wall | cpu; stateaware.clocks), and the same ratio on
        # the other clock, shown beside it; null for other metrics.
        Column("clock", "string"),
        Column("other_clock", "string"),
        Column("other_estimate", "double"),
        Column("other_lower", "double"),
        Column("other_upper", "double"),
    ]
)

#: folder -> columns of every result table the analysis writes.
RESULT_COLUMNS: dict[str, Columns] = {"comparisons": _COMPARISONS}


def columns_for(table: str) -> Columns:
    """The columns of ``table``; a ``KeyError`` that lists the valid tables otherwise."""
    try:
        return TABLE_COLUMNS[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; valid tables are: {', '.join(TABLE_COLUMNS)}") from None
