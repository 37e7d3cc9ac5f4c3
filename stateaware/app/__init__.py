"""The CIFAR-100 dense-queue application (paper §12, Table 9, Figure 3C).

``data``    the official CIFAR-100 python archive read through torchvision, the fixed
            fitting/validation split, seeded augmentation; a writer of small archives
            in the same format for tests and CPU runs.
``model``   the CIFAR-adapted ResNet18 (3x3 stem, stride 1, no max-pool) split into the
            query encoder's segments.
``moco``    query/momentum encoders, the FP32 negative queue with strict enqueue, and one
            training step under each of the seven methods.
``scores``  the frozen-encoder linear probe and the canonical test-score file.
``protocol``  the cohort's protocol on plain dicts: methods, processes, per-profile knobs,
            card shape check and budget (imports nothing heavy).
``cifar_process``  what one (seed, method) process runs, writing through a callable.
``encoder_card``  the encoder's profile card and its freeze command.

Heavy imports (torch, torchvision) live in those modules; this package imports nothing.
"""

__all__: list[str] = []
