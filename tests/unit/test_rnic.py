"""The NIC model's transport, back to back in memory: go-back-N, PFC, CNPs (time injected)."""

import pytest

from emu import fidelity
from emu.fidelity import early_departure_s
from emu.proto import pfc, roce

from .fakes import RATE, B, pair, run


def test_message_completes_and_is_paced_at_link_rate():
    a, b = pair(dcqcn=False)
    a.post_send(1, 200_000, 0.0)
    run(a, b, 0.2)
    done = a.send_qps[1].completed
    assert len(done) == 1
    frame_bytes = a.send_qps[1].tx_bytes
    # Never faster than the link: the last ACK comes after bytes/rate (1 ms burst allowed).
    assert done[0].completed_at >= frame_bytes * 8 / RATE - 0.001
    assert b.recv_qps[7].rx_bytes == 200_000


def test_frame_due_within_a_quarter_frame_leaves_early_on_the_wires_clock(monkeypatch):
    monkeypatch.setattr(fidelity, "EARLY_FRAMES", 0.25)  # a quarter frame, whatever the default
    a, _ = pair(dcqcn=False)
    a.post_send(1, 3 * 1024, 0.0)
    first = a.next_frame(0.0)
    assert first is not None
    due = a.free_at  # the second frame's slot
    early = early_departure_s(RATE)
    assert a.next_frame(due - 1.5 * early) is None
    second = a.next_frame(due - 0.5 * early)
    assert second is not None
    # The wire's clock advanced from the slot: no rate was gained.
    assert a.free_at == pytest.approx(due + len(second) * 8 / RATE)


def test_lost_packets_are_recovered_by_go_back_n_on_nak():
    a, b = pair(dcqcn=False)
    a.post_send(1, 300_000, 0.0)
    run(a, b, 0.5, drop=lambda i, f: i in (10, 11, 100))
    qp = a.send_qps[1]
    assert len(qp.completed) == 1 and b.recv_qps[7].rx_bytes == 300_000
    assert qp.naks >= 2 and qp.retransmitted > 0
    assert b.recv_qps[7].out_of_order > 0


def test_lost_tail_is_recovered_by_the_retransmit_timer():
    a, b = pair(dcqcn=False, rto_modelled_s=0.05, modelled_rate_bps=RATE)
    a.post_send(1, 4096, 0.0)  # 4 packets; the last (ACK-requesting) one is lost once
    run(a, b, 0.3, drop=lambda i, f: i == 4)
    assert len(a.send_qps[1].completed) == 1 and a.send_qps[1].timeouts >= 1


def test_received_pause_stops_data_for_the_pause_time():
    a, b = pair(dcqcn=False)
    a.post_send(1, 100_000, 0.0)
    xoff = pfc.build(pfc.template(B["mac"]), {3: 1000})
    a.receive(xoff, 0.0)
    assert a.next_frame(0.0) is None
    until = pfc.quanta_to_s(1000, RATE)
    assert a.next_wakeup(0.0) == pytest.approx(until)
    assert a.next_frame(until) is not None
    a.receive(pfc.build(pfc.template(B["mac"]), {3: 0xFFFF}), until)
    a.receive(pfc.build(pfc.template(B["mac"]), {3: 0}), until + 0.001)  # XON
    assert a.next_frame(until + 0.01) is not None
    assert a.paused_s[3] == pytest.approx(until + 0.001, rel=0.01)


def test_slow_receiver_sends_pause_and_releases_it():
    a, b = pair(dcqcn=False, drain_rate_bps=RATE / 4)
    a.post_send(1, 400_000, 0.0)
    paused_seen = []
    orig = a.receive

    def spy(frame, now):
        if pfc.is_mac_control(frame):
            paused_seen.append(pfc.parse(frame).quanta[3])
        return orig(frame, now)

    a.receive = spy
    run(a, b, 1.0)
    assert 0xFFFF in paused_seen and 0 in paused_seen  # XOFF, then XON as it drains
    assert b.rx_overflow == 0  # PAUSE kept the buffer from overflowing


def test_stuck_nic_pauses_continuously():
    a, b = pair(dcqcn=False)
    b.stuck = True
    frames = []
    now = 0.0
    for _ in range(2000):
        frames += b.tick(now)
        now += 0.001
    refresh = pfc.quanta_to_s(0xFFFF, RATE) / 2
    assert len(frames) >= int(2.0 / refresh)
    assert all(pfc.parse(f).quanta[3] == 0xFFFF for f in frames)


def test_ce_marks_become_cnps_and_slow_the_sender():
    a, b = pair(dcqcn=True)
    a.post_send(1, 2_000_000, 0.0)
    run(a, b, 0.3, mark=lambda i, f: i % 3 == 0)
    qp = a.send_qps[1]
    assert b.cnps_sent > 0 and qp.cnps == b.cnps_sent
    assert qp.rp.rate_bps < RATE / 2


def test_bad_work_requests_are_named():
    a, _ = pair()
    with pytest.raises(ValueError, match="unknown QP 9"):
        a.post_send(9, 10, 0.0)
    with pytest.raises(ValueError, match="size_bytes=0"):
        a.post_send(1, 0, 0.0)


def test_rdma_write_carries_reth_on_its_first_packet_and_completes():
    a, b = pair(dcqcn=False)
    a.post_write(1, 3000, 0.0, remote_va=0x1000, rkey=0x42)
    frames = []
    now = 0.0
    while now < 0.05:
        f = a.next_frame(now)
        while f is not None:
            frames.append(roce.parse(f))
            for reply in b.receive(f, now):
                a.receive(reply, now)
            f = a.next_frame(now)
        now += 1e-4
    assert [f.opcode for f in frames] == [
        roce.RDMA_WRITE_FIRST,
        roce.RDMA_WRITE_MIDDLE,
        roce.RDMA_WRITE_LAST,
    ]
    assert frames[0].reth == (0x1000, 0x42, 3000) and frames[1].reth is None
    assert b.recv_qps[7].messages_received == 1 and b.recv_qps[7].rx_bytes == 3000
    assert len(a.send_qps[1].completed) == 1
