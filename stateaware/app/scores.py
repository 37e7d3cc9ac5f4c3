"""Canonical byte formats: the encoder checkpoint and the test-score file (paper §12).

Both are written so that equal contents give equal bytes, whatever produced them:

``encoder``  ``ENCODER_MAGIC``, then per state-dict entry in name order: the UTF-8 name,
             dtype and shape as one JSON line, then the tensor's little-endian bytes.
``scores``   ``SCORES_MAGIC``, then one 12-byte record per test image in official order:
             ``uint32`` index, ``uint16`` label, ``uint16`` predicted class, ``float32``
             cross-entropy (little-endian, IEEE bits as computed).

The probe is bound to its encoder by the encoder file's SHA-256: ``load_encoder``
refuses a file whose bytes no longer hash to the digest it is given.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "ENCODER_MAGIC",
    "SCORES_MAGIC",
    "SCORE_DTYPE",
    "write_encoder",
    "load_encoder",
    "write_scores",
    "read_scores",
    "sha256_file",
]

ENCODER_MAGIC = b"stateaware-cifar-encoder v1\n"
SCORES_MAGIC = b"stateaware-cifar-scores v1\n"
#: One test image's record in the score file.
SCORE_DTYPE = np.dtype([("index", "<u4"), ("label", "<u2"), ("pred", "<u2"), ("loss", "<f4")])


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of the file at ``path``, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _atomic_write(path: Path, chunks) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


def write_encoder(state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> str:
    """Write ``state`` (a state dict) canonically at ``path``; return its SHA-256."""

    def chunks():
        yield ENCODER_MAGIC
        for name in sorted(state):
            t = state[name].detach().cpu().contiguous()
            yield (
                json.dumps({"name": name, "dtype": str(t.dtype), "shape": list(t.shape)}, sort_keys=True) + "\n"
            ).encode()
            yield t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()

    _atomic_write(Path(path), chunks())
    return sha256_file(path)


def load_encoder(path: str | os.PathLike[str], sha256: str) -> dict[str, torch.Tensor]:
    """The state dict in the encoder file at ``path``, if its bytes hash to ``sha256``."""
    got = sha256_file(path)
    if got != sha256:
        raise ValueError(
            f"encoder checkpoint {path} hashes to {got[:16]}, not the bound {sha256[:16]}: "
            "the probe refuses an encoder other than the one training produced"
        )
    blob = Path(path).read_bytes()
    if not blob.startswith(ENCODER_MAGIC):
        raise ValueError(f"{path} is not a stateaware encoder file (bad header)")
    pos, out = len(ENCODER_MAGIC), {}
    while pos < len(blob):
        end = blob.index(b"\n", pos)
        head = json.loads(blob[pos:end])
        pos = end + 1
        dtype = getattr(torch, head["dtype"].removeprefix("torch."))
        n = int(np.prod(head["shape"])) if head["shape"] else 1
        size = n * torch.empty(0, dtype=dtype).element_size()
        arr = np.frombuffer(
            blob, dtype=torch.empty(0, dtype=dtype).numpy().dtype.newbyteorder("<"), count=n, offset=pos
        )
        out[head["name"]] = torch.from_numpy(arr.copy()).reshape(head["shape"])
        pos += size
    return out


def write_scores(labels: np.ndarray, preds: np.ndarray, losses: np.ndarray, path: str | os.PathLike[str]) -> str:
    """Write the test-score file at ``path``; return its SHA-256."""
    n = len(labels)
    if not len(preds) == len(losses) == n:
        raise ValueError(
            f"labels, preds and losses must have one entry per image; got {n}, {len(preds)}, {len(losses)}"
        )
    rec = np.empty(n, dtype=SCORE_DTYPE)
    rec["index"] = np.arange(n)
    rec["label"] = labels
    rec["pred"] = preds
    rec["loss"] = np.asarray(losses, dtype=np.float32)
    _atomic_write(Path(path), [SCORES_MAGIC, rec.tobytes()])
    return sha256_file(path)


def read_scores(path: str | os.PathLike[str]) -> np.ndarray:
    """The records of a test-score file (``SCORE_DTYPE``)."""
    blob = Path(path).read_bytes()
    if not blob.startswith(SCORES_MAGIC):
        raise ValueError(f"{path} is not a stateaware test-score file (bad header)")
    return np.frombuffer(blob, dtype=SCORE_DTYPE, offset=len(SCORES_MAGIC))
