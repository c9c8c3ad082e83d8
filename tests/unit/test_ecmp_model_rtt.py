"""ecmp-vs-adaptive's upper model holds TCP's RTT bias (`rtt_weights`, emu/models/ecmp.py).

The recorded run (tests/unit/data/ecmp_run_rtt_bias.json, its `_source` says how
it was made) is faithful and failed the ECMP model check against unweighted
proportional fairness: 0.667 against 0.658 + 0.008. Its flows' own RTTs
(iperf3's mean_rtt) say why: a flow on a short or uncongested path has the
shorter round trip and takes more than an equal share, as TCP does (rate ~
1/RTT^a, Lakshman & Madhow 1997), and those are the flows that cost the fabric
least. Weighted by 1/RTT^2 the model predicts each flow's share better and the
run passes.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from emu.models import ecmp, flow

from .ecmp_recorded import band, load, model_inputs

RUN = load("ecmp_run_rtt_bias.json")


def _band(rtts):
    patterns, matrices, paths, acks, ideal = model_inputs(RUN)
    on_paths, _k = ecmp.ecmp_model_on_paths(
        patterns, matrices, paths, acks, ideal, RUN["ack_load"]["alone_bps"], rtts
    )
    return band(RUN, on_paths)


def test_weighted_proportional_fairness_gives_each_flow_its_weight_on_a_shared_link():
    assert flow.proportional_fair_rates(
        [[("a", "b")], [("a", "b")]], weights=[2.0, 1.0]
    ) == pytest.approx([2 / 3, 1 / 3], abs=1e-5)
    # A two-link flow against two one-link flows (Kelly's example): unweighted it
    # gets 1/3 of each link; weight 2 buys it the price of both links, half of each.
    rates = flow.proportional_fair_rates([[1, 2], [1], [2]], weights=[2.0, 1.0, 1.0])
    assert rates == pytest.approx([0.5, 0.5, 0.5], abs=1e-5)
    assert flow.proportional_fair_rates([[1, 2], [1], [2]]) == pytest.approx(
        [1 / 3, 2 / 3, 2 / 3], abs=1e-5
    )


def test_rtt_weights_are_inverse_square_with_mean_one_and_none_when_an_rtt_is_missing():
    weights = flow.rtt_weights([0.01, 0.02])
    assert weights == pytest.approx([1.6, 0.4])
    assert flow.rtt_weights([0.01, 0.0]) is None
    assert flow.rtt_weights([]) is None


def test_unweighted_proportional_fairness_fails_the_recorded_run():
    got = _band(None)
    assert f"{got.measured:.3f}" == "0.667"
    assert not got.holds, got
    assert f"{got.high:.3f}" == "0.658"


def test_the_rtt_weighted_model_passes_the_recorded_run():
    got = _band(RUN["ecmp_flow_rtt_s"])
    assert f"{got.measured:.3f}" == "0.667"
    assert got.holds, got


def test_the_rtt_weights_predict_each_flows_share_better_than_equal_weights():
    # Not only the sum: flow by flow, the measured shares sit closer to the
    # RTT-weighted allocation than to the unweighted one (the mean absolute
    # error of the shares, over all 15 runs).
    patterns, _matrices, paths, _acks, _ideal = model_inputs(RUN)
    errors = {"equal": [], "rtt": []}
    for p in patterns:
        for taken, rtt, got in zip(paths[p], RUN["ecmp_flow_rtt_s"][p], RUN["ecmp_flow_bps"][p]):
            links = [flow.links_of(n) for n in taken]
            share = np.array(got) / sum(got)
            for name, weights in (("equal", None), ("rtt", flow.rtt_weights(rtt))):
                rates = np.array(flow.proportional_fair_rates(links, weights=weights))
                errors[name].append(float(np.abs(rates / rates.sum() - share).sum()))
    assert statistics.mean(errors["rtt"]) < 0.85 * statistics.mean(errors["equal"]), errors
