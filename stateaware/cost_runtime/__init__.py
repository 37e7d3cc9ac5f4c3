"""The cost runtime (paper §8–§11): Torch workloads with state, seven methods, measurement.

Modules: ``workloads`` (the three workloads and their segments), ``methods`` (the seven
methods on the transactional checkpoint), ``measure`` (synchronized step time; peaks from
the CUDA allocator or the CPU profiler), ``method_steps`` (semantic checks, measured steps),
``profile`` (the profiling pass that writes a card), ``frozen_cards`` and ``freeze`` (frozen
cards named by digest), ``plans`` (per-method policies and budget positions), ``cells`` (the
timing protocol: grids, cell -> shape, card choice, budget placement, on plain dicts) and
``timing_process`` (what one timing process runs). Import the module you need; this package
imports nothing heavy.
"""

__all__ = ["METHODS"]

#: The seven methods of the timing cohorts (``methods.forward`` runs them). Defined here,
#: in the package that imports nothing heavy, so planning a run checks method names
#: without importing torch.
METHODS = ("eager", "whole", "regions", "functional", "agnostic", "eager_whole", "joint")
