"""The record store at lab scale: what a query costs at 1,500 / 15,000 / 60,000 Parquet parts.

``python bench/bench_store.py`` (``--sizes 3,30`` for fewer runs, ``--reps 3`` for fewer
repetitions; not in CI). One small real run (``cohort=confirm44 processes=2``, two steps)
is the template: its partition folders are replicated into 50-process runs under new run
ids (501 parts each: ten per process and the run's manifest), every part rewritten with
its identity columns (``run_id``, ``process_index``, and the manifest's ``processes``)
matching its new place, same schema and footer metadata, page checksums on — so the part
check (``stateaware.records.check``) accepts every copy. Stores of 3 / 30 / 120 such runs
(1,503 / 15,030 / 60,120 parts) share the files by hard links; a store holding only the
first run is the one-run floor.

Each timing is a fresh process (what a user pays), the median of ``--reps`` repetitions,
and the commands of one size take turns repetition by repetition, so a busy neighbour on
this shared box slows them alike (the queries of every size first, then the reports of
every size with one floor: a report writes its run's ``comparisons`` part, which the next
query would check afresh):

- whole-store query: ``analysis sql`` of a per-method geometric mean of ``timings`` vs the
  floor, DuckDB reading the same files itself through
  ``read_parquet(glob, hive_partitioning=true)`` (``FLOOR``, no check, no views);
- one-run query: the same with ``--run-id`` vs the same query on the one-run store;
- ``report --run-id`` of one run vs the same report on the one-run store (the floor of a
  report is the report itself where no other run exists: its bootstrap and rendering are
  the same work whatever the store holds);
- when ``python -m stateaware.analysis compact --help`` exits 0, after every uncompacted
  timing: the whole-store query on compacted stores vs the floor over the compacted files
  (the largest store is compacted in place; each smaller one links its runs from it).

The part-check cache is warmed once per store before timing (every page of a part is read
once per version of the file: NOTE [ Where the cache lives, and what it trusts ]), so the
numbers are the steady state of a store that is queried again and again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
COHORT = "confirm44"
PROCESSES = 50
TEMPLATE_RUN = "template"

#: The query of every timing: one geometric mean of the measured step time per method.
QUERY = (
    "SELECT method, exp(avg(ln(step_ms))) AS geomean_ms FROM timings WHERE NOT warmup GROUP BY method ORDER BY method"
)

#: The floor: DuckDB alone over the same files, hive partitions read from the paths.
FLOOR = """\
import sys, duckdb
glob, query = sys.argv[1], sys.argv[2]
con = duckdb.connect()
quoted = "'" + glob.replace("'", "''") + "'"  # a view cannot take a prepared parameter
con.execute(
    f"CREATE VIEW timings AS SELECT * FROM read_parquet({quoted}, hive_partitioning = true, "
    "hive_types = {'cohort': 'VARCHAR', 'run_id': 'VARCHAR'})"
)
print(con.execute(query).fetchall())
"""

#: Runs a warm-up command checks: a store's runs in chunks of this many keep every CPU busy.
WARM_RUNS = 15

#: The targets, each a ratio to its floor (the cost a query may add over reading its rows alone).
TARGETS = {"one-run query": 1.5, "whole-store query": 1.5, "compacted query": 1.2, "report one run": 3.0}


def run_id(index: int) -> str:
    """The id of the ``index``-th replicated run."""
    return f"bench{index:04d}"


def make_template(work: Path, env: dict[str, str]) -> Path:
    """One small real run (2 processes, 2 steps) whose parts every replicated run copies."""
    out = work / "template"
    if (out / "runs").exists():
        return out
    args = [f"cohort={COHORT}", "launcher=inline", "processes=2", f"out={out}", f"run_id={TEMPLATE_RUN}"]
    args += ["cohort.params.steps=2", "cohort.params.warmup=1"]
    for _attempt in range(3):  # others editing this checkout mid-run make a process refuse (source drift)
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "stateaware", *args], capture_output=True, text=True, env=env)
        if done.returncode == 0:
            return out
    sys.exit(f"the template run failed three times:\n{done.stderr[-2000:]}")


def _with(table: pa.Table, name: str, value: object) -> pa.Table:
    """``table`` with every value of column ``name`` set to ``value`` (same type, same place)."""
    index = table.schema.get_field_index(name)
    field = table.schema.field(index)
    return table.set_column(index, field, pa.array([value] * table.num_rows, type=field.type))


def _rewritten(table: pa.Table, run: str, process: int | None) -> pa.Table:
    """The template part ``table`` as the part of ``run`` (and of ``process``, when it has one)."""
    metadata = dict(table.schema.metadata or {})
    table = _with(table, "run_id", run)
    metadata[b"stateaware.run_id"] = run.encode()
    if process is not None:
        table = _with(table, "process_index", process)
        metadata[b"stateaware.process_index"] = str(process).encode()
    else:  # the run's manifest: it declares the processes the run has
        table = _with(table, "processes", PROCESSES)
    return table.replace_schema_metadata(metadata)


def _write_run(args: tuple[str, str, int]) -> int:
    """Write run number ``index`` under ``pool`` from the template's parts; the parts written."""
    template, pool, index = Path(args[0]), Path(args[1]), args[2]
    run = run_id(index)
    written = 0
    for table_dir in sorted(p for p in template.iterdir() if p.is_dir() and not p.name.startswith(".")):
        source = table_dir / f"cohort={COHORT}" / f"run_id={TEMPLATE_RUN}"
        if not source.is_dir():
            continue
        target = pool / table_dir.name / f"cohort={COHORT}" / f"run_id={run}"
        target.mkdir(parents=True, exist_ok=True)
        for part in sorted(source.glob("*.parquet")):
            table = pq.read_table(part)
            if part.name.startswith("p-"):  # the manifest: one per run
                copies = [(None, part.name)]
            else:
                own = int(part.name[1:7])
                rest = part.name[7:]
                copies = [(i, f"p{i:06d}{rest}") for i in range(own, PROCESSES, 2)]
            for process, name in copies:
                pq.write_table(
                    _rewritten(table, run, process), target / name, compression="zstd", write_page_checksum=True
                )
                written += 1
    return written


def build_pool(template: Path, pool: Path, runs: int, workers: int) -> None:
    """Replicated runs ``0 .. runs-1`` under ``pool`` (those already there are kept)."""
    todo = [i for i in range(runs) if not (pool / "runs" / f"cohort={COHORT}" / f"run_id={run_id(i)}").exists()]
    if not todo:
        return
    started = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool_exec:
        parts = sum(pool_exec.map(_write_run, [(str(template), str(pool), i) for i in todo]))
    print(f"# wrote {parts:,} parts of {len(todo)} runs in {time.perf_counter() - started:.0f} s", flush=True)


def link_store(pool: Path, store: Path, runs: Sequence[int]) -> int:
    """A results folder holding ``runs`` of the pool, hard-linked (no byte copied); its part count.

    A store already holding exactly these runs (``--keep``) is kept as it is: linking changes
    the ctime of every linked file, so relinking would throw away every store's part checks.
    """
    marker = store / ".bench-runs"  # hidden: the views pass over it
    wanted = ",".join(map(str, runs))
    if marker.is_file() and marker.read_text().split(":")[0] == wanted:
        return int(marker.read_text().split(":")[1])
    if store.exists():
        shutil.rmtree(store)
    count = 0
    for table_dir in sorted(p for p in pool.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for index in runs:
            source = table_dir / f"cohort={COHORT}" / f"run_id={run_id(index)}"
            if not source.is_dir():
                continue
            target = store / table_dir.name / source.relative_to(table_dir)
            target.mkdir(parents=True)
            for part in source.iterdir():
                os.link(part, target / part.name)
                count += 1
    marker.write_text(f"{wanted}:{count}")
    return count


def warm_cache(stores: Sequence[Path], env: dict[str, str]) -> None:
    """Check every part of ``stores`` once (every page read), so the timings are the steady
    state: ``sql --run-id`` over chunks of at most ``WARM_RUNS`` runs, a worker per CPU,
    the chunks sharing one part-check cache file per run (nothing to merge)."""
    chunks = []
    for store in stores:
        runs = sorted(p.name.removeprefix("run_id=") for p in (store / "runs" / f"cohort={COHORT}").iterdir())
        for start in range(0, len(runs), WARM_RUNS):
            chosen = [a for r in runs[start : start + WARM_RUNS] for a in ("--run-id", r)]
            chunks.append(analysis("sql", "--results", str(store), "--format", "csv", *chosen, "SELECT 1"))
    chunks.sort(key=len, reverse=True)  # the longest first: the CPUs end together
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as warmers:
        list(warmers.map(lambda command: timed(command, env), chunks))


def compact_in_place(store: Path, env: dict[str, str]) -> None:
    """Compact every run of ``store``, in place, once its uncompacted timings are taken.

    In place, not a copy: the store's part checks are warm, so compaction reads each part
    once, where a copy would check every page again first (half the compaction's time). The
    originals' other names (the pool's, the other stores') stay: compaction unlinks this
    store's names only, though that changes the files' ctime, so a ``--keep`` run after this
    checks their pages again. The store's marker goes, so ``--keep`` relinks it.
    """
    started = time.perf_counter()
    (store / ".bench-runs").unlink(missing_ok=True)
    # Every CPU: the compaction is set-up here, not a measurement.
    timed(analysis("compact", "--results", str(store), "--jobs", str(len(os.sched_getaffinity(0)))), env)
    print(f"# compacted {store.name} in {time.perf_counter() - started:.0f} s", flush=True)


def _files(store: Path) -> int:
    """The Parquet files of ``store``'s runs (hidden folders, such as a quarantine, passed over)."""
    return sum(1 for _ in store.glob(f"*/cohort={COHORT}/run_id=*/*.parquet"))


def timed(command: Sequence[str], env: dict[str, str]) -> float:
    """Seconds one fresh process of ``command`` takes; exits naming it when it fails."""
    started = time.perf_counter()
    done = subprocess.run(list(command), capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return elapsed


def analysis(*args: str) -> list[str]:
    """The command line of ``python -m stateaware.analysis ARGS``."""
    return [sys.executable, "-m", "stateaware.analysis", *args]


def floor(glob: Path) -> list[str]:
    """The floor's command line: DuckDB alone over the files ``glob`` matches."""
    return [sys.executable, "-c", FLOOR, str(glob), QUERY]


def interleaved(commands: dict[str, list[str]], reps: int, env: dict[str, str]) -> dict[str, float]:
    """The median seconds of each command over ``reps`` repetitions, the commands taking turns."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(reps):
        for name, command in commands.items():
            times[name].append(timed(command, env))
    return {name: statistics.median(values) for name, values in times.items()}


def compact_available(env: dict[str, str]) -> bool:
    """Whether this checkout has ``python -m stateaware.analysis compact`` (its ``--help`` exits 0)."""
    done = subprocess.run(analysis("compact", "--help"), capture_output=True, env=env, cwd=ROOT)
    return done.returncode == 0


def _unused(path: Path) -> Path:
    """``path``, or ``path`` with the first ``-2``, ``-3``, ... that names no file: a second run
    of the day never overwrites the first's results."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


def main(argv: list[str] | None = None) -> int:
    """Build the stores, time every command against its floor, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="3,30,120", help="runs per store, comma-separated (501 parts each)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per command (median)")
    parser.add_argument(
        "--draws", type=int, default=200, help="bootstrap draws of the timed reports (the same work on both sides)"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "stateaware-bench-store")
    parser.add_argument(
        "--compact-max", type=int, default=None, help="compact only stores of at most this many runs (default: all)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the stores in --work (rebuilt only when missing)")
    today = time.strftime("%Y-%m-%d")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"the table's file (default: a new bench/results/cpu-store-{today}*.md)"
    )
    args = parser.parse_args(argv)
    args.out = args.out or _unused(ROOT / "bench" / "results" / f"cpu-store-{today}.md")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "STATEAWARE_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    # Byte-code as a user's machine keeps it: the floor's DuckDB was compiled when pip installed
    # it, and our checkout compiles once here, not again in every timed process (~25 ms each).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()

    template = make_template(work, env)
    pool = work / "pool"
    build_pool(template, pool, max(sizes), workers=min(2, os.cpu_count() or 1))
    one = work / "store-1"
    link_store(pool, one, [0])
    stores = {n: work / f"store-{n}" for n in sizes}
    counts = {n: link_store(pool, stores[n], range(n)) for n in sizes}
    time.sleep(2.1)  # past the part cache's settle time: the warm-up's answers are kept
    warm_cache([one, *stores.values()], env)
    compact = compact_available(env)
    print(f"# stores built and checked in {time.perf_counter() - started:.0f} s; compact: {compact}", flush=True)

    target = run_id(0)
    lines = [
        f"# The record store at lab scale (CPU, {time.strftime('%Y-%m-%d')})",
        "",
        f"`python bench/bench_store.py {' '.join(argv if argv is not None else sys.argv[1:])}`: {PROCESSES}-process "
        f"`{COHORT}` runs replicated from one real run, 501 parts each; medians of {args.reps} fresh "
        "processes, taking turns; the part-check cache warm. Floors: DuckDB alone "
        "(`read_parquet(glob, hive_partitioning=true)`) over the same files; for `--run-id`, the same "
        "command on a store holding only that run.",
        "",
        f"Query: `{QUERY}`.",
        "",
        "| parts | measurement | ours s | floor s | ratio | target |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)

    def table_rows(parts: int, rows: list[tuple[str, float, float]]) -> None:
        for name, ours, base in rows:
            goal = next((f"≤ {v}×" for k, v in TARGETS.items() if name.split(" (")[0] == k), "")
            line = f"| {parts:,} | {name} | {ours:.2f} | {base:.2f} | {ours / base:.2f}× | {goal} |"
            lines.append(line)
            print(line, flush=True)

    # The queries of every size first, then the reports: a report writes its run's `comparisons`
    # part into the store, and a query that finds a part written a moment ago checks it
    # through Arrow (NOTE [ No Arrow until it reads ]): that would time the report's side effect.
    for n in sizes:
        size_started = time.perf_counter()
        store = stores[n]
        sql = ["sql", "--results", str(store), "--format", "csv", QUERY]
        medians = interleaved(
            {
                "whole-store query": analysis(*sql),
                "whole-store floor": floor(store / "timings" / "*" / "*" / "*.parquet"),
                "one-run query": analysis(*sql[:-1], "--run-id", target, QUERY),
                "one-run floor": analysis("sql", "--results", str(one), "--format", "csv", "--run-id", target, QUERY),
                "duckdb one-run glob": floor(store / "timings" / "*" / f"run_id={target}" / "*.parquet"),
            },
            args.reps,
            env,
        )
        table_rows(
            counts[n],
            [
                ("whole-store query", medians["whole-store query"], medians["whole-store floor"]),
                ("one-run query", medians["one-run query"], medians["one-run floor"]),
                ("one-run query vs DuckDB's one-run glob", medians["one-run query"], medians["duckdb one-run glob"]),
            ],
        )
        print(f"# {counts[n]:,} parts: queries timed in {time.perf_counter() - size_started:.0f} s", flush=True)
    # Every size's report takes turns with one floor (the same command on the one-run store,
    # whatever the size): a third fewer reports than a floor per size.
    reports_started = time.perf_counter()
    report = ["report", "--run-id", target, "--out", str(work / "report-out"), "--draws", str(args.draws), "--results"]
    medians = interleaved(
        {"floor": analysis(*report, str(one)), **{str(n): analysis(*report, str(stores[n])) for n in sizes}},
        args.reps,
        env,
    )
    for n in sizes:
        table_rows(counts[n], [("report one run", medians[str(n)], medians["floor"])])
    print(f"# reports timed in {time.perf_counter() - reports_started:.0f} s", flush=True)

    compactable = [n for n in sizes if args.compact_max is None or n <= args.compact_max]
    if compact and compactable:
        largest = stores[max(compactable)]
        compact_in_place(largest, env)
        compacted_stores = {n: largest if stores[n] == largest else work / f"compacted-{n}" for n in compactable}
        files = {
            n: link_store(largest, compacted, range(n)) if compacted != largest else _files(largest)
            for n, compacted in compacted_stores.items()
        }
        time.sleep(2.1)  # past the settle time, so the warm-ups' answers are kept
        for n, compacted in compacted_stores.items():
            timed(analysis("sql", "--results", str(compacted), "--format", "csv", QUERY), env)
            after = interleaved(
                {
                    "compacted": analysis("sql", "--results", str(compacted), "--format", "csv", QUERY),
                    "floor": floor(compacted / "timings" / "**" / "*.parquet"),
                },
                args.reps,
                env,
            )
            table_rows(counts[n], [(f"compacted query ({files[n]:,} files)", after["compacted"], after["floor"])])
    notes = []
    if not compact:
        notes += ["", "`python -m stateaware.analysis compact` was not in this checkout: no compacted rows."]
    elif args.compact_max is not None:
        notes += ["", f"Compacted rows only for stores of at most {args.compact_max} runs (`--compact-max`)."]
    notes += ["", f"Whole bench: {time.perf_counter() - started:.0f} s on {os.cpu_count()} CPUs."]
    lines += notes
    print("\n".join(notes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
