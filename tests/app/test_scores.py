"""Canonical encoder and test-score files: exact bytes, hash binding, augmentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stateaware.app import scores, train
from stateaware.app.model import cifar_resnet18


def test_score_file_bytes_are_exact(tmp_path):
    sha = scores.write_scores(
        np.array([3, 7]), np.array([3, 1]), np.array([0.5, 2.0], dtype=np.float32), tmp_path / "s.bin"
    )
    blob = (tmp_path / "s.bin").read_bytes()
    assert blob == (
        scores.SCORES_MAGIC
        + bytes([0, 0, 0, 0, 3, 0, 3, 0])
        + np.float32(0.5).tobytes()
        + bytes([1, 0, 0, 0, 7, 0, 1, 0])
        + np.float32(2.0).tobytes()
    )
    assert sha == scores.sha256_file(tmp_path / "s.bin")
    rec = scores.read_scores(tmp_path / "s.bin")
    assert rec["pred"].tolist() == [3, 1] and rec["loss"].tolist() == [0.5, 2.0]


def test_encoder_round_trips_and_is_bound_by_hash(tmp_path):
    torch.manual_seed(0)
    model = cifar_resnet18(10, width=2)
    sha = scores.write_encoder(model.state_dict(), tmp_path / "e.bin")
    assert scores.write_encoder(model.state_dict(), tmp_path / "f.bin") == sha  # same state, same bytes
    state = scores.load_encoder(tmp_path / "e.bin", sha)
    ref = model.state_dict()
    assert sorted(state) == sorted(ref)
    assert all(torch.equal(state[k], ref[k]) and state[k].dtype == ref[k].dtype for k in ref)
    with pytest.raises(ValueError, match="refuses"):
        scores.load_encoder(tmp_path / "e.bin", "0" * 64)


def test_cifar_stem_and_width():
    model = cifar_resnet18(10, width=4)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert model.layer4[0].conv1.out_channels == 32 and model.fc.in_features == 32
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert cifar_resnet18(5).layer1[0].conv1.in_channels == 64  # the paper's width: torchvision's layers


def test_augment_is_seeded_and_crops_from_the_padded_image():
    images = torch.arange(2 * 3 * 32 * 32, dtype=torch.int64).reshape(2, 3, 32, 32).remainder(256).to(torch.uint8)
    a = train.augment(images, 16, torch.Generator().manual_seed(1))
    b = train.augment(images, 16, torch.Generator().manual_seed(1))
    assert a.shape == (2, 3, 16, 16) and torch.equal(a, b)
    assert not torch.equal(a, train.augment(images, 16, torch.Generator().manual_seed(2)))
    # Every crop is a window of the zero-padded image: find crop 0 in it (or its mirror).
    padded = train.center(torch.nn.functional.pad(images, (4, 4, 4, 4)), 40)
    crop = a[0]
    found = any(
        torch.equal(padded[0, :, y : y + 16, x : x + 16], c)
        for y in range(25)
        for x in range(25)
        for c in (crop, crop.flip(2))
    )
    assert found


def test_deterministic_cross_entropy_matches_the_builtin():
    from stateaware.app.moco import cross_entropy

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40, dtype=torch.float64, generator=gen, requires_grad=True)
    t = torch.randint(0, 40, (6,), generator=gen)
    (g_ref,) = torch.autograd.grad(torch.nn.functional.cross_entropy(x, t), x)
    loss = cross_entropy(x, t)
    (g,) = torch.autograd.grad(loss, x)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(x, t), rtol=0, atol=1e-12)
    assert torch.allclose(g, g_ref, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(cross_entropy, (x, t))
