"""The collective byte and time models (emu/models/collective.py), by hand on small cases.

Frames as emu puts them on the wire (emu/traffic/model.py): a SEND packet is
its payload (padded to 4 bytes) + 58 bytes of headers (Ethernet 14, IPv4 20,
UDP 8, BTH 12, ICRC 4), so a full 1024-byte packet is 1082 bytes; an ACK is
62 bytes (+ AETH 4), asked for on every PSN p with p % 4 == 3 and on each
message's last packet.
"""

from __future__ import annotations

import pytest

from emu.fabric import rail_optimized
from emu.models.collective import (
    alltoall_link_s,
    alltoall_spine_model,
    hierarchical_nvswitch_bytes,
    message_frame_bytes,
    nvlink_phases_s,
    rail_changes,
    ring_hop_frame_bytes,
    ring_spine_model,
    sends_frame_bytes,
)

FULL = 1024 + 58  # one full SEND packet's frame
ACK = 62


@pytest.fixture(scope="module")
def graph():
    # 4 nodes x 2 GPUs: h1 h3 h5 h7 on rail 1, h2 h4 h6 h8 on rail 2 (node k: h2k-1, h2k).
    return rail_optimized(nodes=4, gpus_per_node=2, spines=1)


def test_one_send_is_its_packets_and_the_acks_it_draws():
    # 4096 bytes: 4 full packets (PSN 0..3), one ACK (PSN 3 is both the 4th and the last).
    assert message_frame_bytes(4096) == 4 * FULL + ACK == 4390
    # 1 byte: one packet padded to 4 bytes, 4 + 58 = 62, and its ACK.
    assert message_frame_bytes(1) == 62 + ACK
    # 8 KiB: 8 packets, ACKs on PSN 3 and 7.
    assert message_frame_bytes(8192) == 8 * FULL + 2 * ACK


def test_a_two_rank_ring_hop_carries_both_halves_once():
    # S = 4096 on 2 ranks: chunks of 2048 bytes, 2(n-1) = 2 steps of one 2-packet SEND.
    # Step 0: PSN 0, 1, one ACK (the last); step 1: PSN 2, 3, one ACK (PSN 3).
    # Per hop: 4 x 1082 + 2 x 62 = 4452; 2(n-1)/n x S = 4096 bytes of it is data.
    assert ring_hop_frame_bytes(4096, 2) == [4 * FULL + 2 * ACK] * 2 == [4452, 4452]
    # S = 16 KiB: two 8-packet steps, ACKs on PSN 3, 7, 11, 15: 16 x 1082 + 4 x 62.
    assert ring_hop_frame_bytes(16384, 2) == [16 * FULL + 4 * ACK] * 2


def test_slices_cost_acks_and_uneven_chunks_cost_the_ranks_that_carry_them():
    # 8 KiB on 2 ranks: chunks of 4 KiB, 4 packets per step, ACKs on PSN 3 and 7.
    assert ring_hop_frame_bytes(8192, 2) == [8 * FULL + 2 * ACK] * 2
    # In 2 KiB slices each step is two 2-packet SENDs, each one's last asks: PSN 1, 3, 5, 7.
    assert ring_hop_frame_bytes(8192, 2, slice_bytes=2048) == [8 * FULL + 4 * ACK] * 2
    # 40 bytes on 3 ranks: 10 elements in chunks of 3, 3, 4 (12, 12, 16 bytes), one
    # packet and one ACK each, 4 steps; rank r sends chunk (r - k) mod 3 in step k:
    # rank 0: chunks 0, 2, 1, 0 = 12 + 16 + 12 + 12 = 52; rank 1: 1, 0, 2, 1 = the
    # same; rank 2: 2, 1, 0, 2 = 16 + 12 + 12 + 16 = 56, each with 4 x 58 of headers.
    assert ring_hop_frame_bytes(40, 3) == [
        52 + 4 * 58 + 4 * ACK,
        52 + 4 * 58 + 4 * ACK,
        56 + 4 * 58 + 4 * ACK,
    ]
    with pytest.raises(ValueError, match="size_bytes=10"):
        ring_hop_frame_bytes(10, 2)  # 2.5 float32 elements


def test_rail_changes_counts_the_hops_between_rails_including_the_closing_one(graph):
    assert rail_changes(graph, ["h1", "h3", "h5", "h7"]) == 0  # all on rail 1
    assert rail_changes(graph, ["h1", "h4", "h5", "h8"]) == 4  # rails 1 2 1 2
    assert rail_changes(graph, [f"h{i}" for i in range(1, 9)]) == 8  # node-major, 1 2 1 2 ...
    # Rails 1 2 2 1: h1 -> h2 and h4 -> h3 change; h2 -> h4 and the closing h3 -> h1 do not.
    assert rail_changes(graph, ["h1", "h2", "h4", "h3"]) == 2


def test_a_ring_that_stays_on_its_rail_puts_nothing_on_the_spines(graph):
    assert ring_spine_model(graph, ["h1", "h3", "h5", "h7"], 4096, 4) == {
        "crossing_hops": 0,
        "payload_bytes": 0,
        "frame_bytes": 0,
    }


def test_the_spines_carry_every_crossing_hop_of_the_ring(graph):
    # S = 4096 on 4 ranks: chunks of 1024 bytes, 6 steps of one 1-packet SEND that
    # asks for an ACK: 6 x 1082 + 6 x 62 = 6864 frame bytes, 2 x 3/4 x 4096 = 6144
    # data bytes per hop.
    hop = 6 * FULL + 6 * ACK
    assert ring_hop_frame_bytes(4096, 4) == [hop] * 4
    assert ring_spine_model(graph, ["h1", "h4", "h5", "h8"], 4096, 4) == {
        "crossing_hops": 4,
        "payload_bytes": 4 * 6144,
        "frame_bytes": 4 * hop,
    }
    # Two of four hops cross (hops 0 and 2): half of it.
    assert ring_spine_model(graph, ["h1", "h2", "h4", "h3"], 4096, 4) == {
        "crossing_hops": 2,
        "payload_bytes": 2 * 6144,
        "frame_bytes": 2 * hop,
    }


def test_sends_add_their_messages_frames_and_acks():
    # 4 KiB: 4 full packets and one ACK; 1 byte: a 62-byte packet and its ACK.
    assert sends_frame_bytes([("h1", "h3", 4096), ("h2", "h4", 1)]) == (4 * FULL + ACK) + (62 + ACK)
    assert sends_frame_bytes([]) == 0


def test_the_spines_carry_the_all_to_alls_pairs_between_rails(graph):
    # h1 (rail 1) -> h4 (rail 2) crosses; h1 -> h3 (both rail 1) and h2 -> h8 (both
    # rail 2) stay on their leaves.
    sends = [("h1", "h4", 4096), ("h1", "h3", 4096), ("h2", "h8", 8192), ("h8", "h5", 1)]
    assert alltoall_spine_model(graph, sends) == {
        "crossing_pairs": 2,
        "payload_bytes": 4096 + 1,
        "frame_bytes": (4 * FULL + ACK) + (62 + ACK),
    }
    assert alltoall_spine_model(graph, sends[1:3]) == {
        "crossing_pairs": 0,
        "payload_bytes": 0,
        "frame_bytes": 0,
    }


def test_the_nvswitches_carry_every_nodes_reduce_scatter_and_all_gather():
    # S = 4096 on 2 GPUs: each hop 4452 bytes both ways (two 2-packet steps, two ACKs),
    # 2 hops per node's ring, 4 nodes.
    assert hierarchical_nvswitch_bytes(4096, 2, 4) == 4 * 2 * 4452
    # 4 GPUs: 4 hops of 6 one-packet steps with an ACK each, per node.
    assert hierarchical_nvswitch_bytes(4096, 4, 1) == 4 * (6 * FULL + 6 * ACK)
    assert hierarchical_nvswitch_bytes(4096, 2, 3) == 3 * sum(ring_hop_frame_bytes(4096, 2))


def test_alltoall_sends_that_share_a_nic_link_add_up():
    rate = 1e6
    one = message_frame_bytes(4096) - ACK  # 4328 bytes of data frames; the ACK goes back
    assert alltoall_link_s([("h1", "h3", 4096)], rate) == pytest.approx(one * 8 / rate)
    # h1 and h2 both send 4 KiB to h3: h3's way down carries 2 x 4328.
    both = [("h1", "h3", 4096), ("h2", "h3", 4096)]
    assert alltoall_link_s(both, rate) == pytest.approx(2 * one * 8 / rate)
    # h1 and h3 send to each other: each way of h1's link carries one SEND's
    # frames and the ACK for the other's, 4328 + 62 = 4390.
    swap = [("h1", "h3", 4096), ("h3", "h1", 4096)]
    assert alltoall_link_s(swap, rate) == pytest.approx((one + ACK) * 8 / rate)
    # Twice the rate, half the time.
    assert alltoall_link_s(both, 2 * rate) == pytest.approx(alltoall_link_s(both, rate) / 2)


def test_nvlink_phases_are_the_busiest_gpus_ring_hop_at_the_nvlink_rate():
    rate = 1e6
    # 2 GPUs: (G-1)/G x S per phase, two phases = S = 4096 data bytes: 4452 frame bytes
    # (test_a_two_rank_ring_hop_carries_both_halves_once).
    assert nvlink_phases_s(4096, 2, rate) == pytest.approx(4452 * 8 / rate)
    # 4 GPUs: 2 x 3/4 x 4096 = 6144 data bytes in 6 one-packet SENDs, 6864 frame bytes:
    # more bytes per GPU than with 2 (the ring's (p-1)/p grows towards 1).
    assert nvlink_phases_s(4096, 4, rate) == pytest.approx((6 * FULL + 6 * ACK) * 8 / rate)
    assert nvlink_phases_s(4096, 4, rate) > nvlink_phases_s(4096, 2, rate)
    # The scenario's default size (256 KiB) at 18 Mbit/s NVLink (its default rate until
    # 33a408a; 27 now, 83.2 ms, docs/scenarios.md): 124.9 ms.
    # 2 steps of 128 KiB, two 64 KiB slices each: 256 packets, 64 ACKs (one per 4 PSNs,
    # each slice's last is such a PSN): 256 x 1082 + 64 x 62 = 280960 bytes.
    assert nvlink_phases_s(256 << 10, 2, 18e6) == pytest.approx(280960 * 8 / 18e6)
