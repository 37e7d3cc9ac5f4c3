# Two commands do all the set-up on a fresh machine (see README.md):
#   make run    install into .venv, run the main job (confirm44) on this machine's default
#               profile, then write the report (results/report/report.md)
#   make test   install into .venv, then run the test suite
# The venv sees system site-packages, so an already installed torch/jax is reused rather
# than downloaded again; whatever is missing is installed from pyproject.toml. That cannot
# hide a missing dependency: `make test` first runs tests/test_dependencies.py, which fails
# when the code or the tests import a module no declared dependency provides, or when a
# declared one is absent or outside its range — so a machine with an empty base Python
# behaves like this one. (The tests themselves never rely on the base interpreter: the one
# nested venv a Slurm test builds sees exactly this .venv's packages.)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
COHORT ?= confirm44
PYTEST_ARGS ?=

.PHONY: install run test clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

run: install
	$(PY) -m stateaware cohort=$(COHORT)
	$(PY) -m stateaware.analysis report

test: install
	$(PY) -m pytest -q -p no:cacheprovider tests/test_dependencies.py
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
