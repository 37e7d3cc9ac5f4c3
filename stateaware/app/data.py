"""CIFAR-100 from the official python archive, never downloaded (paper §12).

The archive is ``cifar-100-python.tar.gz`` as distributed (a folder ``cifar-100-python/``
holding pickled ``train``, ``test`` and ``meta``). ``load`` checks the archive's MD5
against the one torchvision knows, extracts it next to a marker file, and reads it with
``torchvision.datasets.CIFAR100(..., download=False)``. ``verify_checksum=False`` skips
both the archive MD5 and torchvision's per-file MD5s: a generated archive (tests, CPU
runs; ``write_archive``) cannot match them, and every row a run writes says the check
was off (``checksum_verified``).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ARCHIVE_NAME", "ArchiveError", "Cifar", "load", "split", "write_archive", "archive_md5", "official_md5"]

#: The official archive's file name (torchvision's ``CIFAR100.filename``).
ARCHIVE_NAME = "cifar-100-python.tar.gz"

_HELP = (
    "download the official CIFAR-100 python version ({name}, MD5 {md5}) from "
    "https://www.cs.toronto.edu/~kriz/cifar.html on a machine with network access and "
    "place it at {path} (the cohort's `params.archive`); runs never download"
)


class ArchiveError(RuntimeError):
    """The CIFAR-100 archive is missing, corrupt or not in the official format."""


@dataclass(frozen=True)
class Cifar:
    """Images as uint8 ``N x 32 x 32 x 3`` (HWC, as torchvision holds them) and fine labels."""

    train_images: np.ndarray
    train_labels: np.ndarray  # int64
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: int
    archive_sha256: str
    checksum_verified: bool


def official_md5() -> str:
    """The official archive's MD5, as torchvision records it."""
    # lazy: torchvision (the cifar extra, seconds to import) only when the CIFAR data is read
    from torchvision.datasets import CIFAR100

    return CIFAR100.tgz_md5


def archive_md5(path: str | os.PathLike[str]) -> str:
    """MD5 (hex) of the file at ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def load(archive: str | os.PathLike[str], *, extract_to: str | os.PathLike[str], verify_checksum: bool = True) -> Cifar:
    """Read the CIFAR-100 archive at ``archive`` (extracted under ``extract_to``).

    Raises ``ArchiveError`` naming where to put the official archive when the file
    is missing, fails the MD5 check (``verify_checksum=True``), or cannot be read as the
    official format. Extraction is skipped when ``extract_to`` already holds this
    archive's contents (a marker names the archive's SHA-256).
    """
    # lazy: torchvision (the cifar extra, seconds to import) only when the CIFAR data is read
    from torchvision.datasets import CIFAR100

    path = Path(archive)
    md5 = official_md5()
    help_text = _HELP.format(name=ARCHIVE_NAME, md5=md5, path=path)
    if not path.is_file():
        raise ArchiveError(f"CIFAR-100 archive not found at {path}: {help_text}")
    if verify_checksum:
        got = archive_md5(path)
        if got != md5:
            raise ArchiveError(
                f"CIFAR-100 archive at {path} is corrupt or not the official one "
                f"(MD5 {got}, expected {md5}): {help_text}; a generated archive "
                "needs verify_checksum: false"
            )
    with open(path, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    root = Path(extract_to)
    marker = root / ".extracted-sha256"
    if not (marker.is_file() and marker.read_text() == sha):
        root.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(path, "r:gz") as tar:
                _extract_data(tar, root)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArchiveError(f"CIFAR-100 archive at {path} cannot be extracted ({exc}): {help_text}") from None
        marker.write_text(sha)

    cls = CIFAR100 if verify_checksum else _unverified_class()
    try:
        train = cls(str(root), train=True, download=False)
        test = cls(str(root), train=False, download=False)
    except (RuntimeError, KeyError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise ArchiveError(f"CIFAR-100 archive at {path} is not in the official format ({exc}): {help_text}") from None
    return Cifar(
        train_images=np.ascontiguousarray(train.data),
        train_labels=np.asarray(train.targets, dtype=np.int64),
        test_images=np.ascontiguousarray(test.data),
        test_labels=np.asarray(test.targets, dtype=np.int64),
        classes=len(train.classes),
        archive_sha256=sha,
        checksum_verified=bool(verify_checksum),
    )


def _extract_data(tar: tarfile.TarFile, root: Path) -> None:
    """Extract an archive of plain files and folders under ``root``, refusing anything else.

    Python's ``filter="data"`` does this where it exists (3.11.4+, 3.12); Debian 12's 3.11.2
    has no extraction filters, so there every member is checked the same way first: a
    regular file or a folder, with a relative name that stays under ``root``.
    """
    if hasattr(tarfile, "data_filter"):
        tar.extractall(root, filter="data")
        return
    inside = root.resolve()
    for member in tar.getmembers():
        target = (inside / member.name).resolve()
        if not (member.isfile() or member.isdir()) or target != inside and inside not in target.parents:
            raise tarfile.TarError(f"refusing member {member.name!r}: not a plain file or folder under {root}")
    tar.extractall(root)


def _unverified_class():
    # lazy: torchvision (the cifar extra, seconds to import) only when the CIFAR data is read
    from torchvision.datasets import CIFAR100

    class Unverified(CIFAR100):
        """CIFAR100 whose integrity check is file presence only (generated archives)."""

        def _check_integrity(self) -> bool:
            folder = os.path.join(self.root, self.base_folder)
            names = [n for n, _ in self.train_list + self.test_list] + [self.meta["filename"]]
            return all(os.path.isfile(os.path.join(folder, n)) for n in names)

        def _load_meta(self) -> None:
            with open(os.path.join(self.root, self.base_folder, self.meta["filename"]), "rb") as f:
                data = pickle.load(f, encoding="latin1")
            self.classes = data[self.meta["key"]]
            self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    return Unverified


def split(n_train: int, fit: int, validation: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fixed fitting/validation split: a permutation of ``range(n_train)`` from ``seed``.

    Fixed across training seeds (the paper's 40,000/10,000 split is one split); the
    split seed is a cohort parameter, not the training seed.
    """
    if fit + validation > n_train or fit < 1 or validation < 0:
        raise ValueError(
            f"split fit={fit}, validation={validation} needs 1 <= fit and fit + validation <= {n_train} training images"
        )
    order = np.random.default_rng(seed).permutation(n_train)
    return np.sort(order[:fit]), np.sort(order[fit : fit + validation])


def write_archive(path: str | os.PathLike[str], *, train: int, test: int, classes: int = 100, seed: int = 0) -> Path:
    """Write a small archive in the official format (tests, CPU runs): random images,
    labels cycling through ``classes`` fine and ``classes // 5`` coarse classes."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def batch(n: int, label: bytes) -> dict:
        fine = [int(i) for i in rng.integers(0, classes, n)]
        # Class-dependent mean colour, so a probe has something to learn.
        base = (np.array(fine)[:, None] * 37 % 200).astype(np.int64)
        data = np.clip(base + rng.integers(0, 56, (n, 3072)), 0, 255).astype(np.uint8)
        return {
            "filenames": [f"img_{i:05d}.png" for i in range(n)],
            "batch_label": label,
            "fine_labels": fine,
            "coarse_labels": [f // 5 for f in fine],
            "data": data,
        }

    meta = {
        "fine_label_names": [f"class_{i}" for i in range(classes)],
        "coarse_label_names": [f"super_{i}" for i in range(max(1, classes // 5))],
    }
    members = {
        "train": batch(train, b"training batch 1 of 1"),
        "test": batch(test, b"testing batch 1 of 1"),
        "meta": meta,
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            blob = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-100-python/{name}")
            info.size, info.mtime = len(blob), 0
            tar.addfile(info, io.BytesIO(blob))
    return path


if __name__ == "__main__":  # the tool lives with the other command lines
    from stateaware.commands.cifar_archive import main

    raise SystemExit(main())
