"""Analytical models that scenarios, labs and benches share, each with its sources named.

One module per model, pure (numbers and paths in, numbers out), unit-tested in
tests/unit/test_models_*.py and test_incast_model.py: `flow` (how long-lived flows share
links), `dcqcn` (DCQCN's fluid model of an incast's queue). A
scenario imports a shared model from here, never from another scenario
(tests/unit/test_seams.py).
"""
