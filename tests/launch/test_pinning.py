"""launcher.cpus: validated at plan time, applied in the worker, recorded with the process context;
and every process row carries its system context."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateaware.cli import run
from stateaware.launch.context import format_cpus

ALLOWED = sorted(os.sched_getaffinity(0))


def test_a_process_records_both_clocks_and_its_system_context(compose, tmp_path, sql):
    # A process long enough (~0.2 s of CPU) for /proc/stat's tick counters to move: the
    # default 64-wide demo ends in ~40 ms, a window in which the counters may not move at all
    # (idle CPUs' ticks are accounted late), and the other processes' share then reads None.
    cfg = compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path}", "cohort.params.size=768")
    assert run(cfg, progress=False) == 0
    assert sql(tmp_path, "SELECT count(*), count(cpu_ms), bool_and(cpu_ms >= 0) FROM timings") == [(7, 7, True)]
    ((before, after, cpus, affinity, share, own, model),) = sql(
        tmp_path,
        "SELECT load_before, load_after, logical_cpus, affinity, other_cpu_share, process_cpu_s, cpu_model "
        "FROM processes",
    )
    assert before >= 0 and after >= 0 and cpus == os.cpu_count() and affinity == format_cpus(ALLOWED)
    assert 0.0 <= share <= 1.0 and own >= 0 and model


@pytest.mark.parametrize("launcher", ["inline", "local"])
def test_processes_are_pinned_to_launcher_cpus_and_say_so(compose, tmp_path, sql, launcher):
    cpu = ALLOWED[-1]
    cfg = compose(
        "cohort=demo",
        "processes=2",
        f"launcher={launcher}",
        f"out={tmp_path}",
        f"launcher.cpus='{cpu}'",
        "launcher.max_parallel=1",
    )
    assert run(cfg, progress=False) == 0
    assert sql(tmp_path, "SELECT process_index, affinity FROM processes ORDER BY 1") == [(0, str(cpu)), (1, str(cpu))]
    assert sorted(os.sched_getaffinity(0)) == ALLOWED  # an inline run gives the launcher its CPUs back


def test_cpus_outside_the_affinity_are_refused_naming_the_allowed_ones(compose, tmp_path, capsys):
    cfg = compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path}", "launcher.cpus=4096")
    assert run(cfg, progress=False) == 2
    err = capsys.readouterr().err
    assert (
        f"invalid launcher.cpus=4096: CPU(s) 4096 are not available to this process; allowed CPUs are "
        f"{format_cpus(ALLOWED)}" in err
    )
    assert not (tmp_path / "processes").exists()


@pytest.mark.parametrize(
    "value, message",
    [
        ("'3-1'", "not a non-negative, increasing range"),
        ("'one'", "'one' is not a CPU number"),
    ],
)
def test_malformed_cpu_sets_are_refused(compose, tmp_path, capsys, value, message):
    assert (
        run(compose("cohort=demo", "launcher=inline", f"out={tmp_path}", f"launcher.cpus={value}"), progress=False) == 2
    )
    err = capsys.readouterr().err
    assert message in err and f"allowed CPUs are {format_cpus(ALLOWED)}" in err


def test_slurm_binds_its_own_cpus(compose, tmp_path, capsys):
    assert run(compose("cohort=demo", "launcher=slurm", f"out={tmp_path}", "launcher.cpus=0"), progress=False) == 2
    assert "invalid launcher.cpus=0: allowed values are null with launcher=slurm" in capsys.readouterr().err


def test_a_list_of_cpus_is_accepted(compose, tmp_path, sql):
    cfg = compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path}", f"launcher.cpus=[{ALLOWED[0]}]")
    assert run(cfg, progress=False) == 0
    assert sql(tmp_path, "SELECT affinity FROM processes") == [(str(ALLOWED[0]),)]


@pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs to pin two processes apart")
def test_processes_running_side_by_side_are_pinned_to_cpus_of_their_own(compose, tmp_path, sql):
    """max_parallel=2 over two CPUs: each process gets one of them, and the two the launcher
    starts together (processes 0 and 1, submitted before either can end) get different ones."""
    two = ALLOWED[:2]
    cfg = compose(
        "cohort=demo",
        "processes=4",
        "launcher=local",
        f"out={tmp_path}",
        f"launcher.cpus=[{two[0]},{two[1]}]",
        "launcher.max_parallel=2",
    )
    assert run(cfg, progress=False) == 0
    rows = sql(tmp_path, "SELECT process_index, affinity, started_at, finished_at FROM processes ORDER BY 1")
    assert len(rows) == 4 and {affinity for _, affinity, _, _ in rows} <= {str(two[0]), str(two[1])}
    assert rows[0][1] != rows[1][1]
    for a in rows:
        for b in rows:
            if a[0] < b[0] and a[2] < b[3] and b[2] < a[3]:  # ran at the same time
                assert a[1] != b[1]


def test_a_timing_cohort_refuses_more_processes_at_once_than_cpus(compose, tmp_path, capsys):
    cfg = compose(
        "cohort=demo",
        "cohort.timing=true",
        "launcher=local",
        f"out={tmp_path}",
        f"launcher.cpus='{ALLOWED[0]}'",
        "launcher.max_parallel=2",
    )
    assert run(cfg, progress=False) == 2
    assert (
        "invalid launcher.max_parallel=2: allowed values are at most 1 (the CPUs of launcher.cpus) for a timing cohort"
        in capsys.readouterr().err
    )


@given(
    cpus=st.lists(st.integers(0, 255), min_size=1, max_size=64, unique=True),
    parallel=st.integers(1, 80),
)
def test_cpu_slots_cut_the_cpus_into_disjoint_groups_in_order(cpus, parallel):
    import dataclasses

    from stateaware.run_spec import LauncherSpec

    spec = LauncherSpec(**{f.name: None for f in dataclasses.fields(LauncherSpec)})
    spec = dataclasses.replace(spec, cpus=tuple(sorted(cpus)), max_parallel=parallel)
    slots = spec.cpu_slots(timing=True)
    assert len(slots) == min(parallel, len(cpus))
    assert [c for slot in slots for c in slot] == sorted(cpus)  # every CPU once, in order
    assert max(map(len, slots)) - min(map(len, slots)) <= 1 and min(map(len, slots)) >= 1
    assert dataclasses.replace(spec, cpus=None).cpu_slots(timing=True) is None
