"""Recorded ecmp-vs-adaptive runs (tests/unit/data/) as the model check's inputs, and a
context that records the checks: shared by the tests of the ECMP model check."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from scenarios import ecmp_vs_adaptive as eva

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
    matrices = {
        p: [[tuple(f.split("->")) for f in flows] for flows in run["matrices"][p]] for p in patterns
    }
    paths = {p: [[x.split() for x in r] for r in run["ecmp_paths"][p]] for p in patterns}
    acks = {p: [[x.split() for x in r] for r in run["ecmp_ack_paths"][p]] for p in patterns}
    ideal = {ast.literal_eval(k): v for k, v in run["nonblocking_runs_bps"].items()}
    return patterns, matrices, paths, acks, ideal


def check(run: dict, on_paths: dict, k: float):
    """The ECMP model check's (passed, value, expected) on `run` against `on_paths`."""
    patterns, matrices, _paths, _acks, ideal = model_inputs(run)
    keys = [eva.fan_in(f) for p in patterns for f in matrices[p]]
    c = CheckRecorder()
    eva._check_ecmp_model(c, patterns, run["normalised_ecmp"], on_paths, keys, ideal, k)
    return c.checks[NAME]
