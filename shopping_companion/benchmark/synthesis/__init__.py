"""Shopping Companion Bench construction, the five steps of §4 (see :mod:`shopping_companion.benchmark.synth`)."""
