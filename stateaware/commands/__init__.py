"""The command line: every program's parser and handlers, and nothing else.

The domain modules (the analysis, the planner, the app, the cost runtime) export
functions; the programs that parse arguments and print results live here, one module
per program, imported only when that program runs:

- ``analysis``: ``python -m stateaware.analysis`` (the ``stateaware-analysis`` script),
  one parser with one subcommand and one handler per command;
- ``plan``: ``python -m stateaware.plan`` (``stateaware-plan``), a policy for a profile card;
- ``sections``: the report sections printed alone (``python -m stateaware.analysis.timing``
  and ``.application``, which the GPU bench scripts run);
- ``cifar_archive``, ``encoder_card``, ``freeze_cards``: the tools behind
  ``python -m stateaware.app.data``, ``stateaware.app.encoder_card`` and
  ``stateaware.cost_runtime.freeze``;
- ``arguments``: the flags they share, spelled and named once.

Named ``commands`` rather than ``cli`` because ``stateaware.cli`` is the Hydra entry
point (``python -m stateaware``). The old ``python -m`` paths are forwarding modules: they
stay what users and ``conf/`` type, and run the tool from here.
"""
