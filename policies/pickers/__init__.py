"""Picker plugins: choose one worker from the scored candidates (``max-score``,
``power-of-two``, ``random``, ``round-robin``, ``slo-cost``; ``seeding``: their ``seed``)."""
