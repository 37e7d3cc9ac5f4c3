"""``preserve="offload"``: a whole snapshot kept in host memory instead of device memory.

The contract is ``whole``'s (NOTE [ Replay transaction ] in checkpoint.py): the snapshot
is taken before the segment's forward and never written; a replay runs on a private
device copy of it that the live tensor's ``.data`` points at, so the live storage is
neither read nor written by the replay. Only where the snapshot lives differs:

* CUDA: a pinned host buffer, filled by a device-to-host copy queued on a side stream.
  The compute stream waits on that copy's event before the segment runs (the segment may
  write the tensor at once), so there is no host synchronisation; the device keeps no
  bytes for the snapshot between forward and backward. A replay copies it back
  (host-to-device, asynchronous from pinned memory) into a temporary device tensor.
* CPU: host and device are the same memory, so the snapshot is a plain copy and the
  option costs what ``whole`` costs. It exists so that a plan made on a GPU card runs, and
  is tested for correctness, on a CPU.
"""

from __future__ import annotations

from typing import cast

import torch

from stateaware.torch_replay.preserve import _is_wrapper, _Whole

__all__ = ["engine", "host_is_device"]

_side_streams: dict[torch.device, torch.cuda.Stream] = {}


def engine(live: torch.Tensor, name: str) -> _Whole:
    """The offload engine for ``live`` (see ``preserve.make_engine``): on a CPU, and for the
    tensors ``whole`` handles specially (wrapper subclasses, non-leaf tensors), ``_Whole``."""
    if live.device.type != "cuda" or _is_wrapper(live) or live.grad_fn is not None:
        return _Whole(live, name)
    return _Offload(live, name)


def host_is_device(device: torch.device | str) -> bool:
    """True where an offloaded snapshot occupies the same memory as the device's tensors."""
    return torch.device(device).type != "cuda"


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    # One side stream per device, reused: creating a stream per segment costs more than the copy.
    stream = _side_streams.get(device)
    if stream is None:
        stream = _side_streams[device] = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # unannotated in torch
    return stream


class _Offload(_Whole):
    """Whole snapshot in pinned host memory (CUDA only; see the module docstring)."""

    kind = "offload"

    def __init__(self, live: torch.Tensor, name: str):  # noqa: D107 — _Whole's fields, host snapshot
        self.live, self.name = live, name
        self.inner, self.stand_in, self._stand, self._outside = [], False, None, None
        source = live.detach()
        self.snapshot = torch.empty_strided(
            source.shape, source.stride(), dtype=source.dtype, device="cpu", pin_memory=True
        )
        compute, side = torch.cuda.current_stream(source.device), _side_stream(source.device)
        side.wait_stream(compute)  # the copy reads the state as the forward will see it
        with torch.cuda.stream(side):
            self.snapshot.copy_(source, non_blocking=True)
        compute.wait_stream(side)  # the segment may overwrite the tensor: not before it is read
        self.retained_bytes = 0  # on the device; the host holds snapshot.nbytes
        self.host_bytes = self.snapshot.numel() * self.snapshot.element_size()

    def enter(self) -> None:
        replay = torch.empty_strided(
            self.live.shape, self.live.stride(), dtype=self.live.dtype, device=self.live.device
        )
        # pinned source: asynchronous on the compute stream; snapshot is always set by __init__
        replay.copy_(cast(torch.Tensor, self.snapshot), non_blocking=True)
        self._outside = self.live.data
        self.live.data = replay
