"""The NIC that tolerates reordering ("selective", emu/host/reorder.py) against the strict one.

Two NICs back to back in memory, the requester's frames handed to the
responder in a permuted order or with some lost: where each packet lands,
when a message completes, which ACKs and NAKs come back and what is resent,
with the counters the report reads. Every case runs on both engines (rnic.py,
the specification, and the C engine), as STYLE.md asks of the C paths.
"""

from __future__ import annotations

import random

import pytest

from emu.host import nicpath, rnic
from emu.host.rnic import GO_BACK_N, SELECTIVE, NicConfig
from emu.proto import roce

RATE = 20_000_000
MTU = rnic.DEFAULT_MTU_PAYLOAD
A = dict(mac="02:00:00:00:00:01", ip="10.0.0.1")
B = dict(mac="02:00:00:00:00:02", ip="10.0.0.2")
ENGINES = [
    "python",
    pytest.param("c", marks=pytest.mark.skipif(nicpath._nicpath is None, reason="not built")),
]


def pair(engine: str, **kw):
    """Requester a (QP 1) and responder b (QP 7); the RTO is 50 ms (time scale 1)."""
    cls = rnic.Rnic if engine == "python" else nicpath.CRnic
    kw = dict(dcqcn=False, rto_modelled_s=0.05, modelled_rate_bps=RATE) | kw
    a, b = cls(NicConfig(rate_bps=RATE, **A, **kw)), cls(NicConfig(rate_bps=RATE, **B, **kw))
    a.connect(1, 7, B["mac"], B["ip"], 49152, 0.0)
    b.connect(7, 1, A["mac"], A["ip"], 49153, 0.0)
    return a, b


def frames_out(a, n: int) -> list[bytes]:
    """The requester's next `n` data frames (its pacing ignored: t moves as it asks)."""
    out, t = [], 0.0
    while len(out) < n:
        f = a.next_frame(t)
        if f is None:
            t += 1e-4
            continue
        out.append(f)
    return out


def deliver(a, b, frames, now: float) -> list[roce.RoceInfo]:
    """Hand `frames` to b and b's replies to a; returns the replies, decoded."""
    replies = []
    for f in frames:
        for r in b.receive(f, now):
            replies.append(roce.parse(r))
            a.receive(r, now)
    return replies


def kinds(replies) -> list[tuple[str, int]]:
    names = {roce.AETH_ACK: "ack", roce.AETH_NAK: "nak", roce.AETH_RNR_NAK: "rnr"}
    return [(names[r.syndrome & roce.AETH_KIND_MASK], r.psn) for r in replies]


def recv(nic) -> dict:
    return nic.stats(0.0)["recv"][7]


def send(nic, now: float = 0.0) -> dict:
    return nic.stats(now)["send"][1]


def test_selective_is_the_third_loss_recovery_and_the_default_is_unchanged():
    assert rnic.LOSS_RECOVERY == ("go-back-n", "go-back-0", "selective")
    assert NicConfig(mac=A["mac"], ip=A["ip"], rate_bps=RATE).loss_recovery == GO_BACK_N


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("window", [0, rnic.MAX_OUTSTANDING_PACKETS + 1, 2.5])
def test_a_reorder_window_out_of_range_is_named(engine, window):
    with pytest.raises(ValueError, match=f"ooo_window_packets={window!r}: allowed 1..512"):
        pair(engine, loss_recovery=SELECTIVE, ooo_window_packets=window)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_permuted_message_is_placed_whole_with_no_nak_where_go_back_n_storms(engine):
    # 24 packets of real data delivered in a random order (within the window):
    # each lands at its offset, the message is whole once all are in, and the
    # responder NAKs nothing; the strict NIC NAKs and the requester goes back N.
    payload = bytes(random.Random(3).getrandbits(8) for _ in range(24 * MTU - 100))
    order = list(range(24))
    random.Random(5).shuffle(order)
    results = {}
    for mode in (SELECTIVE, GO_BACK_N):
        a, b = pair(engine, loss_recovery=mode)
        b.set_deliver_data(7, True)
        a.post_send(1, len(payload), 0.0, data=payload)
        sent = frames_out(a, 24)
        replies = deliver(a, b, [sent[i] for i in order], 0.01)
        results[mode] = (a, b, replies)
    a, b, replies = results[SELECTIVE]
    assert [k for k, _ in kinds(replies)].count("nak") == 0
    assert b.take_messages(7) == [(1, payload)]
    depth = max(order[i] - min(set(range(24)) - set(order[:i])) for i in range(24))
    r = recv(b)
    assert (r["messages_received"], r["naks_sent"], r["reorder_depth_max"]) == (1, 0, depth)
    assert r["out_of_order"] == sum(
        1 for i in range(24) if order[i] != min(set(range(24)) - set(order[:i]))
    )
    s = send(a)
    assert (s["una"], s["naks"], s["retransmitted"], len(s["completed"])) == (24, 0, 0, 1)
    a, b, replies = results[GO_BACK_N]
    s = send(a)
    assert [k for k, _ in kinds(replies)].count("nak") == recv(b)["naks_sent"] >= 1
    assert s["naks"] >= 1 and s["retransmitted"] > 0 and recv(b)["messages_received"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_completions_wait_for_the_whole_message_and_come_in_order(engine):
    a, b = pair(engine, loss_recovery=SELECTIVE)
    b.set_deliver_data(7, True)
    first = bytes(range(256)) * 12  # PSNs 0..2
    second = bytes((i * 7) % 256 for i in range(2048))  # PSNs 3..4
    a.post_send(1, len(first), 0.0, data=first)
    a.post_send(1, len(second), 0.0, data=second)
    p = frames_out(a, 5)
    # The second message whole, then the first but its first packet: nothing completes.
    replies = deliver(a, b, [p[3], p[4], p[1], p[2]], 0.01)
    assert kinds(replies) == [] and recv(b)["messages_received"] == 0
    assert b.take_messages(7) == [] and send(a)["una"] == 0
    # PSN 0 makes 0..4 contiguous: both messages complete, in order, with one ACK for
    # PSN 4 (owed to the AckReq packets 2 and 4 that were held).
    replies = deliver(a, b, [p[0]], 0.02)
    assert kinds(replies) == [("ack", 4)]
    assert b.take_messages(7) == [(1, first), (2, second)]
    assert [c[0] for c in a.take_completions(1)] == [1, 2]
    r = recv(b)
    assert (r["rx_packets"], r["out_of_order"], r["reorder_depth_max"]) == (5, 4, 4)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_duplicate_of_a_held_packet_is_counted_and_answered_with_the_cumulative_ack(engine):
    a, b = pair(engine, loss_recovery=SELECTIVE)
    a.post_send(1, 8 * MTU, 0.0)
    p = frames_out(a, 8)
    deliver(a, b, p[:2], 0.01)
    replies = deliver(a, b, [p[3], p[3]], 0.01)  # PSN 3 asks for an ACK; 2 is missing
    assert kinds(replies) == [("ack", 1)]  # the second copy: a duplicate, ACKed up to 1
    assert (recv(b)["duplicates"], recv(b)["out_of_order"]) == (1, 1)


def tick(a, b, now: float) -> list[roce.RoceInfo]:
    """b's timer work at `now`, handed to a; returns it decoded."""
    out = []
    for f in b.tick(now):
        out.append(roce.parse(f))
        a.receive(f, now)
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lost_packet_is_nak_ed_after_half_an_rto_and_resent_alone(engine):
    a, b = pair(engine, loss_recovery=SELECTIVE)
    timeout = a.rto_s / 2
    assert b.reorder_s == pytest.approx(0.025)
    a.post_send(1, 40 * MTU, 0.0)
    p = frames_out(a, 40)
    t0 = 0.01
    deliver(a, b, p[:10] + p[11:], t0)  # PSN 10 lost
    assert recv(b)["naks_sent"] == 0 and tick(a, b, t0 + timeout * 0.9) == []
    # The gap's age counts from the first packet held above it.
    assert b.next_tick() == pytest.approx(t0 + timeout)
    assert kinds(tick(a, b, t0 + timeout)) == [("nak", 10)]
    assert tick(a, b, t0 + timeout) == []  # one round per timeout
    # The requester resends PSN 10 alone, asking for an ACK, before anything new.
    [resent] = frames_out(a, 1)
    info = roce.parse(resent)
    assert (info.psn, info.ack_req) == (10, True)
    replies = deliver(a, b, [resent], t0 + timeout)
    assert kinds(replies) == [("ack", 39)]
    assert a.next_frame(1.0) is None  # nothing else was resent
    s, r = send(a), recv(b)
    assert (s["naks"], s["retransmitted"], s["timeouts"], len(s["completed"])) == (1, 1, 0, 1)
    assert (r["naks_sent"], r["out_of_order"], r["reorder_depth_max"]) == (1, 29, 29)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_hole_found_lost_is_nak_ed_in_one_round_and_asked_again_if_still_missing(engine):
    a, b = pair(engine, loss_recovery=SELECTIVE)
    timeout = b.reorder_s
    a.post_send(1, 40 * MTU, 0.0)
    p = frames_out(a, 40)
    lost = {3, 4, 17}
    deliver(a, b, [f for i, f in enumerate(p) if i not in lost], 0.0)
    assert kinds(tick(a, b, timeout)) == [("nak", 3), ("nak", 4), ("nak", 17)]
    resent = frames_out(a, 3)
    assert [roce.parse(f).psn for f in resent] == [3, 4, 17]
    # PSN 17's retransmission is lost too: it is NAKed again one timeout later.
    replies = deliver(a, b, resent[:2], timeout)
    assert kinds(replies) == [("ack", 3), ("ack", 16)]  # each resend asks for an ACK
    assert tick(a, b, timeout * 1.5) == []
    assert kinds(tick(a, b, timeout * 2)) == [("nak", 17)]
    deliver(a, b, frames_out(a, 1), timeout * 2)
    s, r = send(a), recv(b)
    assert (s["una"], s["naks"], s["retransmitted"], s["timeouts"]) == (40, 4, 4, 0)
    assert r["naks_sent"] == 4 and r["messages_received"] == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_a_psn_beyond_the_window_is_dropped_and_the_window_s_base_nak_ed_at_once(engine):
    a, b = pair(engine, loss_recovery=SELECTIVE, ooo_window_packets=8)
    a.post_send(1, 20 * MTU, 0.0)
    p = frames_out(a, 20)
    replies = deliver(a, b, [p[1], p[7]], 0.0)  # within the window: held, no NAK
    assert kinds(replies) == []
    replies = deliver(a, b, [p[8], p[9]], 0.0)  # 8 from the expected PSN 0: no place
    assert kinds(replies) == [("nak", 0)]  # once, until the expected PSN moves
    r = recv(b)
    assert (r["beyond_window"], r["out_of_order"], r["reorder_depth_max"]) == (2, 4, 9)
    [resent] = frames_out(a, 1)
    assert roce.parse(resent).psn == 0
    assert kinds(deliver(a, b, [resent], 0.0)) == [("ack", 1)]
    assert send(a)["una"] == 2 and recv(b)["expected_psn"] == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lost_tail_times_out_and_goes_back_n(engine):
    # No packet follows the lost last one, so no gap shows it: the requester's RTO
    # resends from the oldest unacknowledged PSN, as go-back-N does.
    a, b = pair(engine, loss_recovery=SELECTIVE)
    a.post_send(1, 8 * MTU, 0.0)
    p = frames_out(a, 8)
    deliver(a, b, p[:7], 0.0)  # ACKs up to PSN 3; PSN 7 lost
    assert tick(a, b, 1.0) == [] and send(a)["una"] == 4
    resent = frames_out(a, 4)
    assert [roce.parse(f).psn for f in resent] == [4, 5, 6, 7]
    deliver(a, b, resent, 0.2)
    s, r = send(a), recv(b)
    assert (s["timeouts"], s["retransmitted"], len(s["completed"])) == (1, 4, 1)
    assert r["duplicates"] == 3 and r["naks_sent"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_reordering_across_a_long_transfer_costs_nothing_and_losses_only_themselves(engine):
    # 600 packets through a wire that delays each by a random 0-3 ms (reordering
    # up to ~8 packets deep at 20 Mbit/s) and loses 1 in 100: the reordering NIC
    # resends about what was lost; go-back-N resends windows.
    results = {}
    for mode in (SELECTIVE, GO_BACK_N):
        a, b = pair(engine, loss_recovery=mode)
        a.post_send(1, 600 * MTU, 0.0)
        rng = random.Random(11)
        wire, now, lost = [], 0.0, 0
        while now < 3.0:
            for f in b.tick(now):
                a.receive(f, now)
            f = a.next_frame(now)
            while f is not None:
                if rng.random() < 0.01:
                    lost += 1
                else:
                    wire.append((now + rng.random() * 3e-3, f))
                f = a.next_frame(now)
            wire.sort(key=lambda x: x[0])
            while wire and wire[0][0] <= now:
                for r in b.receive(wire.pop(0)[1], now):
                    a.receive(r, now)
            now += 1e-4
        results[mode] = (send(a, now), recv(b), lost)
    s, r, lost = results[SELECTIVE]
    assert len(s["completed"]) == 1 and r["reorder_depth_max"] >= 4
    assert r["out_of_order"] > 100 and lost <= s["retransmitted"] <= lost + s["timeouts"] * 512
    assert s["naks"] == r["naks_sent"] <= lost + 2
    g, gr, glost = results[GO_BACK_N]
    assert gr["naks_sent"] > r["naks_sent"] and g["retransmitted"] > 5 * s["retransmitted"]
