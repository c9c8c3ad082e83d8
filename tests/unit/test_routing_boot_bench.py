"""bench/routing_boot.py's simulated boot: it converges on what the routing model predicts.

A k=4 fat-tree (20 switches, 32 cables, 16 hosts) booted through the bench's
core, in both status modes; the assertions are invariants of routing
(controllers/routing.py) that fail if the bench stops driving the controller
the way RoutingApp does, not timings.
"""

from __future__ import annotations

import pytest

from bench import routing_boot

K = 4
HALF = K // 2
SWITCHES = 5 * HALF * HALF  # 20
CABLES = K * HALF * HALF * 2  # edge-agg and agg-core: 32
HOSTS = K * HALF * HALF  # 16
BASE_FLOWS = 4  # per switch on connect: punt LLDP, punt ARP, IPv4 miss, default drop
# One SELECT group per distinct next-hop port set: an edge switch has one (its
# uplinks); an aggregation switch one per edge switch of its pod plus its
# uplinks; a core switch one per pod.
GROUPS = K * HALF * 1 + K * HALF * (HALF + 1) + HALF * HALF * K  # 8 + 24 + 16 = 48


@pytest.fixture(scope="module")
def per_tick() -> routing_boot.Boot:
    boot = routing_boot.Boot(K, "per-tick", idle_s=0.3)
    boot.run()
    return boot


def test_the_boot_converges_with_every_switch_cable_and_host(per_tick) -> None:
    r = per_tick.result
    assert (r.switches, r.cables, r.hosts) == (SWITCHES, CABLES, HOSTS)
    assert (r.seen_switches, r.seen_cables, r.seen_hosts) == (SWITCHES, CABLES, HOSTS)
    assert per_tick.mgr.converged()
    # A version per switch entered and per link direction discovered, and two for the
    # hosts: announced 1 ms apart, all are learned between two ticks, whose resync
    # sends their routes at once (the version moves at the first and at the resync).
    # One more would be a link lost and found again during the boot.
    assert r.versions == SWITCHES + 2 * CABLES + 2
    assert r.barriers > 0 and r.calls["barrier_reply"] == r.barriers  # every one answered


def test_flow_and_group_mods_match_the_routing_model(per_tick) -> None:
    r, mgr = per_tick.result, per_tick.mgr
    assert sum(len(mgr.installed_flows(d)) for d in mgr.switches) == HOSTS * SWITCHES  # 320
    assert sum(len(mgr.installed_groups(d)) for d in mgr.switches) == GROUPS
    assert r.msgs["flow_add"] >= HOSTS * SWITCHES + BASE_FLOWS * SWITCHES  # 400
    assert r.msgs["group_add"] >= GROUPS
    # Each switch is wiped once on connect: its routing flows, then its groups.
    assert (r.msgs["flow_delete"], r.msgs["group_delete"]) == (SWITCHES, SWITCHES)
    assert r.flow_group_mods >= HOSTS * SWITCHES + BASE_FLOWS * SWITCHES + GROUPS + 2 * SWITCHES
    assert len(r.msgs_per_switch) == SWITCHES and min(r.msgs_per_switch) > 0


def test_per_tick_dumps_the_status_at_most_once_a_tick(per_tick) -> None:
    r = per_tick.result
    assert 0 < r.status_dumps <= r.ticks < r.calls_total
    assert all(r.cpu_s[part] > 0 for part in ("mgr", "shim", "ser"))
    assert r.controller_idle_cpu_s_per_s > 0


def test_per_call_dumps_the_status_after_every_handler_call() -> None:
    r = routing_boot.Boot(K, "per-call", idle_s=0.3).run()
    assert (r.seen_switches, r.seen_cables, r.seen_hosts) == (SWITCHES, CABLES, HOSTS)
    assert r.status_dumps == r.calls_total


def test_the_tables_have_one_row_per_boot(per_tick) -> None:
    r = per_tick.result
    plain = routing_boot.table([r], markdown=False).splitlines()
    markdown = routing_boot.table([r], markdown=True).splitlines()
    assert len(plain) == 2 and plain[1].split()[:2] == ["4", "20/32/16"]
    assert len(markdown) == 3 and markdown[2].startswith("| 4 | 20/32/16 |")
    assert markdown[0].count("|") == len(routing_boot.HEAD) + 1


@pytest.mark.parametrize(
    "argv, value",
    [
        (["--k", "5"], "k=5"),
        (["--k", "0"], "k=0"),
        (["--k", "four"], "'four'"),
        (["--status", "sometimes"], "'sometimes'"),
        (["--idle-s", "0"], "'0'"),
    ],
)
def test_a_bad_argument_is_named(argv, value, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        routing_boot.main(argv)
    assert exc.value.code == 2
    assert value in capsys.readouterr().err


def test_a_bad_k_is_refused_by_the_core_too() -> None:
    with pytest.raises(ValueError, match="k=3"):
        routing_boot.Boot(3)
