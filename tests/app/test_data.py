"""CIFAR-100 archive loading: official format through torchvision, checksum, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from stateaware.app import data


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return data.write_archive(tmp_path_factory.mktemp("cifar") / data.ARCHIVE_NAME, train=40, test=12, seed=3)


def test_generated_archive_reads_through_torchvision(archive, tmp_path):
    c = data.load(archive, extract_to=tmp_path / "x", verify_checksum=False)
    assert c.train_images.shape == (40, 32, 32, 3) and c.train_images.dtype == np.uint8
    assert c.test_images.shape == (12, 32, 32, 3)
    assert c.train_labels.dtype == np.int64 and c.train_labels.shape == (40,)
    assert c.classes == 100
    assert c.checksum_verified is False
    assert len(c.archive_sha256) == 64
    # A second load reuses the extraction (the marker names this archive) and reads the same bytes.
    again = data.load(archive, extract_to=tmp_path / "x", verify_checksum=False)
    assert np.array_equal(again.train_images, c.train_images)


def test_checksum_rejects_a_generated_archive_and_names_where_to_put_it(archive, tmp_path):
    with pytest.raises(data.ArchiveError) as err:
        data.load(archive, extract_to=tmp_path / "x")
    msg = str(err.value)
    assert data.official_md5() in msg and str(archive) in msg and "verify_checksum: false" in msg


def test_missing_archive_names_the_path(tmp_path):
    where = tmp_path / "nowhere" / data.ARCHIVE_NAME
    with pytest.raises(data.ArchiveError, match="not found") as err:
        data.load(where, extract_to=tmp_path / "x", verify_checksum=False)
    assert str(where) in str(err.value) and data.ARCHIVE_NAME in str(err.value)


def test_corrupt_archive_is_an_archive_error(tmp_path):
    bad = tmp_path / data.ARCHIVE_NAME
    bad.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(data.ArchiveError, match="cannot be extracted"):
        data.load(bad, extract_to=tmp_path / "x", verify_checksum=False)


def test_split_is_fixed_disjoint_and_sized():
    fit, val = data.split(100, 70, 30)
    assert len(fit) == 70 and len(val) == 30
    assert not set(fit) & set(val)
    f2, v2 = data.split(100, 70, 30)
    assert np.array_equal(fit, f2) and np.array_equal(val, v2)
    with pytest.raises(ValueError, match="fit="):
        data.split(10, 8, 5)


@pytest.mark.parametrize("filters", ["python's data filter", "no extraction filters (Python < 3.11.4)"])
def test_a_member_outside_the_folder_is_refused_and_plain_archives_extract(archive, tmp_path, monkeypatch, filters):
    import io
    import tarfile

    if filters.startswith("no"):
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    got = data.load(archive, extract_to=tmp_path / "ok", verify_checksum=False)
    assert got.train_labels.shape == (40,) and got.test_labels.shape == (12,)
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        payload = b"escaped"
        member = tarfile.TarInfo("../outside.txt")
        member.size = len(payload)
        tar.addfile(member, io.BytesIO(payload))
    with pytest.raises(data.ArchiveError, match="cannot be extracted"):
        data.load(evil, extract_to=tmp_path / "x", verify_checksum=False)
    assert not (tmp_path / "outside.txt").exists()
