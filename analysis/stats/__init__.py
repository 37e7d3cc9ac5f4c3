"""The statistics of the analysis: the paired-ratio estimators, the prespecified comparisons
(the ``comparisons`` table), the comparison of two runs, and the stability of the timings.

``stateaware.analysis.stats`` was one module, the estimators: its names are re-exported here
(the same objects), so ``from stateaware.analysis.stats import paired_ratio`` keeps working.
"""

from stateaware.analysis.stats import estimators as _estimators
from stateaware.analysis.stats.estimators import *  # noqa: F403
from stateaware.analysis.stats.estimators import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    """Any other name of the estimators (one outside ``__all__`` a script reached for)."""
    return getattr(_estimators, name)
