# Two commands do all the set-up on a fresh machine (see README.md):
#   make run         install into .venv, run the main job (confirm44) on this machine's default
#                    profile, then write the report (results/report/report.md)
#   make test        install into .venv, then run the whole test suite (what CI runs): the tests,
#                    lint (ruff), types (mypy), the docs site (mkdocs --strict) and its code blocks
#   make test-quick  the same without the tests marked slow or slurm: the tier for a quick check
# `make install` installs every extra (`.[all]`). On Linux without an NVIDIA device it first takes
# torch and torchvision from PyTorch's CPU index (TORCH_INDEX), not the default index's CUDA build
# and its nvidia-* wheels; GPU=1 or GPU=0 overrides the check (install/torch_wheels.py says which,
# in one line, and installs as before where torch is already importable or the index is unreachable).
# Only the test targets fill the local wheel caches the tests install from: the [analysis] extra's
# (a test installs it alone into a fresh venv, online once, then offline) and the GPU lease's
# locked wheels for this Python (bench/gpu-wheels.lock, for tests/bench/test_gpu_run.py's CPU dry run).
# The venv sees system site-packages, so an already installed torch/jax is reused rather
# than downloaded again; whatever is missing is installed from pyproject.toml. That cannot
# hide a missing dependency: `make test` first runs tests/repo/test_dependencies.py, which fails
# when the code or the tests import a module no declared dependency provides, or when a
# declared one is absent or outside its range — so a machine with an empty base Python
# behaves like this one. (The tests themselves never rely on the base interpreter: the
# nested venvs some tests build see exactly this .venv's packages, or only the wheel cache.)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
COHORT ?= confirm44
# Hydra overrides of the launch, e.g. make run ARGS='processes=12' (a bare processes=12 would
# set a make variable, which the launch never sees).
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for the suite (make test JOBS=8 on a larger machine; JOBS=0 runs it in
# one process). Each keeps to one torch thread (tests/conftest.py), so one per core.
JOBS ?= 2
# auto: nvidia-smi decides; 0: PyTorch's CPU wheels; 1: the default index's (CUDA on Linux).
GPU ?= auto
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
QUICK := not slow and not slurm

.PHONY: install test-caches run test test-quick lint docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py install/torch_wheels.py
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) install/torch_wheels.py --gpu $(GPU) --index $(TORCH_INDEX)
	$(PY) -m pip install --quiet -e '.[all]'
	touch $@

# The wheel caches only the tests install from; a user running `make run` never needs them.
test-caches: $(VENV)/.test-caches

$(VENV)/.test-caches: $(VENV)/.installed tests/wheel_cache.py bench/gpu-wheels.lock
	$(PY) tests/wheel_cache.py
	$(PY) bench/gpu_wheels.py fill-cache
	touch $@

run: install
	$(PY) -m stateaware cohort=$(COHORT) $(ARGS)
	$(PY) -m stateaware.analysis report

test: install test-caches
	$(PY) -m pytest -q -p no:cacheprovider tests/repo/test_dependencies.py
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)

test-quick: install test-caches
	$(PY) -m pytest -q -p no:cacheprovider tests/repo/test_dependencies.py
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup -m "$(QUICK)" $(PYTEST_ARGS)

# The checks test_lint.py and test_docs.py run, on their own (pre-commit runs the same).
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

docs: install
	$(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info
