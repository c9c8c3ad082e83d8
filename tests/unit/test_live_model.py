"""The live view's page model (emu/live/model.py): layout invariants, and switch answers
(emu/switch/reports.py `live`, from a socketless datapath) turned into port and link state."""

from __future__ import annotations

import time

import pytest

from emu import fabric as fabric_mod
from emu.live import model
from emu.switch import reports
from emu.switch.aggregation import AggEngine
from emu.switch.pipeline import Pipeline
from emu.switch.ports import PortState
from tests.unit.fakes import lite_datapath

RATE_BPS = 10_000_000
LOSSLESS = 3  # DESIGN.md: RoCE data rides priority 3


@pytest.mark.parametrize(
    "graph",
    [
        fabric_mod.leaf_spine(leaves=4, spines=2, hosts_per_leaf=2),
        fabric_mod.fat_tree(k=4),
    ],
    ids=["leaf_spine", "fat_tree"],
)
def test_hosts_sit_at_the_bottom_and_each_switch_tier_above_the_one_below(graph):
    pos = model.layout(graph)
    assert set(pos) == set(graph.nodes)
    host_y = {pos[h][1] for h in fabric_mod.hosts(graph)}
    assert len(host_y) == 1
    tier_y = {}
    for sw in fabric_mod.switches(graph):
        tier_y.setdefault(graph.nodes[sw]["tier"], set()).add(pos[sw][1])
    assert all(len(ys) == 1 for ys in tier_y.values()), "one row per tier"
    rows = [host_y.pop()] + [tier_y[t].pop() for t in sorted(tier_y)]
    assert rows == sorted(rows, reverse=True), "y grows downwards: hosts lowest"
    assert all(0 < x < 1 and 0 < y < 1 for x, y in pos.values())
    assert len(set(pos.values())) == len(pos), "no two nodes on one spot"


def test_a_host_sits_under_its_leaf_order():
    g = fabric_mod.leaf_spine(leaves=3, spines=1, hosts_per_leaf=2)
    pos = model.layout(g)
    hosts = sorted(fabric_mod.hosts(g), key=lambda h: pos[h][0])
    leaves_in_host_order = [g.nodes[h]["leaf"] for h in hosts]
    assert leaves_in_host_order == sorted(leaves_in_host_order, key=model.natural_key)


def test_natural_order_puts_leaf10_after_leaf9():
    assert sorted(["leaf10", "leaf9", "leaf1"], key=model.natural_key) == [
        "leaf1",
        "leaf9",
        "leaf10",
    ]


def leaf_datapath(graph, switch):
    """A socketless datapath with `switch`'s ports as the graph numbers and names them."""
    ports = {}
    for edge in graph[switch].values():
        port_no = edge["ports"][switch]
        ports[port_no] = PortState(
            port_no, edge["intfs"][switch], bytes([2, 0, 0, 0, 1, port_no]), edge["rate_bps"]
        )
    return lite_datapath(ports, Pipeline(n_tables=1, ports=ports), AggEngine(ports))


def port_of(graph, switch, peer):
    return graph.edges[switch, peer]["ports"][switch]


def answer(dp, mono):
    """The switch's `live` answer with its clock set to `mono` (the model divides by it)."""
    doc = reports.live(dp)
    doc["mono"] = mono
    return doc


@pytest.fixture
def small():
    g = fabric_mod.leaf_spine(leaves=2, spines=1, hosts_per_leaf=2, host_rate_bps=RATE_BPS)
    return g, {sw: leaf_datapath(g, sw) for sw in fabric_mod.switches(g)}


def test_a_port_that_received_pause_is_paused_and_its_peer_port_pausing(small):
    g, dps = small
    leaf1 = dps["leaf1"]
    to_h1 = port_of(g, "leaf1", "h1")
    from_spine = port_of(g, "leaf1", "spine1")
    now = time.monotonic()
    # h1's NIC paused leaf1's egress to it; leaf1 holds spine1 with XOFF.
    leaf1.schedulers[to_h1].pause(LOSSLESS, now + 10.0, now)
    leaf1.pause_rx[(to_h1, LOSSLESS)] = 7
    leaf1.buffer.paused_upstream[(from_spine, LOSSLESS)] = now + 1.0
    leaf1.buffer.counters.xoff_sent[(from_spine, LOSSLESS)] = 4
    leaf1.buffer.counters.marks[(to_h1, LOSSLESS)] = 5
    leaf1.buffer.counters.drops_by_queue[(to_h1, 0)] = 2
    samples = {sw: answer(dp, 100.0) for sw, dp in dps.items()}
    doc = model.page_model(g, samples, phase="running")
    ports = {p["id"]: p for p in doc["ports"]}
    paused = ports[f"leaf1:{to_h1}"]
    assert paused["state"] == "paused"
    assert paused["paused_prios"] == [LOSSLESS]
    assert paused["peer"] == "h1" and paused["link"] == "h1~leaf1"
    assert paused["pause_rx_frames"][LOSSLESS] == 7
    assert paused["ecn_marks"][LOSSLESS] == 5 and paused["drops"] == 2
    pausing = ports[f"leaf1:{from_spine}"]
    assert pausing["state"] == "pausing"
    assert pausing["pausing_prios"] == [LOSSLESS]
    assert pausing["pause_tx_frames"][LOSSLESS] == 4
    others = [p for pid, p in ports.items() if pid not in (paused["id"], pausing["id"])]
    assert others and all(p["state"] == "ok" for p in others)


def test_a_port_paused_most_of_the_interval_counts_as_paused_between_refreshes(small):
    g, dps = small
    before = answer(dps["leaf1"], 10.0)
    after = answer(dps["leaf1"], 10.25)
    to_h2 = port_of(g, "leaf1", "h2")
    port = next(p for p in after["ports"] if p["port_no"] == to_h2)
    # Sampled in a gap between two PAUSE refreshes: not paused now, but 80% of the interval.
    port["paused_now"] = []
    port["paused_s"] = list(port["paused_s"])
    port["paused_s"][LOSSLESS] += 0.2
    doc = model.page_model(g, {"leaf1": after}, {"leaf1": before}, phase="running")
    state = next(p for p in doc["ports"] if p["id"] == f"leaf1:{to_h2}")
    assert state["paused_share"] == pytest.approx(0.8)
    assert state["paused_prios"] == [LOSSLESS] and state["state"] == "paused"


def test_link_utilisation_comes_from_each_directions_sender(small):
    g, dps = small
    previous = {sw: answer(dp, 50.0) for sw, dp in dps.items()}
    up = port_of(g, "leaf1", "spine1")
    down = port_of(g, "spine1", "leaf1")
    to_h1 = port_of(g, "leaf1", "h1")
    # In 0.5 s: leaf1 sends 5 Mbit/s up to spine1, spine1 2.5 Mbit/s down; h1 sends
    # leaf1 10 Mbit/s (leaf1 receives it) and gets nothing.
    dps["leaf1"].ports[up].counters.tx_bytes += 5_000_000 // 8 // 2
    dps["spine1"].ports[down].counters.tx_bytes += 2_500_000 // 8 // 2
    dps["leaf1"].ports[to_h1].counters.rx_bytes += 10_000_000 // 8 // 2
    samples = {sw: answer(dp, 50.5) for sw, dp in dps.items()}
    links = {
        lk["id"]: lk for lk in model.page_model(g, samples, previous, phase="running")["links"]
    }
    spine_link = links["leaf1~spine1"]
    assert (spine_link["a"], spine_link["b"]) == ("leaf1", "spine1")
    assert spine_link["util_ab"] == pytest.approx(0.5)
    assert spine_link["util_ba"] == pytest.approx(0.25)
    assert spine_link["util"] == pytest.approx(0.5)
    host_link = links["h1~leaf1"]
    assert host_link["util_ab"] == pytest.approx(1.0) and host_link["util_ba"] == 0.0
    assert links["h2~leaf1"]["util"] == 0.0
    assert all(lk["up"] for lk in links.values())


def test_without_a_previous_sample_rates_are_zero_not_made_up(small):
    g, dps = small
    dps["leaf1"].ports[1].counters.tx_bytes = 10**9
    doc = model.page_model(g, {"leaf1": answer(dps["leaf1"], 1.0)}, phase="running")
    assert {p["tx_bps"] for p in doc["ports"]} == {0}
    # spine1 did not answer: the links only it ends have no utilisation.
    links = {lk["id"]: lk for lk in doc["links"]}
    assert links["leaf2~spine1"]["util"] is None
    assert links["leaf1~spine1"]["util"] == 0.0


def test_a_down_link_is_drawn_down(small):
    g, dps = small
    dps["leaf2"].ports[port_of(g, "leaf2", "spine1")].link_up = False
    samples = {sw: answer(dp, 1.0) for sw, dp in dps.items()}
    links = {lk["id"]: lk for lk in model.page_model(g, samples, phase="running")["links"]}
    assert links["leaf2~spine1"]["up"] is False
    assert links["leaf1~spine1"]["up"] is True


def test_before_any_fabric_the_page_model_says_waiting_and_draws_nothing():
    doc = model.page_model(None, {}, phase="waiting", message="waiting for a fabric to start")
    assert doc["phase"] == "waiting" and doc["version"] == model.MODEL_VERSION
    assert doc["nodes"] == doc["links"] == doc["ports"] == []
