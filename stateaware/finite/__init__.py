"""The finite-program domain: the ground truth every other engine is checked against.

Programs are data over explicit byte storage (``.program``, ``.generate``); the
interpreter builds a version graph as it executes (``.interpret``); derivatives come
three independent ways (``.derivatives``); byte-level replay checks eq. 2
(``.replay``); the five preservation engines of Table 1 recover what backward needs
(``.engines``); admission refuses float gradients of integer-writing programs
(``.admission``). Pure NumPy.
"""

from stateaware.finite.admission import Admission, UnsupportedProgram, admit
from stateaware.finite.derivatives import complex_step, forward_jacobian, graph_output, reverse_trace, reverse_versions
from stateaware.finite.engines import ENGINES, recover, retain
from stateaware.finite.generate import integer_write_variant, random_program, workload_program
from stateaware.finite.interpret import execute, storage_from_bytes
from stateaware.finite.program import Program, describe
from stateaware.finite.replay import region_undo, snapshot_replay, wrong_rng_replay

__all__ = [
    "ENGINES",
    "Admission",
    "Program",
    "UnsupportedProgram",
    "admit",
    "complex_step",
    "describe",
    "execute",
    "forward_jacobian",
    "graph_output",
    "integer_write_variant",
    "random_program",
    "recover",
    "region_undo",
    "retain",
    "reverse_trace",
    "reverse_versions",
    "snapshot_replay",
    "storage_from_bytes",
    "workload_program",
    "wrong_rng_replay",
]
