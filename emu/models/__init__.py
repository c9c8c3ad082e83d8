"""Analytical models that scenarios, labs and benches share, each with its sources named.

One module per model, pure (numbers and paths in, numbers out), unit-tested in
tests/unit/test_models_*.py, test_incast_model.py and test_link_flap_model.py: `flow`
(how long-lived flows share links), `dcqcn` (DCQCN's fluid model of an incast's queue
and the queue's statistics), `collective` (the bytes and link time of collectives on a
rail-optimized fabric), `flap` (goodput with a damped link over every ECMP hash outcome,
less TCP's RTO backoff), `loss_recovery` (go-back-N's goodput under loss),
`deadlock` (PAUSE refresh and XON, when a paused cycle stays frozen, the PFC
watchdog's detection bound, the fair-share floor under PFC), `hol_blocking` (the
victim's and the incast's shares under PFC or credit head-of-line blocking, from
the graph), `ecmp` (ECMP's collision model: random or traced shortest paths,
max-min to RTT-weighted fairness, and the band measured runs are held to),
`stats` (the significance tests those bands use: Student's t, chi-square,
Welch-Satterthwaite), `wire` (what frames weigh on the wire: TCP segments, a ping
stream, the scheduler's catch-up burst), `dragonfly` (minimal, Valiant and UGAL
routing's throughput on a dragonfly: Kim et al.'s closed forms and the fluid rates
of the paths emu installs). A
scenario imports a shared model from here, never from another scenario
(tests/unit/test_seams.py).
"""
