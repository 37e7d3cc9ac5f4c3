"""Preflight of a GPU lease (seconds): every import resolves, CUDA is there, one tiny step runs.

    python3 bench/gpu_preflight.py --site SITE --hardware h100 --env OUT/env.txt

The modules the image must provide are imported from wherever the image has them; the ones
``bench/gpu_wheels.py install`` put into ``SITE`` must resolve from there, or the run would
measure some other copy. Then, on ``--hardware`` other than ``cpu``, ``torch.cuda`` must see a
device, and one replayed checkpoint step (forward, backward, stateful buffer restored) runs on
it. ``--env`` gets the snapshot a reader of the results needs: versions, the device, the TF32
and cuDNN settings a fresh process starts with, ``CUBLAS_WORKSPACE_CONFIG``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
from pathlib import Path

#: Provided by the GPU image (module, distribution).
IMAGE = (("torch", "torch"), ("torchvision", "torchvision"), ("numpy", "numpy"), ("pyarrow", "pyarrow"))
IMAGE += (("scipy", "scipy"), ("matplotlib", "matplotlib"), ("tqdm", "tqdm"))

#: Installed from the locked wheels into the site.
SITE = (("hydra", "hydra-core"), ("omegaconf", "omegaconf"), ("antlr4", "antlr4-python3-runtime"), ("yaml", "PyYAML"))
SITE += (("submitit", "submitit"), ("cloudpickle", "cloudpickle"), ("duckdb", "duckdb"), ("pynvml", "nvidia-ml-py"))
SITE += (("stateaware", "stateaware"),)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def imports(site: Path) -> list[str]:
    """Import every module; ``name version path`` lines. Exits naming each failure."""
    lines, problems = [], []
    for group, modules in (("image", IMAGE), ("site", SITE)):
        for name, dist in modules:
            try:
                module = importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - every failure is reported, then the run stops
                problems.append(f"{name}: {type(e).__name__}: {e}")
                continue
            where = Path(module.__file__ or "?").resolve()
            if group == "site" and not where.is_relative_to(site.resolve()):
                problems.append(f"{name} imports from {where}, not from the installed wheels in {site}")
            lines.append(f"{name} {_version(dist)} {where}")
    if problems:
        raise SystemExit("preflight: imports failed:\n  " + "\n  ".join(problems))
    return lines


def tiny_step(device: str) -> str:
    """One replayed checkpoint step of a block with a stateful buffer, on ``device``."""
    import torch
    from torch import nn

    from stateaware.torch_replay import checkpoint

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(64, 64)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count += 1  # state the replay must restore, or it would count twice
            return torch.tanh(self.lin(x))

    block = Block().to(device)
    x = torch.randn(32, 64, device=device, requires_grad=True)
    checkpoint(block, x, state=[block]).sum().backward()
    if device != "cpu":
        torch.cuda.synchronize()
    if int(block.count.item()) != 1 or x.grad is None:
        raise SystemExit(
            f"preflight: the tiny step on {device} left count={block.count.item()}, grad={x.grad is not None}"
        )
    return f"tiny step on {device}: checkpointed forward and backward, buffer stepped once"


def environment(hardware: str, lines: list[str]) -> str:
    """The env.txt snapshot."""
    import torch

    out = [
        f"python {sys.version.split()[0]} ({sys.executable}) on {platform.platform()}",
        f"hardware profile {hardware}",
    ]
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.append(
            f"device {p.name}, {p.total_memory / 2**30:.1f} GiB, CUDA {torch.version.cuda}, "
            f"capability {p.major}.{p.minor}"
        )
    else:
        out.append("device: no CUDA device visible")
    out += [
        "settings a fresh process starts with (the cohorts set their own and record them):",
        f"  torch.backends.cuda.matmul.allow_tf32 {torch.backends.cuda.matmul.allow_tf32}",
        f"  torch.backends.cudnn.allow_tf32 {torch.backends.cudnn.allow_tf32}",
        f"  torch.backends.cudnn.deterministic {torch.backends.cudnn.deterministic}",
        f"  torch.backends.cudnn.benchmark {torch.backends.cudnn.benchmark}",
        f"  torch.are_deterministic_algorithms_enabled() {torch.are_deterministic_algorithms_enabled()}",
        f"  CUBLAS_WORKSPACE_CONFIG {os.environ.get('CUBLAS_WORKSPACE_CONFIG', '(unset)')}",
        "modules (name version path):",
    ]
    return "\n".join(out + [f"  {line}" for line in lines]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="the folder the wheels were installed into")
    parser.add_argument("--hardware", default="h100")
    parser.add_argument("--env", type=Path, default=None, help="write the environment snapshot here")
    args = parser.parse_args(argv)
    lines = imports(args.site)
    import torch

    device = "cpu"
    if args.hardware != "cpu":
        if not torch.cuda.is_available():
            raise SystemExit(
                "preflight: torch.cuda.is_available() is False: this run needs a GPU (HARDWARE=cpu: a dry run)"
            )
        device = "cuda"
    print(f"preflight: {len(lines)} imports resolve ({len(SITE)} from {args.site})")
    print("preflight: " + tiny_step(device))
    if args.env:
        args.env.write_text(environment(args.hardware, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
