"""Malformed input to every command line ends in one clear line and a non-zero exit, never a traceback.

A table of cases across ``python -m stateaware`` (Hydra overrides, the process bound, each
cohort kind's declared params), ``python -m stateaware.analysis`` (paths, queries, flags)
and ``python -m stateaware.plan`` (cards, budgets, plot paths). Every case runs as a
fresh interpreter, as a user types it; the module runs them all at once, a few at a
time, and each test asserts one case: exit status, exactly one non-empty stderr line that
names the field or file, and no traceback. ``python tests/contracts/test_bad_input.py`` prints the
summary: cases tried, tracebacks, wrongly accepted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CARD = TESTS / "data" / "cards" / "handwritten_large_sparse.json"

S = ("-m", "stateaware")
A = ("-m", "stateaware.analysis")
P = ("-m", "stateaware.plan")


@dataclass(frozen=True)
class Case:
    """One malformed input: the arguments (``{R}``-style placeholders), what stderr must name."""

    name: str
    argv: tuple[str, ...]
    names: tuple[str, ...]  # substrings the one stderr line must contain
    status: int = 2
    stdin: bytes = b""


def _launch(name: str, *overrides: str, names: tuple[str, ...], dry: bool = True) -> Case:
    extra = ("dry_run=true",) if dry else ()
    out = () if any(o.startswith(("out=", "~out")) for o in overrides) else ("out={T}/out",)
    return Case(name, (*S, *overrides, *out, *extra), names)


CASES = [
    # --- python -m stateaware: Hydra's own parse and composition errors
    _launch("override without a key", "cohort=demo", "=5", names=("=5", "key=value")),
    _launch("unknown cohort", "cohort=nope", names=("cohort/nope", "demo, derivative")),
    _launch("unknown hardware", "cohort=demo", "hardware=xyz", names=("hardware/xyz", "auto, cpu, h100")),
    _launch("unknown launcher", "cohort=demo", "launcher=xyz", names=("launcher/xyz", "inline, local, slurm")),
    _launch("empty launcher", "cohort=demo", "launcher=", names=("launcher/", "inline, local, slurm")),
    _launch("unknown key", "cohort=demo", "foo=1", names=("foo",)),
    _launch("unknown nested key", "cohort=demo", "cohort.nosuch=1", names=("cohort.nosuch",)),
    _launch("processes not a number", "cohort=demo", "processes=abc", names=("processes", "'abc'")),
    _launch("processes a fraction", "cohort=demo", "processes=1.5", names=("processes", "1.5")),
    _launch("processes empty", "cohort=demo", "processes=", names=("processes",)),
    _launch("dry_run not a bool", "cohort=demo", "dry_run=maybe", names=("dry_run", "maybe"), dry=False),
    _launch("wait not a bool", "cohort=demo", "wait=maybe", names=("wait", "maybe")),
    _launch("max_parallel not a number", "cohort=demo", "launcher.max_parallel=x", names=("launcher.max_parallel",)),
    _launch("scale not a number", "cohort=demo", "hardware.scale=abc", names=("hardware.scale",)),
    _launch("unbalanced list", "cohort=demo", "cohort.params.size=[1", names=("[1", "key=value")),
    _launch("cohort twice", "cohort=demo", "+cohort=demo", names=("cohort",)),
    _launch("unknown flag", "cohort=demo", "--bogus", names=("--bogus",)),
    _launch("flag without its value", "cohort=demo", "--cfg", names=("--cfg",), dry=False),
    # --- python -m stateaware: our own checks, before anything launches
    _launch("no cohort", names=("cohort=NAME", "demo")),
    _launch("zero processes", "cohort=demo", "processes=0", names=("processes=0", "[1, 100,000]")),
    _launch("negative processes", "cohort=demo", "processes=-4", names=("processes=-4", "[1, 100,000]")),
    _launch("absurd processes", "cohort=demo", "processes=1000000000", names=("processes=1000000000", "100,000")),
    _launch("max_parallel zero", "cohort=demo", "launcher.max_parallel=0", names=("launcher.max_parallel=0",)),
    _launch("timeout negative", "cohort=demo", "launcher.timeout_min=-1", names=("launcher.timeout_min=-1",)),
    _launch("wait false locally", "cohort=demo", "wait=false", names=("wait=False", "slurm")),
    _launch("empty out", "cohort=demo", "out=", names=("out=''", "directory")),
    _launch("out under a file", "cohort=demo", "out={F}/sub", names=("out=", "writable")),
    _launch("out removed", "cohort=demo", "~out", names=("out",)),
    _launch("unknown kind", "cohort=demo", "cohort.kind=no_such_kind", names=("no_such_kind",)),
    _launch("negative budget", "cohort=demo", "+cohort.params.budget_gib=-1", names=("budget_gib=-1",)),
    # --- python -m stateaware: each kind's declared params (stateaware.launch.params)
    _launch("demo size negative", "cohort=demo", "cohort.params.size=-3", names=("params.size=-3", "integer")),
    _launch("demo size fraction", "cohort=demo", "cohort.params.size=2.5", names=("params.size=2.5", "integer")),
    _launch("demo size text", "cohort=demo", "cohort.params.size=abc", names=("params.size='abc'", "integer")),
    _launch("demo size absurd", "cohort=demo", "cohort.params.size=100000000", names=("params.size", "4096")),
    _launch("demo steps zero", "cohort=demo", "cohort.params.steps=0", names=("params.steps=0",)),
    _launch("demo warmup negative", "cohort=demo", "cohort.params.warmup=-1", names=("params.warmup=-1",)),
    _launch("demo size missing", "cohort=demo", "~cohort.params.size", names=("params.size", "missing")),
    _launch("demo unknown param", "cohort=demo", "+cohort.params.zz=1", names=("params.zz", "size, warmup, steps")),
    _launch("noop takes no params", "cohort=noop", "+cohort.params.x=1", names=("params.x",)),
    _launch(
        "timing unknown method",
        "cohort=calibration",
        "cohort.params.methods=[eager,bogus]",
        names=("params.methods", "joint"),
    ),
    _launch("timing empty methods", "cohort=calibration", "cohort.params.methods=[]", names=("params.methods",)),
    _launch(
        "timing placement",
        "cohort=calibration",
        "cohort.params.placement=sideways",
        names=("params.placement='sideways'", "relative, scaled"),
    ),
    _launch(
        "timing card mode",
        "cohort=calibration",
        "cohort.params.card=maybe",
        names=("params.card='maybe'", "frozen, auto, measure"),
    ),
    _launch(
        "timing grid",
        "cohort=calibration",
        "cohort.params.grid=square",
        names=("params.grid='square'", "calibration, three_workload"),
    ),
    _launch("timing steps text", "cohort=confirm44", "cohort.params.steps=many", names=("params.steps='many'",)),
    _launch("timing shuffle text", "cohort=confirm44", "+cohort.params.shuffle=perhaps", names=("params.shuffle",)),
    _launch(
        "semantic backend",
        "cohort=semantic",
        "cohort.params.backends=[tensorflow]",
        names=("params.backends", "torch, jax"),
    ),
    _launch("semantic seed keys", "cohort=semantic", "cohort.params.seed_keys=0", names=("params.seed_keys=0",)),
    _launch("bytes programs", "cohort=bytes", "cohort.params.programs=-1", names=("params.programs=-1",)),
    _launch("bytes dimensions", "cohort=bytes", "cohort.params.dimensions=[0,4]", names=("params.dimensions",)),
    _launch("derivative operations", "cohort=derivative", "cohort.params.operations=[a]", names=("params.operations",)),
    _launch(
        "engines complex programs",
        "cohort=engines",
        "cohort.params.complex_step_programs=-2",
        names=("params.complex_step_programs=-2",),
    ),
    _launch("joint_alias programs", "cohort=joint_alias", "cohort.params.programs=x", names=("params.programs='x'",)),
    _launch("cifar seeds", "cohort=cifar", "cohort.params.seeds=[a]", names=("params.seeds",)),
    # --- python -m stateaware.analysis
    Case(
        "sql missing results", (*A, "sql", "--results", "{T}/missing", "SELECT 1"), ("--results", "no such directory")
    ),
    Case("sql results a file", (*A, "sql", "--results", "{F}", "SELECT 1"), ("--results", "a file")),
    Case("sql results empty", (*A, "sql", "--results", "{E}", "SELECT 1"), ("--results", "no record tables")),
    Case("sql default results missing", (*A, "sql", "SELECT 1"), ("--results results", "no such directory")),
    Case("sql missing file", (*A, "sql", "--results", "{R}", "--file", "{T}/nope.sql"), ("--file", "nope.sql")),
    Case("sql file a directory", (*A, "sql", "--results", "{R}", "--file", "{E}"), ("--file", "directory")),
    Case("sql file not UTF-8", (*A, "sql", "--results", "{R}", "--file", "{B}"), ("--file", "not UTF-8")),
    Case(
        "sql stdin not UTF-8",
        (*A, "sql", "--results", "{R}", "-"),
        ("standard input", "not UTF-8"),
        stdin=b"SELECT '\xff\xfe'",
    ),
    Case("sql empty query", (*A, "sql", "--results", "{R}", " "), ("no SQL statement",)),
    Case("sql syntax", (*A, "sql", "--results", "{R}", "SELEC 1"), ("syntax error",)),
    Case("sql unknown column", (*A, "sql", "--results", "{R}", "SELECT nope FROM timings"), ("nope",)),
    Case("sql unknown view", (*A, "sql", "--results", "{R}", "SELECT * FROM nope"), ("nope",)),
    Case("sql write", (*A, "sql", "--results", "{R}", "DELETE FROM runs"), ("DELETE", "read-only")),
    Case("sql format", (*A, "sql", "--results", "{R}", "--format", "xml", "SELECT 1"), ("--format", "csv")),
    Case("sql unknown flag", (*A, "sql", "--bogus"), ("--bogus",)),
    Case("unknown command", (*A, "nosuch"), ("nosuch", "sql")),
    Case("no command", (*A,), ("required",)),
    Case("views missing results", (*A, "views", "--results", "{T}/missing"), ("--results", "no such directory")),
    Case("status results a file", (*A, "status", "--results", "{F}"), ("--results", "a file")),
    Case("status format", (*A, "status", "--results", "{R}", "--format", "xml"), ("--format",)),
    Case("report results empty", (*A, "report", "--results", "{E}"), ("--results", "no record tables")),
    Case("report draws zero", (*A, "report", "--results", "{R}", "--draws", "0"), ("--draws", "[1, 10,000,000]")),
    Case("report draws text", (*A, "report", "--results", "{R}", "--draws", "x"), ("--draws",)),
    Case("report unknown run", (*A, "report", "--results", "{R}", "--run-id", "nope"), ("--run-id", "nope")),
    Case("report out a file", (*A, "report", "--results", "{R}", "--out", "{F}"), ("--out", "a file")),
    Case("compare unknown runs", (*A, "compare", "--results", "{R}", "nope1", "nope2"), ("nope1",)),
    Case("compare missing results", (*A, "compare", "--results", "{T}/missing", "a", "b"), ("--results",)),
    # --- python -m stateaware.plan
    Case("card random bytes", (*P, "{B}", "--budget", "1GiB"), ("rand.bin", "not UTF-8")),
    Case("card truncated JSON", (*P, "{T}/trunc.json", "--budget", "1GiB"), ("trunc.json", "not valid JSON")),
    Case("card zero bytes", (*P, "{T}/zero.json", "--budget", "1GiB"), ("zero.json", "not valid JSON")),
    Case("card a list", (*P, "{T}/list.json", "--budget", "1GiB"), ("list.json", "JSON object")),
    Case("card missing fields", (*P, "{T}/object.json", "--budget", "1GiB"), ("object.json", "missing field")),
    Case("card missing", (*P, "{T}/nope.json", "--budget", "1GiB"), ("nope.json", "No such file")),
    Case("card a directory", (*P, "{E}", "--budget", "1GiB"), ("empty", "directory")),
    Case("budget missing", (*P, str(CARD)), ("--budget",)),
    Case("budget text", (*P, str(CARD), "--budget", "abc"), ("--budget", "'abc'")),
    Case("budget unit", (*P, str(CARD), "--budget", "5 parsecs"), ("--budget",)),
    Case("planner unknown", (*P, str(CARD), "--budget", "1GiB", "--planner", "x"), ("--planner", "joint")),
    Case("frontier cap too small", (*P, str(CARD), "--budget", "1GiB", "--frontier-cap", "1"), ("--frontier-cap",)),
    Case(
        "plot in a missing directory",
        (*P, str(CARD), "--budget", "1GiB", "--plot", "{T}/nodir/x.png"),
        ("--plot", "nodir"),
    ),
    Case("plot a directory", (*P, str(CARD), "--budget", "1GiB", "--plot", "{E}"), ("--plot", "suffix")),
    Case("plot unknown format", (*P, str(CARD), "--budget", "1GiB", "--plot", "{T}/x.txt"), ("--plot", ".png")),
]


def _fixtures(root: Path) -> dict[str, str]:
    """The files and directories the placeholders name, made under ``root``."""
    from stateaware.records.writer import Identity, RecordWriter

    results = root / "records"  # not "results": the default --results must stay missing in this cwd
    for index in range(2):
        writer = RecordWriter(results, Identity("r1", "demo", index, "h" * 64, "cpu", 1.0))
        writer.write("runs", [{"processes": 2, "launcher": "inline"}], part="manifest")
        writer.write("processes", [{"status": "completed", "attempt": 1}], part="a001")
        writer.write("timings", {"method": ["m"] * 2, "step": [0, 1], "step_ms": [1.0, 2.0]})
    (root / "empty").mkdir()
    (root / "plain").write_text("not a directory\n")
    (root / "rand.bin").write_bytes(bytes(range(128, 256)) * 4)
    (root / "trunc.json").write_text('{"segments": [')
    (root / "zero.json").write_bytes(b"")
    (root / "list.json").write_text("[]")
    (root / "object.json").write_text("{}")
    return {
        "R": str(results),
        "E": str(root / "empty"),
        "F": str(root / "plain"),
        "B": str(root / "rand.bin"),
        "T": str(root),
    }


@dataclass(frozen=True)
class Outcome:
    status: int
    stderr: str
    stdout: str


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STATEAWARE_RESULTS", "HYDRA_FULL_ERROR")}
    env["PYTHONWARNINGS"] = "ignore"  # a library's deprecation notice is not our error line
    return env


def run_case(case: Case, paths: dict[str, str]) -> Outcome:
    argv = [a.format(**paths) for a in case.argv]
    done = subprocess.run(
        [sys.executable, *argv], input=case.stdin, capture_output=True, cwd=paths["T"], env=_env(), timeout=300
    )
    return Outcome(done.returncode, done.stderr.decode(errors="replace"), done.stdout.decode(errors="replace"))


def run_all(root: Path) -> dict[str, Outcome]:
    paths = _fixtures(root)
    # A few interpreters at a time: each case is a cold start, mostly waiting on imports.
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda c: run_case(c, paths), CASES))
    return {case.name: outcome for case, outcome in zip(CASES, outcomes, strict=True)}


def problems_of(case: Case, outcome: Outcome) -> list[str]:
    """What is wrong with how ``case`` ended (empty when it ended as it must)."""
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    problems = []
    if "Traceback" in outcome.stderr:
        problems.append("traceback")
    if outcome.status == 0:
        problems.append("wrongly accepted (exit 0)")
    elif outcome.status != case.status:
        problems.append(f"exit {outcome.status}, expected {case.status}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, expected 1")
    missing = [n for n in case.names if not any(n in line for line in lines[:1])]
    if missing:
        problems.append(f"the line does not name {missing}")
    return problems


def summary(outcomes: dict[str, Outcome]) -> str:
    tracebacks = sum("Traceback" in o.stderr for o in outcomes.values())
    accepted = sum(o.status == 0 for o in outcomes.values())
    failing = sum(bool(problems_of(c, outcomes[c.name])) for c in CASES)
    return (
        f"bad input: {len(CASES)} cases tried, {tracebacks} tracebacks, {accepted} wrongly accepted, "
        f"{failing} not ending in one line naming the field or file"
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    return run_all(tmp_path_factory.mktemp("bad-input"))


def test_the_table_is_large_and_every_case_is_distinct():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
    assert len({c.argv for c in CASES}) == len(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input_ends_in_one_line_naming_it(outcomes, case):
    outcome = outcomes[case.name]
    assert problems_of(case, outcome) == [], outcome.stderr


def test_summary_counts_no_tracebacks_and_nothing_accepted(outcomes, capsys):
    line = summary(outcomes)
    with capsys.disabled():
        print("\n" + line)
    assert line.endswith("0 tracebacks, 0 wrongly accepted, 0 not ending in one line naming the field or file")


# --- Ctrl-C and a closed pipe ------------------------------------------------------------

INTERRUPTED = "interrupted; re-run the same command to resume\n"


def _processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _start_as_a_terminal_would(argv: list[str], **popen) -> subprocess.Popen:
    """Start ``argv`` with SIGINT at its default, as a terminal's foreground job has it.

    A test run started in the background (``make test &``, ``nohup``) ignores SIGINT, and
    ``exec`` keeps an ignored signal ignored — so without this a child would ignore the
    Ctrl-C these tests send, as Python rightly does when started that way. A handler, unlike
    ``SIG_IGN``, is reset to the default by ``exec``.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, *argv], env=_env(), **popen)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ended(process: subprocess.Popen, *, within: float) -> str:
    """Wait for ``process`` and return its stderr; past ``within`` seconds kill it, then raise."""
    try:
        return process.communicate(timeout=within)[1].decode(errors="replace")
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def test_ctrl_c_during_a_launch_stops_every_worker_and_says_how_to_resume(tmp_path):
    out = tmp_path / "out"
    # Its own session, so the signal goes to the whole group, as a terminal's Ctrl-C does.
    process = _start_as_a_terminal_would(
        [
            *S,
            "cohort=demo",
            "processes=8",
            "launcher.max_parallel=1",
            f"out={out}",
            "cohort.params.size=2048",
            "cohort.params.steps=10000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / ".submitit").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        time.sleep(2)  # the first worker is running
        os.killpg(process.pid, signal.SIGINT)
        text = _ended(process, within=120)
        time.sleep(1)
        left = _processes_naming(str(out))
    finally:  # never leave a busy process behind, even when the wait or an assertion fails
        for pid in _processes_naming(str(out)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert process.returncode == 130 and text.endswith("\n" + INTERRUPTED), text  # after the progress bar
    assert "Traceback" not in text
    assert left == []


def _interrupt_reading(argv: list[str], fifo: Path, cwd: Path) -> tuple[int, str]:
    """Run ``argv`` until it blocks reading ``fifo`` (which never gets data), then send SIGINT."""
    process = _start_as_a_terminal_would(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd
    )
    deadline = time.monotonic() + 120
    writer = None
    while writer is None and time.monotonic() < deadline and process.poll() is None:
        try:  # succeeds only once the command has opened the FIFO for reading: it is past start-up
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    try:
        err = _ended(process, within=120)
    finally:
        if writer is not None:
            os.close(writer)
    return process.returncode, err


def test_ctrl_c_during_a_query(tmp_path):
    # (A card that is a FIFO no longer blocks the planner: it is refused unread, in one line,
    # which tests/planner/test_card_limits.py checks.)
    paths = _fixtures(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _interrupt_reading([*A, "sql", "--results", paths["R"], "--file", str(fifo)], fifo, tmp_path) == (
        130,
        INTERRUPTED,
    )


def test_a_closed_pipe_ends_quietly(tmp_path):
    paths = _fixtures(tmp_path)
    query = "SELECT range AS n, repeat('x', 100) AS pad FROM range(200000)"
    done = subprocess.run(
        f'{sys.executable} -m stateaware.analysis sql --results {paths["R"]} --format csv "{query}" | head -1',
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert done.stdout == "n,pad\n"
    assert done.stderr == ""


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        result = run_all(Path(scratch))
    for case in CASES:
        found = problems_of(case, result[case.name])
        if found:
            print(f"FAIL {case.name}: {'; '.join(found)}: {result[case.name].stderr.strip()[:300]}")
    print(summary(result))
