"""The config files Hydra composes, checked against bounds before Hydra reads any of them.

Hydra reads the YAML files of its search path itself, whole, and OmegaConf expands every
YAML alias into a copy: a 300-byte file of nested aliases (a "billion laughs") expands to a
million nodes and holds ``python -m stateaware`` for minutes, a config file that is a link
to ``/dev/zero`` never ends. So before Hydra runs, ``check_config_files`` reads every
``*.yaml``/``*.yml`` file under the folders it will search — the package's ``conf/`` and
any ``--config-dir``/``--config-path`` the command line names — through the one bounded
reader (``stateaware.bounded_input``): at most ``MAX_CONFIG_BYTES`` each, regular files only,
and with aliases at most ``MAX_CONFIG_NODES`` nodes once expanded. A refusal is
``InputError``, one line naming the file and the bound (exit 2).

Limits: the folders are walked without following links to folders (Hydra lists a
linked group folder too, but a link cycle must not hang the check), so a file reached only
through a linked folder is left to Hydra unchecked; ``pkg://`` sources other than this
package's own are installed code and not walked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import yaml

from stateaware.bounded_input import InputError, read_bounded

__all__ = ["check_config_files", "config_files", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES"]

#: The largest config file Hydra may compose (the package's largest is a few KiB).
MAX_CONFIG_BYTES = 1 << 20
#: The most YAML nodes a config file may hold once its aliases are expanded.
MAX_CONFIG_NODES = 100_000
_SUFFIXES = (".yaml", ".yml")


def config_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The YAML files under ``folder``, in a stable order, found without recursion (a
    folder nested thousands deep is walked like a flat one) and without following links
    to folders."""
    found: list[Path] = []
    stack = [Path(folder)]
    while stack:
        here = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda entry: entry.name)
        except OSError:
            continue  # unreadable or gone: Hydra cannot read it either, and says so
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.endswith(_SUFFIXES):
                found.append(Path(entry.path))
    return found


def check_config_files(folders: Iterable[str | os.PathLike[str]]) -> None:
    """Raise ``InputError`` for the first config file under ``folders`` that is not a
    regular file (after links), holds more than ``MAX_CONFIG_BYTES`` or expands to more
    than ``MAX_CONFIG_NODES`` nodes; YAML that does not parse is left to Hydra's message."""
    for folder in folders:
        for path in config_files(folder):
            what = f"config file {path}"
            text = read_bounded(path, what=what, bound=MAX_CONFIG_BYTES, regular_only=True)
            if b"*" in text:  # only aliases expand; a file without any is its own size
                _check_expansion(text, what)


def _check_expansion(text: bytes, what: str) -> None:
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return
    if root is not None and _expanded_nodes(root) > MAX_CONFIG_NODES:
        raise InputError(
            f"{what}: its YAML aliases expand to more than {MAX_CONFIG_NODES:,} nodes; "
            "a config file may hold at most that many once expanded"
        )


def _expanded_nodes(root: yaml.Node) -> int:
    """The nodes of ``root`` with every alias expanded, counted without expanding them: an
    alias is the very node object its anchor names, so each node's count is memoized. A
    node that contains itself (a recursive alias) expands without end: counted as over."""
    over = MAX_CONFIG_NODES + 1
    counts: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            counts[id(node)] = min(1 + sum(counts[id(child)] for child in children), over)
            continue
        if id(node) in counts:
            continue
        if id(node) in open_nodes:
            return over
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children)
    return counts[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
