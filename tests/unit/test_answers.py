"""Typed management answers (emu/answers.py): both NIC engines' `stats` decode, keys
become the ints and tuples they stand for, and a missing field is named."""

from __future__ import annotations

import json

import pytest

from emu import answers
from emu.host import nicpath, rnic
from emu.host.rnic import NicConfig
from emu.proto import ofext
from emu.switch.adaptive import SelectMode

MAC = ("02:00:00:00:00:01", "02:00:00:00:00:02")
LANE = [f.name for f in answers.CreditLane.__dataclass_fields__.values()]
IP = ("10.0.0.1", "10.0.0.2")


def as_json(doc):
    """An answer as the management socket carries it (int keys become strings)."""
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("engine", ["python", "c"])
def test_either_nic_engine_s_stats_decode_with_queue_pairs_by_number(engine):
    if engine == "c" and nicpath._nicpath is None:
        pytest.skip("emu.host._nicpath not built")
    cls = rnic.Rnic if engine == "python" else nicpath.CRnic
    nic = cls(NicConfig(mac=MAC[0], ip=IP[0], rate_bps=10_000_000), now=0.0)
    nic.connect(100, 200, MAC[1], IP[1], 49152, 0.0)
    nic.post_send(100, 3000, 0.0)
    sent = 0
    while nic.next_frame(0.01) is not None:
        sent += 1
    stats = answers.NicStats.decode(as_json(nic.stats(0.01)))
    assert set(stats.send) == {100} and isinstance(stats.send[100], answers.SendQp)
    assert stats.send[100].tx_packets == sent >= 1
    assert stats.send[100].pending_messages == 1 and stats.send[100].completed == []
    assert stats.recv[100].rx_packets == 0 and stats.cnps_sent == 0
    assert (stats.recv[100].naks_sent, stats.recv[100].reorder_depth_max) == (0, 0)
    assert len(stats.paused_s) == 8 and stats.credit is None  # a PFC NIC has no lanes


def test_switch_counters_decode_queues_and_ports_as_numbers():
    queue = {
        "enqueued_packets": 5,
        "enqueued_bytes": 500,
        "tx_packets": 4,
        "tx_bytes": 400,
        "dropped_packets": 1,
        "dropped_bytes": 100,
        "watermark_bytes": 300,
    }
    buffer = {
        "size_bytes": 1 << 20,
        "shared_used_bytes": 0,
        "shared_watermark_bytes": 9000,
        "xoff_threshold_bytes": 40000,
        "drops": {"lossy_threshold": 2},
        "drops_by_queue": {"3:0": 2},
        "ecn_marks": {"3:3": 7},
        "xoff_sent": {"1:3": 4},
        "xon_sent": {"1:3": 4},
        "paused_upstream": ["1:3"],
        "ingress_bytes": {},
        "headroom_used_bytes": {},
        "egress_bytes": {},
        "egress_watermark_bytes": {"3:3": 6000},
        "credit_vl_bytes": 0,  # a field no reader needs is left out
    }
    doc = as_json(
        {
            "time": 1.5,
            "queues": {3: [queue] * 8},
            "kernel_rx_drops": {1: 0, 3: 0},
            "buffer": buffer,
            "watchdog": {"detected": 1, "restored": 1, "drops": 9, "stormed": ["2:3"]},
            "pfc": {"pause_rx": {"2:3": 11}, "pfc_tx_frames": {1: 4}, "paused_s": {1: [0.0] * 8}},
            "credit": {
                "links": {2: {3: {**{k: 0 for k in LANE}, "blocked_s": 0.25}}},
                "fc_tx_frames": {2: 40},
                "fc_rx_frames": {2: 38},
            },
            "malformed_frames": 0,
            "lost_frames": {3: 12},
            "adaptive": {  # the modes as the switch describes them (emu/switch/adaptive.py)
                "default": SelectMode(ofext.SELECT_MODE_ADAPTIVE, classes=0b1001).describe(),
                "groups": {7: SelectMode(ofext.SELECT_MODE_FLOWLET, gap_s=1e-4).describe()},
                "decisions": 20,
                "paused_skips": 3,
                "all_paused": 1,
                "picks": {1: 12, 2: 8},
                "ugal_decisions": 5,
                "ugal_nonminimal": 2,
            },
        }
    )
    c = answers.SwitchCounters.decode(doc)
    assert c.buffer.ecn_marks == {(3, 3): 7} and c.buffer.paused_upstream == {(1, 3)}
    assert c.pfc.pause_rx == {(2, 3): 11} and c.pfc.pfc_tx_frames == {1: 4}
    assert c.watchdog.stormed == {(2, 3)} and c.lost_frames == {3: 12}
    assert c.queues[3][3].tx_packets == 4 and c.queue_tx_packets(3) == 4
    assert c.credit.links[2][3].blocked_s == 0.25 and c.credit.fc_tx_frames == {2: 40}
    assert c.adaptive.default == answers.GroupMode("adaptive", None, (0, 3))
    assert c.adaptive.groups == {7: answers.GroupMode("flowlet", 1e-4, ())}
    assert c.adaptive.picks == {1: 12, 2: 8} and c.adaptive.paused_skips == 3
    assert (c.adaptive.ugal_decisions, c.adaptive.ugal_nonminimal) == (5, 2)
    del doc["buffer"]["xoff_sent"]
    with pytest.raises(answers.AnswerError, match="BufferState: the answer has no 'xoff_sent'"):
        answers.SwitchCounters.decode(doc)


def test_nic_samples_decode_by_queue_pair_and_give_the_received_rate():
    from emu.traffic.rdma import received_bps

    rows = as_json([[1.0, {7: 0}, {7: 0}, {7: None}], [2.0, {7: 0}, {7: 125_000}, {7: None}]])
    samples = [answers.NicSample.decode(r) for r in rows]
    assert samples[1].rx_bytes == {7: 125_000} and samples[0].rate_bps == {7: None}
    assert received_bps(samples, 7, 0.0, 3.0) == 1_000_000.0
    assert received_bps(samples, 8, 0.0, 3.0) == 0.0  # a queue pair it never saw
    assert received_bps(samples, 7, 1.5, 3.0) == 0.0  # one sample is no rate
    with pytest.raises(answers.AnswerError, match="3 fields"):
        answers.NicSample.decode([1.0, {}, {}])


def test_a_telemetry_row_splits_into_its_per_priority_columns():
    row = [5.0, 3, 9000] + [
        v for prio in range(8) for v in (prio * 100, prio == 3, prio, prio * 10)
    ]
    r = answers.TelemetryRow.decode(row)
    assert (r.t, r.port, r.tx_bytes) == (5.0, 3, 9000)
    assert r.depth_bytes[3] == 300 and r.paused[3] and not r.paused[2]
    assert r.ecn_marks[7] == 7 and r.queue_tx_bytes[2] == 20
    with pytest.raises(answers.AnswerError, match="4 per priority"):
        answers.TelemetryRow.decode(row[:-1])
