"""Read-only SQL over a results directory, printed as a table, CSV or JSON, within limits.

Read-only by construction: the statements run on the locked connection of
``stateaware.analysis.store.views.connect`` (NOTE [ Read-only by construction ] there), which
can read the views and nothing else — no file written or read, no extension installed or
loaded, no setting changed — whatever a statement's spelling (``EXPLAIN ANALYZE COPY …
TO``, ``read_text('/etc/passwd')``, ``SET lock_configuration = false``, ...).

NOTE [ Only reads run ]
The lock keeps the disk safe but not the connection's own catalog: ``CREATE OR REPLACE
VIEW records AS …`` would change what the next statement of the same input reads. So
before anything runs, every statement is classified by DuckDB's own parser
(``read_statements``) and the whole input is refused, naming the statement, unless
each one is a read:

- a ``SELECT`` statement (``WITH … SELECT``, ``VALUES``, ``FROM t``, ``TABLE t``,
  ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``, ``PIVOT … IN (…)``: DuckDB parses them all as
  ``SELECT``) whose parse tree (``json_serialize_sql``) holds only query nodes of a read
  (``_READ_NODES``): a data-modifying ``WITH`` (``WITH a AS (INSERT … RETURNING *)
  SELECT …``, ``UPDATE``, ``DELETE``, ``COPY``) is refused, and so is a call of a function
  that runs SQL text no check sees first (``_RUNS_SQL_TEXT``: ``query('…')``,
  ``json_execute_serialized_sql``);
- a plain ``EXPLAIN`` (options such as ``(FORMAT json)`` allowed) of such a statement.
  ``EXPLAIN ANALYZE`` runs its statement and is refused outright, in every spelling
  (``ANALYSE``, ``(ANALYZE)``, ``(FORMAT json, ANALYZE true)``).

Anything else — ``CREATE``, ``DROP``, ``INSERT``, ``SET`` (``SET VARIABLE`` too), ``COPY``,
``ATTACH``, ``PRAGMA``, ``CALL``, ``PREPARE``, a ``PIVOT`` without ``IN`` (DuckDB runs it
as several statements, creating a type first) — is refused by kind. The input is
classified whole first, so a refusal means no statement of it ran.

NOTE [ Limits of one invocation ]
A query over the views can still ask for more than a machine has. ``run`` streams
each result (``fetchmany`` in chunks of ``CHUNK_ROWS``), so CSV and JSON output of any
size takes bounded memory; the table format prints at most ``max_rows`` rows (it aligns
columns, so it holds what it shows) and says how many it left out, counting up to
``COUNT_CAP`` more rows and saying "over" beyond. A ``threading.Timer`` calls the
connection's ``interrupt()`` after ``Limits.timeout_s`` (a runaway ``WITH RECURSIVE``, a huge
cross join), and DuckDB's ``memory_limit`` bounds what it holds, with ``temp_directory``
empty so that a query over the limit ends instead of spilling into ``./.tmp`` (a write in
the working directory, which external access being off does not prevent); both are set
when the database is created, before ``connect`` locks it. Either limit ends in ``LimitError``, one line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import duckdb
from stateaware.analysis.store.views import PARTS_PREFIX, Snapshot, connect

from stateaware.records.columns import RESULT_COLUMNS, TABLE_COLUMNS

__all__ = [
    "CHUNK_ROWS",
    "COUNT_CAP",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "FORMATS",
    "LimitError",
    "Limits",
    "ReadOnlyError",
    "columns_read",
    "format_result",
    "query",
    "read_statements",
    "run",
]


FORMATS = ("table", "csv", "json")

#: Rows the table format prints at most (``--max-rows``): more than a terminal shows, few
#: enough that holding them to align the columns costs little.
DEFAULT_MAX_ROWS = 10_000

#: Seconds a whole invocation may run (``--timeout``): every analysis query of the docs takes
#: well under a minute on a full results directory; five minutes ends a runaway one.
DEFAULT_TIMEOUT_S = 300.0

#: DuckDB's memory limit (``--memory-limit``), any size DuckDB reads ("4GB", "512MiB", "50%").
#: A results directory's tables are a few hundred MB of Parquet at most; 2 GB holds any join
#: or sort over them, fits beside other users on a laptop or a login node, and makes a
#: runaway join end in seconds instead of swapping (DuckDB's own default is 80 % of RAM).
DEFAULT_MEMORY_LIMIT = "2GB"

#: Rows fetched at a time while streaming: large enough that DuckDB's per-call cost vanishes,
#: small enough (a few MB of Python objects) that memory stays flat whatever the result.
CHUNK_ROWS = 10_000

#: Rows the table format counts beyond those it shows before saying "over": exact for any
#: result a table is meant for, and a second at most for one that is not.
COUNT_CAP = 1_000_000

_READ_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

#: The parse tree's query nodes that read; another (``INSERT_QUERY_NODE`` of a data-modifying
#: WITH, ``COPY_QUERY_NODE``, a kind a later DuckDB adds) refuses the statement.
_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})

#: Functions that run SQL given as text (or as a serialized tree), which no check sees first:
#: ``query('…')`` can wrap ``json_execute_serialized_sql``, which runs a data-modifying WITH.
_RUNS_SQL_TEXT = frozenset({"query", "json_execute_serialized_sql"})

_ANALYZE = {"analyze", "analyse"}

_HINT = (
    "results are read-only: only reads run (SELECT, WITH … SELECT, VALUES, FROM …, DESCRIBE, SHOW, "
    "SUMMARIZE, PIVOT … IN (…), and plain EXPLAIN of those), and no statement of the input ran. To keep a "
    "result, use --format csv and redirect the output."
)


class ReadOnlyError(ValueError):
    """A statement is not a read (NOTE [ Only reads run ]); nothing of the input ran."""


class LimitError(RuntimeError):
    """A valid query could not finish within its ``Limits`` (time or memory)."""


@dataclass(frozen=True)
class Limits:
    """What one invocation may spend (NOTE [ Limits of one invocation ]).

    ``timeout_s``: seconds for all its statements, fetching and printing included;
    ``memory_limit``: DuckDB's ``memory_limit``, any size DuckDB reads.
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_limit: str = DEFAULT_MEMORY_LIMIT

    def settings(self) -> dict[str, str]:
        """The DuckDB settings the connection starts with (before its configuration is locked)."""
        return {"memory_limit": self.memory_limit, "temp_directory": ""}


# -- which statements run ------------------------------------------------------------------


def read_statements(sql: str) -> list[str]:
    """The statements of ``sql``, each checked to be a read (NOTE [ Only reads run ]).

    Raises ``ReadOnlyError`` naming the first statement that is not (its kind, and its
    number when there are several), ``ValueError`` when ``sql`` holds no statement, and
    ``duckdb.ParserException`` for a syntax error. Nothing is run: the parser's connection
    holds no view and the checks only parse.
    """
    parser = _parser()
    statements = parser.extract_statements(sql)
    if not statements:
        raise ValueError("no SQL statement given")
    for number, statement in enumerate(statements, 1):
        problem = _not_a_read(parser, statement)
        if problem is not None:
            where = f" (statement {number} of {len(statements)})" if len(statements) > 1 else ""
            raise ReadOnlyError(f"refused: {problem}{where}: {_snippet(statement.query)}; {_HINT}")
    return [statement.query for statement in statements]


def _parser() -> duckdb.DuckDBPyConnection:
    """A connection to the in-memory DuckDB that parses statements and serializes their trees,
    and does nothing else (no view, no table, nothing read). One database per process: making
    one costs 10-30 ms, and a command parses its input several times before its own connection
    exists; a cursor each (a few µs), so that threads never share a connection."""
    return _parsing_database().cursor()


class _Opening(threading.Thread):
    """A new in-memory database being opened in the background: DuckDB lets go of the
    interpreter while it opens one (~20 ms), so the command's own work goes on meanwhile."""

    def __init__(self) -> None:
        super().__init__(name="stateaware-open-database")  # not a daemon: an exit waits for it
        self._database: duckdb.DuckDBPyConnection | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._database = duckdb.connect(":memory:")
        except BaseException as exc:  # noqa: BLE001 - raised again where the database is wanted
            self._error = exc

    def database(self) -> duckdb.DuckDBPyConnection:
        self.join()
        if self._error is not None:
            raise self._error
        assert self._database is not None
        return self._database


#: The parser's database, open or opening (None: none yet); read and replaced under the lock.
_OPENED: _Opening | None = None

#: Held while the parser's database is started or handed over: two threads never take the same one.
_HANDING_OVER = threading.Lock()


def open_database_early() -> _Opening:
    """Start opening the database this process's next statements are parsed with (and its
    views then built in), so that the 10-30 ms it takes pass while the caller checks the
    parts: ``analysis sql`` calls this before its scan. Without it, the first parse opens it."""
    global _OPENED
    with _HANDING_OVER:
        if _OPENED is None:
            _OPENED = _Opening()
        return _OPENED


def _parsing_database() -> duckdb.DuckDBPyConnection:
    return open_database_early().database()


def _database_for_views() -> duckdb.DuckDBPyConnection:
    """The parser's database, handed over to hold a command's views (it holds nothing: the
    parser only parses), so a command opens one database, not two; the next parse opens a
    new one. Its cursors' parses need nothing the lock takes away."""
    global _OPENED
    with _HANDING_OVER:
        opened, _OPENED = _OPENED or _Opening(), None
    return opened.database()


def _snippet(text: str) -> str:
    return repr(" ".join(text.split())[:60])


def _not_a_read(parser: duckdb.DuckDBPyConnection, statement: Any) -> str | None:
    """Why ``statement`` (one of ``extract_statements``) is not a read, or ``None`` when it is."""
    if statement.type == duckdb.StatementType.MULTI:
        return (
            "MULTI statement (DuckDB runs it as several: a PIVOT without IN (…) creates a type first; "
            "list the values, PIVOT … ON column IN (…))"
        )
    if statement.type not in _READ_TYPES:
        return f"{statement.type.name} statement"
    if statement.type == duckdb.StatementType.SELECT:
        return _tree_problem(parser, statement.query)
    inner = _explained(statement.query)
    if inner is None:
        return "EXPLAIN ANALYZE (it runs the statement it explains)"
    found = _parsed(inner)
    if len(found) != 1:
        return "EXPLAIN of a statement that cannot be checked"
    if found[0].type != duckdb.StatementType.SELECT:
        return f"EXPLAIN {found[0].type.name} statement"
    problem = _tree_problem(parser, found[0].query)
    return None if problem is None else f"EXPLAIN of {problem}"


def _tree_problem(parser: duckdb.DuckDBPyConnection, text: str) -> str | None:
    """What in the parse tree of the ``SELECT`` statement ``text`` is not a read, or ``None``."""
    row = parser.execute("SELECT json_serialize_sql(?)", [text]).fetchone()
    try:
        tree = json.loads(row[0]) if row else {"error": True}
    except RecursionError:  # Python's JSON reader stops at ~1000 levels; DuckDB's parser goes deeper
        tree = {"error": True, "error_message": "nested too deeply"}
    if tree.get("error"):  # fail closed: what cannot be serialized cannot be checked
        return f"a statement whose parse cannot be checked ({tree.get('error_message', 'no parse tree')})"
    nodes, functions = _kinds(tree)
    writes = sorted(n.removesuffix("_QUERY_NODE").removesuffix("_NODE") for n in nodes - _READ_NODES)
    if writes:
        return f"{'/'.join(writes)} inside a SELECT (a data-modifying WITH)"
    hidden = sorted(functions & _RUNS_SQL_TEXT)
    if hidden:
        return f"{hidden[0]}() (it runs SQL text that is not checked first; write that SQL itself)"
    return None


def _kinds(tree: Any) -> tuple[set[str], set[str]]:
    """The query node kinds (``…_NODE``) and the function names (lower case) anywhere in ``tree``."""
    nodes: set[str] = set()
    functions: set[str] = set()
    pending = [tree]  # a stack, not recursion: a parse tree is as deep as the SQL is nested
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            kind, name = item.get("type"), item.get("function_name")
            if isinstance(kind, str) and kind.endswith("_NODE"):
                nodes.add(kind)
            if isinstance(name, str):
                functions.add(name.lower())
            pending += item.values()
        elif isinstance(item, list):
            pending += item
    return nodes, functions


def _explained(text: str) -> str | None:
    """The statement an ``EXPLAIN`` statement ``text`` explains, or ``None`` for ``EXPLAIN ANALYZE``.

    Read off DuckDB's tokens: after ``EXPLAIN`` come ``ANALYZE``/``ANALYSE`` or a parenthesised
    option list (``(FORMAT json)``), then the statement. Any ``ANALYZE`` word there refuses,
    so does one in a parenthesised query right after ``EXPLAIN`` (``EXPLAIN (SELECT analyze
    …)``): a false refusal of a rare spelling, never a statement run unchecked.
    """
    words = _words(text)[1:]  # [0] is EXPLAIN itself
    if not words:
        return ""
    start, first = words[0]
    if first.lower() in _ANALYZE:
        return None
    if not first.startswith("("):
        return text[start:]
    options = _group(words)
    if any(word.lower() in _ANALYZE for _, word in options):
        return None
    rest = text[start:]
    parsed = _parsed(rest)
    if len(parsed) == 1 and parsed[0].type == duckdb.StatementType.SELECT:
        return rest  # EXPLAIN (SELECT …): the parentheses are the query's own
    return text[words[len(options)][0] :] if len(options) < len(words) else ""


def _group(words: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The leading words of ``words`` up to the one closing the parenthesis the first opens."""
    depth = 0
    for index, (_, word) in enumerate(words):
        depth += word.count("(") - word.count(")")
        if depth <= 0:
            return words[: index + 1]
    return words


def _words(text: str) -> list[tuple[int, str]]:
    """``(offset, text)`` of each token of ``text`` that is not a comment, by DuckDB's tokenizer."""
    tokens = duckdb.tokenize(text)
    ends = [start for start, _ in tokens[1:]] + [len(text)]
    return [
        (start, text[start:end].strip())
        for (start, kind), end in zip(tokens, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]


def _parsed(text: str) -> list[Any]:
    """The statements of ``text``, none when it does not parse."""
    try:
        return _parser().extract_statements(text)
    except duckdb.Error:
        return []


# -- what they read -------------------------------------------------------------------------

#: The record-table folder behind each view a statement may name (NOTE [ Tables DuckDB reads
#: itself ] in ``stateaware.analysis.store.views``).
_KNOWN = {**TABLE_COLUMNS, **RESULT_COLUMNS}
_FOLDER_OF = {
    **{name: name for name in _KNOWN},
    "attempts": "processes",
    **{PARTS_PREFIX + name: name for name in _KNOWN},
}

#: Every folder that has a view.
_VIEW_FOLDERS = tuple(_KNOWN)

#: Functions that read a table named by a value, which the parse tree may only compute
#: (``query_table('tim' || 'ings')``): a statement calling one loads nothing (every view
#: reads through Arrow).
_READS_BY_NAME = frozenset({"query_table"})


def columns_read(statements: Sequence[str]) -> dict[str, set[str] | None] | None:
    """The tables ``statements`` read, each with the column names that may be theirs
    (``None``: every column): ``stateaware.analysis.store.views.connect`` loads the record
    tables among them and leaves every other view empty.

    From DuckDB's parse tree, erring towards more: every string in it that is a column of a
    table named is kept; a ``*``/``COLUMNS(…)``, a ``NATURAL`` join, a table or alias used as
    a column (a row as a struct), a ``_parts_…`` relation (its ``filename``) or a view's name
    as a value keeps them all. A statement whose tree cannot be had, or that reads a table
    by a computed name (``_READS_BY_NAME``), makes the answer ``None``: nothing is
    loaded and every view reads through Arrow, slower and the same.
    """
    parser = _parser()
    wanted: dict[str, set[str] | None] = {}
    try:
        for text in statements:
            if _parsed(text)[0].type == duckdb.StatementType.EXPLAIN:
                text = _explained(text) or ""
            row = parser.execute("SELECT json_serialize_sql(?)", [text]).fetchone()
            tree = json.loads(row[0]) if row else {"error": True}
            if tree.get("error"):
                return None
            found = _columns_in(tree)
            if found is None:
                return None
            for folder, columns in found.items():
                wanted[folder] = _union(folder, wanted.get(folder, set()), columns)
    except (duckdb.Error, RecursionError, IndexError, ValueError):
        return None
    return wanted


def _union(folder: str, a: set[str] | None, b: set[str] | None) -> set[str] | None:
    """The columns of ``folder`` two statements read, together (``None``: every column; with
    ``filename``, the parts relation's, every column and each row's file)."""
    if a is not None and b is not None:
        return a | b
    return {*_KNOWN[folder].names, "filename"} if "filename" in (a or b or ()) else None


def _columns_in(tree: Any) -> dict[str, set[str] | None] | None:
    """``columns_read`` of one parse tree."""
    tables: set[str] = set()
    aliases: set[str] = set()
    names: set[str] = set()
    lone_refs: set[str] = set()
    everything = False
    pending = [tree]  # a stack, not recursion: a parse tree is as deep as the SQL is nested
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if kind == "BASE_TABLE" and isinstance(item.get("table_name"), str):
                tables.add(item["table_name"])
                everything |= item["table_name"].startswith(PARTS_PREFIX)
                aliases.add(str(item.get("alias") or ""))
            elif kind == "STAR" or (kind == "JOIN" and item.get("ref_type") == "NATURAL"):
                everything = True
            elif kind == "COLUMN_REF" and len(item.get("column_names") or ()) == 1:
                lone_refs.add(str(item["column_names"][0]))
            elif str(item.get("function_name", "")).lower() in _READS_BY_NAME:
                return None
            pending += item.values()
        elif isinstance(item, list):
            pending += item
        elif isinstance(item, str):
            names.add(item)
    everything |= bool(lone_refs & (tables | aliases))
    found: dict[str, set[str] | None] = {}
    for table in tables:
        folder = _FOLDER_OF.get(table)
        if folder is not None:
            found[folder] = None if everything else names & set(_KNOWN[folder].names)
    # A view named by a value rather than as a table (a constant of any function): all of it.
    for name in (names - lone_refs - tables) & set(_FOLDER_OF):
        found[_FOLDER_OF[name]] = None
    # A parts relation is the table and each row's file (its `filename`): all of both.
    for name in (names | tables) & set(_FOLDER_OF):
        if name.startswith(PARTS_PREFIX):
            found[_FOLDER_OF[name]] = {*_KNOWN[_FOLDER_OF[name]].names, "filename"}
    return found


# -- running them --------------------------------------------------------------------------


def _views(
    results: Path | str,
    run_ids: Sequence[str] | None,
    limits: Limits | None,
    warn: Callable[[str], None] | None,
    parts: Snapshot | None,
    cohorts: Sequence[str] | None = None,
    reads: Mapping[str, set[str] | None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """The locked connection over ``results``, with ``limits``' settings, after warning of
    damaged parts; the tables in ``reads`` (``columns_read``) read by DuckDB itself."""
    settings = limits.settings() if limits else None
    # Views no statement names stay empty, unread; when the statements could not be parsed
    # for their tables (``reads`` None), every view reads through Arrow instead.
    load = {t: c for t, c in (reads or {}).items() if t in _KNOWN}
    unread = () if reads is None else [t for t in _VIEW_FOLDERS if t not in reads]
    con = connect(
        results,
        run_ids,
        cohorts=cohorts,
        parts=parts,
        config=settings,
        load=load,
        unread=unread,
        database=_database_for_views(),
    )
    if warn is not None:
        for path, problem in con.execute("SELECT path, problem FROM damaged_parts ORDER BY path").fetchall():
            warn(f"warning: skipped {path}: {problem}")
    return con


def query(
    results: Path | str, sql: str, run_ids: Sequence[str] | None = None, *, warn: Callable[[str], None] | None = None
) -> list[tuple[list[str], list[tuple]]]:
    """Run every statement of ``sql`` over ``results``; ``(column names, rows)`` per statement.

    For small results (tests, scripts): every row is held, with no time or memory limit
    (the command line uses ``run``, which streams). ``run_ids`` restricts every view to
    those runs. Raises as ``read_statements`` before running anything, and
    ``duckdb.Error`` for what the locked connection refuses. ``warn`` is called with one
    line per damaged part file the views left out.
    """
    statements = read_statements(sql)
    con = _views(results, run_ids, None, warn, None, reads=columns_read(statements))
    answers = []
    for text in statements:
        relation = con.execute(text)
        answers.append((_names(relation), relation.fetchall()))
    return answers


def run(
    results: Path | str,
    sql: str,
    out: TextIO,
    *,
    fmt: str = "table",
    run_ids: Sequence[str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    limits: Limits | None = None,
    warn: Callable[[str], None] | None = None,
    parts: Snapshot | None = None,
    cohorts: Sequence[str] | None = None,
) -> None:
    """Run every statement of ``sql`` over ``results``, writing each result to ``out`` as ``fmt``.

    Results are separated by a blank line and streamed (NOTE [ Limits of one invocation ]):
    CSV and JSON of any size in bounded memory, the table format at most ``max_rows`` rows
    and a line saying how many it left out. Raises as ``read_statements`` before
    anything runs (or is read), ``LimitError`` when ``limits`` stop a statement (what
    was written by then stays written), and ``duckdb.Error`` for what DuckDB refuses.
    ``run_ids``, ``warn``: as for ``query``; ``cohorts`` restricts every view to those
    cohorts' runs; ``parts``: a snapshot of ``results`` to build the views from (see
    ``stateaware.analysis.store.views.snapshot``; by default one of the chosen runs only).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats are: {', '.join(FORMATS)}")
    limits = limits if limits is not None else Limits()
    statements = read_statements(sql)
    try:
        con = _views(results, run_ids, limits, warn, parts, cohorts, reads=columns_read(statements))
    except duckdb.OutOfMemoryException:  # loading the tables named (NOTE [ Tables DuckDB reads itself ])
        raise _over_memory(limits) from None
    # Closed here, not at exit: a result left streaming (a reader that closed the pipe) would
    # otherwise be torn down during interpreter shutdown, which aborts the process.
    with closing(con), _within(con, limits) as expired:
        for number, text in enumerate(statements):
            if number:
                out.write("\n")
            if expired.is_set():  # fired between statements, when no query was there to interrupt
                raise _Expired
            result = con.execute(text)
            chunks = _chunks(result, expired)
            if fmt == "table":
                _write_table(_names(result), result, chunks, out, max_rows)
            elif fmt == "csv":
                _write_csv(_names(result), chunks, out)
            else:
                _write_json(_names(result), chunks, out)


def _over_memory(limits: Limits) -> LimitError:
    return LimitError(
        f"stopped at --memory-limit {limits.memory_limit}: the query is valid but needs more memory "
        f"(nothing is spilled to disk): narrow it (WHERE, LIMIT, fewer joins, --run-id, --cohort), compact "
        f"the store (python -m stateaware.analysis compact) or pass a larger --memory-limit"
    )


class _Expired(Exception):
    """The timer fired while Python, not DuckDB, was working (so no interrupt was seen)."""


@contextmanager
def _within(con: duckdb.DuckDBPyConnection, limits: Limits) -> Iterator[threading.Event]:
    """Interrupt ``con`` after ``limits.timeout_s``; a stop at either limit becomes ``LimitError``.

    Yields the event the timer sets, for loops in Python to check between chunks.
    """
    expired = threading.Event()

    def stop() -> None:
        expired.set()
        con.interrupt()  # from the timer's thread: DuckDB's documented way to stop a running query

    timer = threading.Timer(limits.timeout_s, stop)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    except (duckdb.InterruptException, _Expired) as exc:
        if not expired.is_set():
            raise KeyboardInterrupt from exc  # an interrupt that was not the timer's: Ctrl-C
        raise LimitError(
            f"stopped after --timeout {limits.timeout_s:g} s; the query is valid but did not finish in time: "
            f"narrow it (WHERE, LIMIT, fewer joins) or pass a larger --timeout"
        ) from None
    except duckdb.OutOfMemoryException:
        raise _over_memory(limits) from None
    except MemoryError:  # Python's own, holding the table's rows: the one place rows are kept
        raise LimitError("out of memory holding the rows of the table: pass a smaller --max-rows") from None
    finally:
        timer.cancel()
        timer.join()  # a timer firing right now is done before the connection is closed


def _chunks(result: duckdb.DuckDBPyConnection, expired: threading.Event) -> Iterator[list[tuple]]:
    """The rows left in ``result``, ``CHUNK_ROWS`` at a time, stopping when ``expired`` is set."""
    while True:
        if expired.is_set():
            raise _Expired
        chunk = result.fetchmany(CHUNK_ROWS)
        if not chunk:
            return
        yield chunk


def _names(result: duckdb.DuckDBPyConnection) -> list[str]:
    return [d[0] for d in result.description] if result.description else []


def _write_table(
    names: list[str], result: duckdb.DuckDBPyConnection, chunks: Iterator[list[tuple]], out: TextIO, max_rows: int
) -> None:
    """At most ``max_rows`` rows as an aligned table, then how many more there were (up to ``COUNT_CAP``)."""
    shown = result.fetchmany(max_rows)
    left = 0
    for chunk in chunks:  # counted, not kept
        left += len(chunk)
        if left > COUNT_CAP:
            break
    out.write("\n".join(_table_lines(names, shown)) + "\n")
    if not left:
        out.write(_rows_line(len(shown)) + "\n")
        return
    more = f"over {COUNT_CAP}" if left > COUNT_CAP else str(left)
    out.write(
        f"({len(shown)} rows shown, {more} more left out: raise --max-rows, or use --format csv for all of them)\n"
    )


def _write_csv(names: list[str], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for chunk in chunks:
        # csv writes None as "" and floats as repr (nan, inf): a row of such values goes as it is.
        writer.writerows(row if _FLAT.issuperset(map(type, row)) else list(map(_plain, row)) for row in chunk)


def _write_json(names: list[str], chunks: Iterator[list[tuple]], out: TextIO) -> None:
    """A JSON array of objects, written row by row exactly as ``json.dumps(rows, indent=1)`` would."""
    out.write("[")
    separator = "\n"
    for chunk in chunks:
        for row in chunk:
            out.write(separator + _json_object(names, row))
            separator = ",\n"
    out.write("\n]\n" if separator != "\n" else "]\n")


#: The C encoder writing an object's fields one per line at the depth of an array's item;
#: ``json.dumps(indent=1)`` is pure Python and several times slower.
_encode_fields = json.JSONEncoder(separators=(",\n  ", ": ")).encode


def _json_object(names: list[str], row: tuple) -> str:
    """``row`` as one item of the array, laid out as ``json.dumps([...], indent=1)`` lays it out."""
    item = dict(zip(names, map(_plain, row), strict=True))
    if not item or not _FLAT.issuperset(map(type, item.values())):
        return " " + json.dumps(item, indent=1).replace("\n", "\n ")  # nested values: the slow way
    return " {\n  " + _encode_fields(item)[1:-1] + "\n }"


# -- formatting ----------------------------------------------------------------------------


#: Types whose values every format writes as they are (most cells): no conversion to look for.
_AS_IS = frozenset({int, str, bool, type(None)})

#: What ``_plain`` returns that JSON writes on one line.
_FLAT = frozenset({*_AS_IS, float})


def _plain(value: Any) -> Any:
    """``value`` as a plain JSON value: decimals as floats, times as ISO text, bytes as hex, lists and
    dicts of plain values, any other type (an interval, a UUID) as its text."""
    if type(value) in _AS_IS:
        return value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value if isinstance(value, (int, str)) else str(value)  # an int or str subclass stays


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(_plain(value))


def _rows_line(count: int) -> str:
    return f"({count} row{'s' if count != 1 else ''})"


def _table_lines(names: Sequence[str], rows: Sequence[tuple]) -> list[str]:
    """The header, rule and rows of an aligned text table (numbers right-aligned), no footer."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], (int, float, Decimal)) or row[i] is None for row in rows) and rows
        for i in range(len(names))
    ]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return [line(list(names)), "  ".join("-" * w for w in widths), *(line(r) for r in cells)]


def format_result(names: Sequence[str], rows: Sequence[tuple], fmt: str = "table") -> str:
    """``rows`` as an aligned text table (numbers right-aligned), CSV, or a JSON array of objects.

    Every row is held; ``run`` writes the same formats streaming. No trailing newline.
    """
    if fmt == "json":
        return json.dumps([{n: _plain(v) for n, v in zip(names, row, strict=True)} for row in rows], indent=1)
    if fmt == "csv":
        buffer = io.StringIO()
        _write_csv(list(names), iter([list(rows)]), buffer)
        return buffer.getvalue().rstrip("\n")
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; valid formats are: {', '.join(FORMATS)}")
    return "\n".join([*_table_lines(names, rows), _rows_line(len(rows))])
