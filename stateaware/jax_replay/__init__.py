"""JAX admission (paper §5): functional code under ``jax.checkpoint``; in-place item
assignment and impure holders recorded as rejections with the framework's own error."""

from stateaware.jax_replay.admit import PHASES, Admission, admit, read_back

__all__ = ["admit", "read_back", "Admission", "PHASES"]
