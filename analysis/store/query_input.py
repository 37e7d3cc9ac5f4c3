"""The SQL a ``sql`` command runs, read to a bound: from ``--file``, standard input or the argument."""

from __future__ import annotations

from stateaware.bounded_input import STDIN, InputError, read_bounded

__all__ = ["MAX_QUERY_BYTES", "query_text"]

#: The most bytes of SQL one input may hold: a ``--file``, standard input or the argument.
MAX_QUERY_BYTES = 4 << 20


def query_text(file: str | None, query: str | None) -> str:
    """The SQL to run: ``file``'s text when given, standard input's when ``query`` is ``-`` or
    absent, else ``query`` itself.

    Each is read to ``MAX_QUERY_BYTES`` (``stateaware.bounded_input.read_bounded``:
    never more than one byte past it, never waiting forever on a FIFO no writer opens) and must
    be UTF-8; ``InputError`` (a ``ValueError``) otherwise, one
    line naming the input.
    """
    if file is not None:
        what, raw = f"--file {file}", read_bounded(file, what=f"--file {file}", bound=MAX_QUERY_BYTES)
    elif query in (None, STDIN):
        what, raw = "standard input", read_bounded(STDIN, what="standard input", bound=MAX_QUERY_BYTES)
    else:
        if len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
            raise InputError(f"the query: more than {MAX_QUERY_BYTES:,} bytes; pass at most that much SQL")
        return query
    try:
        return raw.decode("utf-8")  # strictly: a C locale would smuggle other bytes in escaped
    except UnicodeDecodeError as exc:
        raise InputError(f"{what}: not UTF-8 text (byte {exc.start}); SQL must be UTF-8") from None
