"""Our transactional checkpoint inside other libraries' own checkpointing doors.

``stateaware.integrations.transformers``: Hugging Face models' decoder and encoder layers
(``enable(model, budget=...)``). Each integration imports its library inside its
functions, so ``stateaware`` imports with the core alone.
"""
