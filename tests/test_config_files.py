"""The config files Hydra composes are read to a bound before Hydra reads them
(``stateaware.config_files``): size, regular files, and YAML aliases expanded."""

from __future__ import annotations

import os
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.config_files import MAX_CONFIG_BYTES, MAX_CONFIG_NODES, _expanded_nodes, config_files
from tests.cli_inprocess import run_stateaware_in


def _laughs(widths: list[int]) -> str:
    """Nested aliases: level 0 a list of ``widths[0]`` scalars, level i a list of
    ``widths[i]`` aliases of level i-1."""
    lines = [f"l0: &l0 [{', '.join(['x'] * widths[0])}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * w)}]" for i, w in enumerate(widths[1:], start=1)]
    return "\n".join(lines) + "\n"


def _count(value: object) -> int:
    """Nodes of a loaded YAML value, every shared reference counted again (expanded)."""
    if isinstance(value, list):
        return 1 + sum(map(_count, value))
    if isinstance(value, dict):
        return 1 + sum(_count(k) + _count(v) for k, v in value.items())
    return 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_the_expanded_count_is_the_loaded_values_count(widths):
    text = _laughs(widths)
    assert _expanded_nodes(yaml.compose(text)) == _count(yaml.safe_load(text))


def test_a_recursive_alias_counts_as_over():
    assert _expanded_nodes(yaml.compose("a: &a [1, *a]\n")) == MAX_CONFIG_NODES + 1


def _config_dir(tmp_path, name: str, text: str | bytes):
    folder = tmp_path / "confdir"
    (folder / "cohort").mkdir(parents=True, exist_ok=True)
    path = folder / "cohort" / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder, path


def _refused(tmp_path, folder, flag: str = "--config-dir"):
    started = time.monotonic()
    root = tmp_path / "run"  # beside the config folder: the helper lists root's tree before and after
    root.mkdir(exist_ok=True)
    done = run_stateaware_in(root, ["dry_run=true", flag, str(folder)])
    assert time.monotonic() - started < 60  # a billion laughs once held the command for minutes
    assert done.status == 2 and len(done.error_lines) == 1, done.stderr
    return done.error_lines[0]


@pytest.mark.parametrize("flag", ["--config-dir", "-cd", "--config-path"])
def test_a_config_file_whose_aliases_explode_is_refused_naming_it(tmp_path, flag):
    folder, path = _config_dir(tmp_path, "laughs.yaml", _laughs([10] * 6))
    line = _refused(tmp_path, folder, flag)
    assert str(path) in line and f"{MAX_CONFIG_NODES:,} nodes" in line


def test_a_config_file_past_the_bound_or_not_a_file_is_refused(tmp_path):
    folder, path = _config_dir(tmp_path, "big.yaml", b"a: " + b"x" * MAX_CONFIG_BYTES + b"\n")
    line = _refused(tmp_path, folder)
    assert str(path) in line and f"{MAX_CONFIG_BYTES:,} bytes" in line
    path.unlink()
    path.symlink_to("/dev/zero")
    assert _refused(tmp_path, folder) == f"error: config file {path}: not a regular file"


def test_a_config_file_thousands_of_folders_deep_is_found(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY)
    for _ in range(1500):  # one level at a time: pathlib's and os's makedirs recurse per level
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    with open("laughs.yaml", "w", opener=lambda name, flags: os.open(name, flags, dir_fd=fd)) as file:
        file.write(_laughs([10] * 6))
    os.close(fd)
    try:
        assert config_files(folder) == [folder.joinpath(*["d"] * 1500, "laughs.yaml")]
        assert "laughs.yaml" in _refused(tmp_path, folder)
    finally:
        _remove_deep(folder)


def _remove_deep(folder):
    """Remove ``folder``'s nest one level at a time (pytest's clean-up recurses per level)."""
    top, lifted = folder / "d", folder / "lifted"
    while top.exists():
        top.rename(lifted)
        for child in lifted.iterdir():
            child.rename(top) if child.name == "d" else child.unlink()
        lifted.rmdir()


def test_a_config_dir_within_the_bounds_composes_as_before(tmp_path):
    folder, _ = _config_dir(tmp_path, "mine.yaml", "# a user's own group option\nanchor: &a [1, 2]\nagain: *a\n")
    done = run_stateaware_in(tmp_path, ["dry_run=true", "--config-dir", str(folder)])
    assert done.status == 0, done.stderr


def test_hydras_rerun_from_a_pickle_is_refused(tmp_path):
    pickled = tmp_path / "config.pickle"
    pickled.write_bytes(b"\x80\x04N.")
    done = run_stateaware_in(tmp_path, ["--experimental-rerun", str(pickled)])
    assert done.status == 2 and done.error_lines == [
        "error: --experimental-rerun is not supported: a run resumes by its run_id (python -m stateaware runs)"
    ]
