"""Names are never paths: the one rule for every value that becomes a file or folder name.

A run id, a cohort or kind name, a method name, a Slurm job name, a part name: anything a
user or a config sets that ends up as a path component is checked by ``check_name``
where it is read, and every path the launcher, the workers and the analysis write is
checked to lie inside the results directory before it is written (``check_inside``,
through ``stateaware.records.write_paths.writable``, which refuses links below it too).

The rule is ``[A-Za-z0-9][A-Za-z0-9._-]{0,99}``: one path component of at most 100 ASCII
characters, so ``/``, ``\\``, ``..``, ``.``, ``=``, ``%``, spaces, control characters and a
leading ``-`` or ``.`` are refused. The bound keeps the longest folder a run makes
(``run_id=`` + the name + a ``.NAME.tmp-HOST-PID`` temporary) far below the 255 bytes a
file name may have on every common file system.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["NAME_RULE", "MAX_NAME", "InvalidName", "PathOutsideError", "check_name", "is_name", "check_inside"]

#: The most characters a name may have.
MAX_NAME = 100
#: The rule, as a regular expression (matched in full).
NAME_RULE = rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}"
_NAME = re.compile(NAME_RULE)
_RULE_TEXT = (
    f"1 to {MAX_NAME} characters from A-Z a-z 0-9 . _ -, starting with a letter or digit "
    "(a name becomes one folder or file name: no /, \\, .., spaces or control characters)"
)


class InvalidName(ValueError):
    """A value that becomes a file or folder name breaks the name rule; the message names the field."""


class PathOutsideError(ValueError):
    """A path about to be written does not lie inside the results directory."""


def is_name(value: object) -> bool:
    """Whether ``value`` is a string that follows the name rule."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(field: str, value: object) -> str:
    """``value`` itself when it follows the name rule; else ``InvalidName`` naming ``field``.

    ``field`` is how the user set it (``run_id``, ``cohort.name``, ``cohort.params.methods[2]``),
    so the one-line error says what to change.
    """
    if is_name(value):
        return value  # type: ignore[return-value]
    if not isinstance(value, str):
        problem = f"a {type(value).__name__}, not a string"
    elif not value:
        problem = "empty"
    elif len(value) > MAX_NAME:
        problem = f"{len(value)} characters long"
    else:
        bad = sorted({c for c in value if not re.fullmatch(r"[A-Za-z0-9._-]", c)})
        if bad:
            problem = "contains " + " ".join(repr(c) for c in bad)
        else:
            problem = f"starts with {value[0]!r}"
    shown = repr(value) if not isinstance(value, str) or len(value) <= 60 else repr(value[:57] + "...")
    raise InvalidName(f"invalid {field}={shown}: {problem}; a name is {_RULE_TEXT}")


def check_inside(out: Path | str, path: Path | str) -> Path:
    """``path`` resolved, when it lies inside ``out`` (both resolved, symlinks followed); else
    ``PathOutsideError`` naming both.

    Call it on every path about to be written under a results directory: a name that passed
    ``check_name`` cannot leave ``out``, and a symlink planted inside ``out`` that points
    elsewhere is caught here. ``path`` need not exist yet (its existing ancestors are resolved).
    """
    root = Path(os.path.realpath(out))
    target = Path(os.path.realpath(path))
    if target != root and root not in target.parents:
        raise PathOutsideError(
            f"refusing to write {path}: it resolves to {target}, outside the results directory {root} "
            "(a symbolic link inside it points elsewhere?); remove the link or pass out=DIR elsewhere"
        )
    return target
