"""Recorded ecmp-vs-adaptive runs (tests/unit/data/) as the ECMP model check's inputs, and a
context that records checks: shared by the tests of the ECMP model and its check."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from emu.models import ecmp
from emu.traffic import hedera

NAME = "ECMP: throughput matches the flow-level model on the paths the hash chose"


class CheckRecorder:
    """A scenario context that keeps each check's (passed, value, expected) by name."""

    def __init__(self):
        self.checks = {}

    def check(self, name, passed, value, expected):
        self.checks[name] = (passed, value, expected)

    def log(self, _msg):
        pass


def load(name: str) -> dict:
    return json.loads((Path(__file__).parent / "data" / name).read_text())


def model_inputs(run: dict):
    """(patterns, matrices, paths, ack paths, non-blocking runs) of a recorded run."""
    patterns = list(run["normalised_ecmp"])
    matrices = hedera.matrices_from_text({p: run["matrices"][p] for p in patterns})
    paths = hedera.paths_from_text({p: run["ecmp_paths"][p] for p in patterns})
    acks = hedera.paths_from_text({p: run["ecmp_ack_paths"][p] for p in patterns})
    ideal = {ast.literal_eval(k): v for k, v in run["nonblocking_runs_bps"].items()}
    return patterns, matrices, paths, acks, ideal


def band(run: dict, on_paths: dict):
    """The ECMP model check's band (emu/models/ecmp.py `model_band`) of `run` against `on_paths`."""
    patterns, matrices, _paths, _acks, ideal = model_inputs(run)
    return ecmp.model_band(patterns, run["normalised_ecmp"], on_paths, matrices, ideal)
