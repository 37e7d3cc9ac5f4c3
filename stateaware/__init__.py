"""stateaware: state-aware activation recomputation with replay contracts.

The library (replay contract, preservation engines, planner, Torch and JAX replay) lives
in subpackages imported where used; this package import stays light so that the
launcher, the worker and ``python -m stateaware.analysis`` start fast.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
