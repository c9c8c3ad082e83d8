"""Analytical models that scenarios, labs and benches share, each with its sources named.

One module per model, pure (numbers and paths in, numbers out), unit-tested in
tests/unit/test_models_*.py, test_incast_model.py and test_link_flap_model.py: `flow`
(how long-lived flows share links), `dcqcn` (DCQCN's fluid model of an incast's queue
and the queue's statistics), `collective` (the bytes and link time of collectives on a
rail-optimized fabric), `flap` (goodput with a damped link over every ECMP hash outcome,
less TCP's RTO backoff), `loss_recovery` (go-back-N's goodput under loss). A
scenario imports a shared model from here, never from another scenario
(tests/unit/test_seams.py).
"""
