"""Package discovery only; every other setting lives in pyproject.toml.

cohorts/, analysis/ and conf/ are top-level folders installed as stateaware.cohorts,
stateaware.analysis and stateaware.conf (pyproject's package-dir), which setuptools'
declarative `packages.find` cannot express together with stateaware's own subpackages.
"""

from setuptools import find_packages, setup

MAPPED = {"stateaware.cohorts": "cohorts", "stateaware.analysis": "analysis", "stateaware.conf": "conf"}

packages = find_packages(include=["stateaware", "stateaware.*"])
for name, folder in MAPPED.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages)
