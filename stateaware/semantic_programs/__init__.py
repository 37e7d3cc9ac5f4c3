"""The semantic cohort's programs (paper §5, Table 2): five families in Torch and JAX,
a float64 oracle, and runners that turn each (family, precision, method) into one record.

Torch and JAX are imported only by the modules that run them (``torch_programs``,
``jax_programs``), so ``families`` and ``oracle`` load with NumPy alone.
"""

from stateaware.semantic_programs.families import (
    FAMILIES,
    HIDDEN_FAMILIES,
    JAX_METHODS,
    PRECISIONS,
    TORCH_METHODS,
)
from stateaware.semantic_programs.seed_key import CHECK, records_per_seed, run_seed

__all__ = [
    "FAMILIES",
    "HIDDEN_FAMILIES",
    "PRECISIONS",
    "TORCH_METHODS",
    "JAX_METHODS",
    "CHECK",
    "records_per_seed",
    "run_seed",
]
