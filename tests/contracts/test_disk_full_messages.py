"""Full-disk messages name the file being written and the free space (or inodes) of its own
filesystem — never ``?``, never the working directory's disk."""

from __future__ import annotations

import errno
import os
import types
from pathlib import Path

import pyarrow as pa
import pytest

import stateaware.records.writer as writer
from stateaware.records.writer import DiskFullError, as_disk_full, free_space, write_atomic, write_bytes_atomic

GIB = 1 << 30


class FakeDisks:
    """``os.statvfs`` of made-up filesystems: one per mounted folder, the working directory's roomy."""

    def __init__(self, mounts: dict[Path, tuple[int, int, int]]):
        self.mounts = mounts  # folder -> (free bytes, inodes in all, free inodes)
        self.asked: list[Path] = []

    def __call__(self, path) -> types.SimpleNamespace:
        path = Path(path)
        self.asked.append(path)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        mount = max((m for m in self.mounts if path == m or m in path.parents), key=lambda m: len(m.parts))
        free, files, ffree = self.mounts[mount]
        return types.SimpleNamespace(f_bavail=free // 4096, f_frsize=4096, f_files=files, f_favail=ffree, f_ffree=ffree)


@pytest.fixture
def disks(tmp_path, monkeypatch) -> FakeDisks:
    """``tmp_path/out`` on a nearly full disk; everything else (the working directory) on a roomy one."""
    (tmp_path / "out").mkdir()
    fake = FakeDisks({Path("/"): (34 * GIB, 10**6, 10**5), tmp_path / "out": (3 * 4096, 10**6, 10**5)})
    monkeypatch.setattr(writer.os, "statvfs", fake)
    return fake


def _enospc(filename: str | None = None) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename) if filename else OSError(errno.ENOSPC, "full")


def test_the_message_names_the_file_and_its_own_filesystems_free_space(tmp_path, disks):
    part = tmp_path / "out" / "timings" / "cohort=c" / "run_id=r" / "p000001-m.parquet"  # not created yet
    message = str(as_disk_full(_enospc(), part, 2048))
    assert message == (
        f"disk full writing {part}: needed 2.000 KiB, 12.000 KiB free there; "
        "free some space and re-run the same command to resume"
    )
    assert disks.asked[-1] == tmp_path / "out"  # the nearest existing ancestor, not the working directory


def test_the_file_the_error_names_is_used_when_the_caller_passes_none(tmp_path, disks):
    target = tmp_path / "out" / "x.bin"
    assert str(as_disk_full(_enospc(str(target)))).startswith(
        f"disk full writing {target}: needed more space, 12.000 KiB"
    )


@pytest.mark.parametrize("files", [10**6, 1])
def test_no_free_inodes_is_said_so(tmp_path, disks, files):
    disks.mounts[tmp_path / "out"] = (5 * GIB, files, 0)
    message = str(as_disk_full(_enospc(), tmp_path / "out" / "p.parquet", 100))
    assert message.startswith(f"disk full writing {tmp_path / 'out' / 'p.parquet'}: needed 100 B, no free inodes there")
    assert "remove some files and re-run the same command to resume" in message


def test_a_filesystem_without_an_inode_count_is_never_called_out_of_inodes(tmp_path, disks):
    disks.mounts[tmp_path / "out"] = (4096, 0, 0)  # btrfs and many network filesystems report none
    assert "no free inodes" not in str(as_disk_full(_enospc(), tmp_path / "out" / "p.parquet"))


def test_only_the_folder_known_names_the_folder_not_a_question_mark(tmp_path, disks):
    message = str(as_disk_full(_enospc(), under=tmp_path / "out"))
    assert message.startswith(
        f"disk full writing a file under {tmp_path / 'out'}: needed more space, 12.000 KiB free there"
    )
    nothing = str(as_disk_full(_enospc()))
    assert "?" not in nothing and "34" not in nothing and "free space unknown" in nothing


def test_free_space_walks_up_to_an_existing_ancestor(tmp_path, disks):
    assert free_space(tmp_path / "out" / "a" / "b" / "c.parquet") == writer.Space(3 * 4096, False)
    assert disks.asked[-1] == tmp_path / "out"


class _FullFile:
    """A file whose every write runs out of space (``errno`` only, no file name: as ``write()`` reports it)."""

    def __init__(self, path: Path, code: int):
        self.handle, self.code = open(path, "wb"), code

    def write(self, data) -> int:
        raise OSError(self.code, os.strerror(self.code))

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
@pytest.mark.parametrize("write", ["parquet", "bytes"])
def test_an_atomic_write_that_fills_the_disk_names_its_file(tmp_path, disks, monkeypatch, code, write):
    monkeypatch.setattr(writer, "_open_temporary", lambda tmp: _FullFile(tmp, code))
    target = tmp_path / "out" / "timings" / "cohort=c" / "run_id=r" / "p000000-m.parquet"
    with pytest.raises(DiskFullError) as raised:
        if write == "parquet":
            write_atomic(pa.table({"a": list(range(100))}), target)
        else:
            write_bytes_atomic(b"x" * 5000, target)
    assert str(raised.value).startswith(f"disk full writing {target}: needed ")
    assert "12.000 KiB free there" in str(raised.value)
    assert not list(target.parent.iterdir())  # nothing half-written, no temporary file


def test_a_kinds_own_write_that_fills_the_disk_names_the_results_folder(tmp_path, monkeypatch):
    import stateaware.kinds as kinds
    from stateaware.kinds import user_code
    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import run_one_process
    from stateaware.source import source_hash

    def run(spec, writer):
        raise _enospc()  # e.g. numpy.save of a checkpoint: no file name in the error

    monkeypatch.setattr(kinds, "load_kind", lambda name: types.SimpleNamespace(run=run))
    out = tmp_path / "out"
    spec = ProcessSpec(
        run_id="r1",
        cohort="c",
        kind="tests.kinds.clock",
        process_index=0,
        processes=1,
        seed=0,
        source_hash=source_hash(user_code("tests.kinds.clock")),
        out=str(out),
        launcher="inline",
        timing=False,
    )
    result = run_one_process(spec)
    assert result.status == "failed"
    assert result.disk_full.startswith(f"disk full writing a file under {out}: needed more space, ")
    assert result.disk_full.endswith(" free there; free some space and re-run the same command to resume")


def test_the_error_crosses_a_process_boundary_whole(tmp_path, disks):
    import pickle

    error = as_disk_full(_enospc(), tmp_path / "out" / "p.parquet", 10)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is DiskFullError and str(again) == str(error) and again.errno == errno.ENOSPC
