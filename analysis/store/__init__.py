"""Store access and upkeep: the read-only views of a results folder (``views``), SQL over them
(``sql``), the checks an analysis runs first (``verify``) and each run's progress with its
Slurm jobs (``status``)."""
