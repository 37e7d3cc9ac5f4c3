"""The record store's tables: one explicit Arrow schema per table, for every cohort.

Every cohort the paper runs lands in these few tables, so SQL written against one cohort
works against the next:

==============  =====================================================================
``runs``        one row per run: the manifest (config, source hash, versions, host)
``processes``   one row per process attempt: terminal status, node, Slurm ids, error
``records``     one row per outcome: semantic matches/rejections/divergences, finite
                suites (derivative, bytes, engines, joint alias), application scores
``timings``     one row per measured or warm-up step: time and measured peaks
``policies``    one row per planned method: the chosen per-segment policy or infeasible
``profiles``    one row per (profile card, segment, option): r, q and c of eq. 3
``epochs``      one row per application epoch (encoder or probe)
``peaks``       one row per allocator observation (before a reset, or at exit)
``artifacts``   one row per file a process produced and hashed (test-score files, cards)
==============  =====================================================================

Identity columns (``IDENTITY``) lead every table; a writer fills them from the process
spec, never the cohort. Every other column is nullable, so a cohort writes only what
applies to it. A column a cohort needs and no table has is added *here*, once, with a
bump of ``SCHEMA_VERSION`` — never smuggled into a JSON blob; ``detail`` exists only for
free-form diagnostics that no query should depend on.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "SCHEMA_VERSION",
    "IDENTITY",
    "RENAMED",
    "TABLES",
    "OUTCOMES",
    "STATUSES",
    "schema_for",
]

#: Bumped whenever a column is added, renamed or retyped. Rows and file metadata carry it.
#: 2: records.observed, records.card_source, policies.seed (the CIFAR application);
#: 3: records.outcome may be ``error`` (an unexpected exception; before, it read ``reject``);
#: 4: timings.cpu_ms, epochs.cpu_seconds; processes: the system context (load, CPUs,
#:    affinity, governor, other processes' CPU share, torch threads, GPU clocks and
#:    temperature) — issue 17;
#: 5: runs.kind and runs.report_sections (the report picks sections by them, issue 16);
#:    records.check renamed records.check_name (``check`` is a DuckDB keyword: see RENAMED);
#: 6: processes.parts_json (what a process's attempt wrote, so verification and resume can
#:    count its rows — issue 23);
#: 7: runs.pair_id and runs.side (the two runs of an interleaved comparison, ``compare_to=``:
#:    side ``a`` the code launched, side ``b`` the code compared to it — issue 25);
#: 8: processes.stdout_path and processes.stderr_path (the attempt's log files), and the
#:    ``requeued`` status (an attempt Slurm requeued, recorded by the next one — issue 27).
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

_ts = pa.timestamp("us", tz="UTC")

IDENTITY: list[pa.Field] = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("cohort", pa.string(), nullable=False),
    pa.field("process_index", pa.int32(), nullable=False),
    pa.field("source_hash", pa.string(), nullable=False),
    pa.field("schema_version", pa.int16(), nullable=False),
    # Which hardware profile produced the row, and its declared shape scale (1.0 = paper).
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("scale", pa.float64(), nullable=False),
]

# Columns shared by the tables that describe one workload configuration (timing cohorts,
# policies, profiles), so a join on them lines up measured and planned rows.
_WORKLOAD = [
    ("workload", pa.string()),  # feature_queue | prototype_memory | unrolled_recurrence | cifar
    ("cell", pa.string()),  # a cohort's name for the shape (e.g. "large_sparse", "q1024-f0.001-l64")
    ("buffer_bytes", pa.int64()),
    ("write_fraction", pa.float64()),
    ("live_segments", pa.int32()),
    ("granularity_bytes", pa.int64()),
    ("width", pa.int32()),
    ("batch", pa.int32()),
    ("budget_bytes", pa.int64()),
]

_COLUMNS: dict[str, list[tuple[str, pa.DataType]]] = {
    "runs": [
        ("launcher", pa.string()),
        ("processes", pa.int32()),
        ("started_at", _ts),
        ("git_commit", pa.string()),
        ("git_dirty", pa.bool_()),
        ("host", pa.string()),
        ("python", pa.string()),
        ("torch", pa.string()),
        ("jax", pa.string()),
        ("cuda", pa.string()),
        ("driver", pa.string()),
        ("config_yaml", pa.string()),
        ("launches", pa.int32()),  # 1, plus one per resume of the same run
        # The cohort kind (its module: a name in stateaware.cohorts or a dotted path) and the
        # report sections it declares (module names, cohorts/__init__.py ``REPORT``), written
        # when the run is planned so the report never imports a kind. Null before version 5.
        ("kind", pa.string()),
        ("report_sections", pa.list_(pa.string())),
        # An interleaved comparison (``compare_to=``) launches two runs together: the same
        # pair_id, side "a" (the code launched) and "b" (the code compared). Null otherwise.
        ("pair_id", pa.string()),
        ("side", pa.string()),
    ],
    "processes": [
        ("status", pa.string()),  # one of STATUSES
        ("attempt", pa.int32()),  # 1 for the first try; resumes and requeues count up
        ("node", pa.string()),
        ("pid", pa.int64()),
        ("launcher", pa.string()),
        ("slurm_job_id", pa.string()),  # null off Slurm
        ("slurm_array_task_id", pa.int32()),
        ("started_at", _ts),
        ("finished_at", _ts),
        ("wall_s", pa.float64()),
        ("exception_type", pa.string()),
        ("exception_message", pa.string()),
        ("traceback", pa.string()),
        ("spec_json", pa.string()),  # the process spec's seeds and parameters
        # The attempt's log files as submitit named them (OUT/.submitit/<run_id>/<job>_0_log.out
        # and .err: the traceback of a failed process is there too); null inline and before 8.
        ("stdout_path", pa.string()),
        ("stderr_path", pa.string()),
        # The parts this attempt wrote, as the worker saw them land: a JSON list of
        # {"table", "part", "rows"} (stateaware.records.writer.RecordWriter.parts_written).
        # Verification and resume compare each table's rows of the process with it; null on
        # rows the launcher writes (lost, damaged) and before version 6.
        ("parts_json", pa.string()),
        # The system context of the attempt (stateaware.launch.context; null where unreadable,
        # and on rows the launcher writes for a process that died).
        ("load_before", pa.float64()),  # 1-minute load average when the process started
        ("load_after", pa.float64()),  # ... and when it ended
        ("cpu_model", pa.string()),  # /proc/cpuinfo "model name" (or the platform's processor)
        ("logical_cpus", pa.int32()),  # logical CPUs of the machine
        ("affinity", pa.string()),  # CPUs the process may run on, as a list "0-3,6"
        ("cpu_governor", pa.string()),  # the frequency governor(s) of those CPUs, "," joined
        # Share of the CPU time of the affinity CPUs that other processes took while this one
        # ran: (busy time on those CPUs - this process's CPU time) / their total time.
        ("other_cpu_share", pa.float64()),
        ("process_cpu_s", pa.float64()),  # user + system CPU seconds of the process while the kind ran
        ("torch_threads", pa.int32()),  # torch.get_num_threads() at the end, where torch was loaded
        ("gpu_name", pa.string()),
        ("gpu_sm_clock_mhz_start", pa.int32()),
        ("gpu_sm_clock_mhz_end", pa.int32()),
        ("gpu_mem_clock_mhz_start", pa.int32()),
        ("gpu_mem_clock_mhz_end", pa.int32()),
        ("gpu_temperature_c_start", pa.int32()),
        ("gpu_temperature_c_end", pa.int32()),
    ],
    "records": [
        ("backend", pa.string()),  # torch | jax | finite
        ("method", pa.string()),
        ("family", pa.string()),
        ("precision", pa.string()),  # fp32 | fp64
        ("seed", pa.int64()),
        ("outcome", pa.string()),  # one of OUTCOMES
        ("check_name", pa.string()),  # which check produced the row when a cohort runs several (``check`` before 5)
        ("phase", pa.string()),  # forward | backward1 | backward2 | state_readback | ...
        ("exception_type", pa.string()),
        ("exception_message", pa.string()),
        ("max_error", pa.float64()),
        ("tolerance", pa.float64()),
        ("forward_calls", pa.int32()),
        ("backward_calls", pa.int32()),
        ("recompute_calls", pa.int32()),
        ("dimension", pa.int32()),
        ("operations", pa.int32()),
        ("coordinates", pa.int32()),  # complex-step coordinates checked
        ("retained_bytes", pa.int64()),
        ("workload", pa.string()),
        ("sha256", pa.string()),  # e.g. of an application's test-score file
        ("detail", pa.string()),  # free-form diagnostics only; no query may depend on it
        # finite engines: the generator's write density (sparse | dense) and the measured mean
        # fraction of float cells each operation writes
        ("writes", pa.string()),
        ("write_fraction", pa.float64()),
        # the CIFAR application (cohorts/cifar.py): complete-encoder seconds (initialisation,
        # epochs, validation, checkpoint; probe excluded), the test scores read back from the
        # score file, the hash binding the probe to its encoder, and whether the archive's
        # official checksums were verified (false for generated archives)
        ("encoder_seconds", pa.float64()),
        ("test_accuracy", pa.float64()),
        ("test_mean_loss", pa.float64()),
        ("encoder_sha256", pa.string()),
        ("checksum_verified", pa.bool_()),
        # false for a quality-only seed (no allocator reads; left out of Table 9 and Figure 3C)
        ("observed", pa.bool_()),
        ("card_source", pa.string()),  # frozen | measured_in_process
    ],
    "timings": [
        ("method", pa.string()),
        ("precision", pa.string()),
        ("step", pa.int32()),  # 0-based; warm-ups and measured steps each count from 0
        ("warmup", pa.bool_()),
        ("step_ms", pa.float64()),  # wall time (synchronized on a GPU)
        # The timed thread's CPU time over the same step (stateaware.clocks, NOTE [ Two
        # clocks ]); on a GPU the host thread's, not device time.
        ("cpu_ms", pa.float64()),
        ("peak_allocated_bytes", pa.int64()),
        ("peak_reserved_bytes", pa.int64()),
        # Where the peak came from: cuda_allocator | torch_profiler | memtracker — never a
        # prediction (DESIGN.md, "Budgets are logical").
        ("peak_source", pa.string()),
        ("device", pa.string()),
        ("seed", pa.int64()),
        *_WORKLOAD,
    ],
    "policies": [
        ("method", pa.string()),
        ("planner", pa.string()),  # joint | eager_whole | agnostic | eager | whole | region
        ("feasible", pa.bool_()),
        ("policy", pa.list_(pa.string())),  # per segment: eager | whole | region
        ("predicted_peak_bytes", pa.int64()),
        ("predicted_ms", pa.float64()),
        ("min_peak_bytes", pa.int64()),  # the least achievable peak (set when infeasible)
        ("frontier_size", pa.int64()),
        ("truncated", pa.bool_()),
        ("card_digest", pa.string()),
        ("plan_digest", pa.string()),
        ("seed", pa.int64()),  # the application's training seed (null where one plan serves every seed)
        *_WORKLOAD,
    ],
    "profiles": [
        ("card_digest", pa.string()),
        ("segment", pa.int32()),
        ("option", pa.string()),  # eager | whole | region
        ("retained_bytes", pa.int64()),
        ("temp_bytes", pa.int64()),
        ("ms", pa.float64()),
        ("persistent_bytes", pa.int64()),
        ("provenance_json", pa.string()),
        *_WORKLOAD,
        # The preservation share of retained_bytes / temp_bytes / ms (planner/profile_card.py, NOTE
        # [ The state_* fields ]): what the state-agnostic control omits. 0 for eager.
        ("state_retained_bytes", pa.int64()),
        ("state_temp_bytes", pa.int64()),
        ("state_ms", pa.float64()),
    ],
    "epochs": [
        ("method", pa.string()),
        ("seed", pa.int64()),
        ("phase", pa.string()),  # encoder | probe
        ("epoch", pa.int32()),
        ("loss", pa.float64()),
        ("accuracy", pa.float64()),
        ("seconds", pa.float64()),  # wall seconds of the epoch
        # the process's CPU seconds over the epoch, every thread (time.process_time): the
        # application trains with several intra-op threads, so one thread's clock would not do
        ("cpu_seconds", pa.float64()),
        ("peak_allocated_bytes", pa.int64()),
        ("peak_reserved_bytes", pa.int64()),
        ("peak_source", pa.string()),
        ("checksum_verified", pa.bool_()),  # the CIFAR archive's official checksums checked
    ],
    "peaks": [
        ("method", pa.string()),
        ("seed", pa.int64()),
        ("event", pa.string()),  # before_reset | exit
        ("event_index", pa.int64()),
        ("peak_allocated_bytes", pa.int64()),
        ("peak_reserved_bytes", pa.int64()),
        ("peak_source", pa.string()),
        ("checksum_verified", pa.bool_()),  # the CIFAR archive's official checksums checked
    ],
    "artifacts": [
        ("method", pa.string()),
        ("seed", pa.int64()),
        ("name", pa.string()),
        ("path", pa.string()),  # relative to the results directory
        ("bytes", pa.int64()),
        ("sha256", pa.string()),
        ("checksum_verified", pa.bool_()),  # the CIFAR archive's official checksums checked
    ],
}

TABLES: dict[str, pa.Schema] = {
    name: pa.schema(IDENTITY + [pa.field(col, typ) for col, typ in cols]) for name, cols in _COLUMNS.items()
}


def schema_for(table: str) -> pa.Schema:
    """The Arrow schema of ``table``; a ``KeyError`` that lists the valid tables otherwise."""
    try:
        return TABLES[table]
    except KeyError:
        raise KeyError(f"unknown table {table!r}; valid tables are: {', '.join(TABLES)}") from None
