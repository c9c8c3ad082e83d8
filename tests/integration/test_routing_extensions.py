"""Adaptive routing and Tagger in one controller, on a k=4 fat tree and real packets (issue 30).

The controller runs routing with both extensions (`Fabric(extensions=...)`, the
launcher's `--extensions`): adaptive measures two cross-pod UDP elephants and
pins them, their pinned flows carry their packets, and Tagger, ranking the
fat tree by tiers, finds no bounce on its shortest paths and adds no flow.
"""

from __future__ import annotations

from emu import fabric
from emu.net import Fabric, wait_for
from emu.traffic import iperf

ELEPHANTS = [("h1", "h9"), ("h2", "h13")]  # pod 0 to pods 2 and 3: four hops up and down


def test_adaptive_and_tagger_share_a_controller_on_a_fat_tree(tmp_path):
    g = fabric.fat_tree(k=4, rate_bps=10_000_000)
    with Fabric(
        g,
        out_dir=str(tmp_path),
        extensions=("adaptive", "tagger"),
        controller_args=("--poll-interval", "0.5"),
    ) as fab:
        status = fab.controller_status()
        assert status["tagger"]["rules"] == status["tagger"]["bounces"] == 0
        clients = iperf.start_many(fab, ELEPHANTS, 8, udp=True, bitrate="4M")
        ips = {h: g.nodes[h]["ip"] for pair in ELEPHANTS for h in pair}
        wanted = {f"{ips[s]}->{ips[d]}" for s, d in ELEPHANTS}

        def placed():
            now = fab.controller_status()["adaptive"]["placements"]
            return wanted <= set(now) and now

        placements = wait_for(placed, 20, "adaptive to pin both elephants", 0.25)
        results = [iperf.finish(fab, c) for c in clients]
        # Each pinned hop is a flow in adaptive's cookie band that counted packets.
        pinned = 0
        for sw in fabric.switches(g):
            for f in fab.switch_call(sw, "flows"):
                if f["cookie"].startswith("0x2") and f["priority"] == 0x8200:
                    pinned += f["packets"]
        status = fab.controller_status()
    assert all("error" not in r for r in results), results
    assert pinned > 0
    assert all(len(placements[p]["path"]) == 4 for p in wanted)  # edge, agg, core, agg
    assert status["tagger"] == {"lossless_queues": [3, 4], "rules": 0, "installed": 0, "bounces": 0}
