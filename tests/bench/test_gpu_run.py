"""The CPU dry run of bench/gpu_run.sh: the GPU lease's wiring, end to end, with no GPU and no network.

CI's interpreter runs the script with ``HARDWARE=cpu`` under an import blocker (a
``sitecustomize`` hiding hydra, omegaconf, antlr4, yaml, submitit, cloudpickle, duckdb and
jax from the base site-packages, as the bare GPU image lacks them), so every one of those
imports must resolve from the wheels the script installs with ``pip --no-index --target``.
The wheels come from the cache ``bench/gpu_wheels.py fill-cache`` keeps by the lock's hash
(``make install`` fills it; online once, then offline); only where that cache is empty and
no network can fill it is the test skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_wheels", REPO / "bench" / "gpu_wheels.py")
assert _spec is not None and _spec.loader is not None
gpu_wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_wheels)

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
HIDDEN = ("hydra", "omegaconf", "antlr4", "yaml", "submitit", "cloudpickle", "duckdb", "jax")
OUTPUTS = {"summary.md", "report.md", "figures", "records.tar", "env.txt", "nvidia-smi.txt", "run.log", "lock.txt"}

BLOCKER = textwrap.dedent(
    f'''
    """Hide {", ".join(HIDDEN)} from the base site-packages: a bare GPU image lacks them."""
    import importlib.machinery, site, sys
    from pathlib import Path

    _HIDDEN = {set(HIDDEN)!r}
    _BASE = [Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]]

    def _outside_base(entry):
        path = Path(entry or ".").resolve()
        return not any(path == b or b in path.parents for b in _BASE)

    class _Blocker:
        def find_spec(self, name, path=None, target=None):
            if path is not None or name not in _HIDDEN:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if _outside_base(p)])
            if spec is None:
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the dry run's blocker)", name=name)
            return spec

    sys.meta_path.insert(0, _Blocker())
    '''
)


def _blocker(tmp_path: Path) -> Path:
    folder = tmp_path / "blocker"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return folder


def _wheels(tmp_path: Path) -> Path:
    """This interpreter's locked wheels (from the cache) and the checkout's wheel, offline
    when the cache is full; skips only when it is empty and cannot be filled."""
    if not gpu_wheels._cache_complete(gpu_wheels.cache_dir(PYTHON), gpu_wheels.locked()):
        try:
            gpu_wheels.fill_cache(PYTHON)
        except subprocess.CalledProcessError as e:
            pytest.skip(
                f"no GPU wheel cache at {gpu_wheels.cache_dir(PYTHON)} and pip could not fill it (no network?): "
                f"exit {e.returncode}; run `python bench/gpu_wheels.py fill-cache` where there is network"
            )
    return gpu_wheels.fetch(PYTHON, tmp_path / "wheels")


def _offline_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(_blocker(tmp_path)), PYTHON=sys.executable)
    # Any download would go to a closed port: the dry run must install nothing from the network.
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[proxy] = "http://127.0.0.1:9"
    env.pop("PYTHONSAFEPATH", None)
    return env


def test_blocker_hides_the_base_packages(tmp_path: Path) -> None:
    env = _offline_env(tmp_path)
    probe = (
        f"import importlib\nfor n in {HIDDEN!r}:\n"
        "  try: importlib.import_module(n); print(n, 'imported')\n"
        "  except ModuleNotFoundError: print(n, 'hidden')"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:-1] == [f"{n} hidden" for n in HIDDEN]


@pytest.mark.slow
def test_cpu_dry_run_installs_offline_and_writes_the_eight_outputs(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path)
    out = tmp_path / "out"
    env = _offline_env(tmp_path)
    env.update(
        HARDWARE="cpu",
        WHEELS=str(wheels),
        OUT=str(out),
        STEPS="1",
        WARMUP="1",
        CIFAR_ARGS="cohort.params.protocols.cpu.fit=64 cohort.params.protocols.cpu.validation=32 "
        "cohort.params.protocols.cpu.test=64 launcher.max_parallel=7",  # the wiring, not timings: overlap the seven
    )
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_run.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert set(os.listdir(out)) == OUTPUTS
    env_txt = (out / "env.txt").read_text()
    for module in ("hydra", "omegaconf", "antlr4", "yaml", "submitit", "cloudpickle", "duckdb", "pynvml", "stateaware"):
        (line,) = [x for x in env_txt.splitlines() if x.strip().startswith(f"{module} ")]
        assert "/site/" in line, line  # from the installed wheels, not the base site-packages
    assert "CUBLAS_WORKSPACE_CONFIG :4096:8" in env_txt
    summary = (out / "summary.md").read_text()
    from stateaware.analysis.sections.cifar_application import PAPER_T9
    from stateaware.analysis.sections.timing import PAPER_T6

    fair_rows = [x for x in summary.splitlines() if x.startswith("| ") and x.split(" | ")[0][2:] in PAPER_T6]
    assert [r.split(" | ")[0][2:] for r in fair_rows[:7]] == list(PAPER_T6)
    assert all(f"| {PAPER_T6[m][1]:.2f} |" in r for m, r in zip(PAPER_T6, fair_rows[:7], strict=True))
    cifar_rows = [x for x in summary.splitlines() if x.count(" | ") == 4 and x.split(" | ")[0][2:] in PAPER_T9]
    assert sorted(r.split(" | ")[0][2:] for r in cifar_rows) == sorted(PAPER_T9)
    with tarfile.open(out / "records.tar") as tar:
        names = tar.getnames()
    assert "Ours: fair44 on CPU (cpu profile: its own cells and budget), 1 + 1 steps." in summary
    assert any(n.startswith("./fair44/") and n.endswith(".parquet") for n in names)
    assert any(n.startswith("./cifar/") and n.endswith(".parquet") for n in names)
    assert not any("/.snapshots/" in n for n in names)
    assert (out / "lock.txt").read_text() == (wheels / "lock.txt").read_text()


def test_lock_pins_every_needed_distribution_inside_pyprojects_range() -> None:
    from packaging.requirements import Requirement

    pins = gpu_wheels.locked()
    for spec in gpu_wheels.requirements():
        req = Requirement(spec)
        line = pins[gpu_wheels._norm(req.name)]
        version = line.split("==")[1].split()[0]
        assert req.specifier.contains(version), (spec, line)
    # Every pin carries a hash; a compiled wheel one per locked Python.
    assert all("--hash=sha256:" in line for line in pins.values())
    assert pins["duckdb"].count("--hash=") == len(gpu_wheels.LOCKED_PYTHONS)
    assert set(pins) >= {"antlr4-python3-runtime", "pyyaml", "cloudpickle"}


def test_install_refuses_a_wheel_that_is_not_the_locked_one(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"not the locked bytes")
    (wheels / "lock.txt").write_text("# test\nsource_hash 00\n" + "0" * 64 + "  demo-1.0-py3-none-any.whl\n")
    with pytest.raises(SystemExit, match="do not match lock.txt's SHA-256: \\['demo-1.0-py3-none-any.whl'\\]"):
        gpu_wheels.install(wheels, tmp_path / "site")
    assert not (tmp_path / "site").exists()
    (wheels / "extra-1.0-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(SystemExit, match="not those lock.txt lists \\(\\['extra-1.0-py3-none-any.whl'\\]\\)"):
        gpu_wheels.install(wheels, tmp_path / "site")
