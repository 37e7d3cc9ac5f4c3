"""Our transactional checkpoint inside other libraries' own checkpointing doors.

``stateaware.integrations.transformers``: Hugging Face models' decoder and encoder layers
(``enable(model, budget=...)``). An integration never imports its library: it works on
objects the user's code made with it (recognising their classes by qualified name), so
``stateaware`` installs and imports with the core alone.
"""
