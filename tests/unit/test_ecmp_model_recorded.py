"""ecmp-vs-adaptive's ECMP model check on a recorded run whose ACK load came out 0.

The run (tests/unit/data/ecmp_run_ack_load_0.json, its `_source` says how it was
made) failed "ECMP: throughput matches the flow-level model on the paths the hash
chose": 0.639 against an upper bound of 0.608 + 0.019. The bound was max-min's
figure, not proportional fairness's: `normalised_throughput` fell back to its
default allocation (max-min) whenever the ACK load was 0, so a run whose lone
flow measured no faster than the non-blocking switch's flows lost the upper
half of its interval. Proportional fairness on the same paths is 0.624.
The model and the band are emu/models/ecmp.py's (`ecmp_model_on_paths`, `model_band`).
"""

from __future__ import annotations

import statistics

import pytest

from emu.models import ecmp, flow

from .ecmp_recorded import band, load, model_inputs

RUN = load("ecmp_run_ack_load_0.json")


def _model():
    patterns, matrices, paths, acks, ideal = model_inputs(RUN)
    return ecmp.ecmp_model_on_paths(
        patterns, matrices, paths, acks, ideal, RUN["ack_load"]["alone_bps"]
    )


def test_the_recorded_run_estimates_no_ack_load():
    _on_paths, k = _model()
    assert k == 0.0


def test_the_upper_bound_is_proportional_fairness_when_the_ack_load_is_0():
    patterns, matrices, paths, acks, _ideal = model_inputs(RUN)
    on_paths, _k = _model()
    low = [x for p in patterns for x in on_paths["max-min"][p]]
    high = [x for p in patterns for x in on_paths["proportional"][p]]
    plain_pf = [
        flow.normalised_throughput(flows, taken, flow.proportional_fair_rates)
        for p in patterns
        for flows, taken in zip(matrices[p], paths[p])
    ]
    # The old computation gave max-min's 0.608 here as the upper figure.
    assert statistics.mean(low) == pytest.approx(0.608, abs=5e-4)
    assert high == pytest.approx(plain_pf, abs=1e-4)
    assert statistics.mean(high) == pytest.approx(0.624, abs=5e-4)
    assert all(h >= m - 1e-6 for h, m in zip(high, low))
    # No ACK load with ACK paths given is proportional fairness all the same.
    flows, taken, back = matrices[patterns[0]][0], paths[patterns[0]][0], acks[patterns[0]][0]
    assert flow.normalised_throughput(flows, taken, ack_paths=back, ack_load=0.0) == pytest.approx(
        flow.normalised_throughput(flows, taken, flow.proportional_fair_rates), abs=1e-6
    )


def test_the_recorded_run_passes_the_corrected_check():
    on_paths, _k = _model()
    got = band(RUN, on_paths)
    assert f"{got.measured:.3f}" == "0.639"
    assert got.holds, got
    # With max-min as the upper figure (the old computation) the same run fails:
    # 0.639 above 0.608 + 0.019.
    collapsed = {"max-min": on_paths["max-min"], "proportional": on_paths["max-min"]}
    old = band(RUN, collapsed)
    assert not old.holds
    assert (round(old.high, 3), round(old.slack_high, 3)) == (0.608, 0.019)
