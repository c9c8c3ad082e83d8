"""What a switch reports on its management socket: ports, queues, flows, groups, counters,
aggregation jobs.

Owns turning the datapath's state into the JSON answers of `emu ctl` and of
telemetry. Reads only; the datapath (datapath.py) owns the state.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Optional

from emu.switch.openflow import MALFORMED
from emu.switch.scheduler import N_PRIORITIES

if TYPE_CHECKING:
    from emu.switch.datapath import Datapath


def _fmt_field(name: str, value) -> str:
    val, mask = value
    if name in ("eth_src", "eth_dst") and isinstance(val, int):
        text = val.to_bytes(6, "big").hex(":")
    elif name.startswith(("ipv4_", "arp_spa", "arp_tpa")) and isinstance(val, int):
        text = socket.inet_ntoa(val.to_bytes(4, "big"))
    else:
        text = str(val)
    return text if mask is None else f"{text}/{mask:#x}"


def ports(dp: Datapath) -> list:
    out = []
    for port in sorted(dp.ports.values(), key=lambda p: p.port_no):
        c = port.counters
        sched = dp.schedulers[port.port_no]
        out.append(
            {
                "port_no": port.port_no,
                "name": port.name,
                "hw_addr": port.hw_addr.hex(":"),
                "rate_bps": port.rate_bps,
                "link_up": port.link_up,
                "config": port.config,
                "rx_packets": c.rx_packets,
                "tx_packets": c.tx_packets,
                "rx_bytes": c.rx_bytes,
                "tx_bytes": c.tx_bytes,
                "rx_dropped": c.rx_dropped,
                "tx_dropped": c.tx_dropped,
                "rx_errors": c.rx_errors,
                "tx_errors": c.tx_errors,
                "queue_bytes": list(sched.depth_bytes),
            }
        )
    return out


def queues(dp: Datapath) -> dict:
    """Queue depth and PFC state per port and priority, cheap enough to sample often."""
    now = time.monotonic()
    return {
        "time": time.time(),
        "depth_bytes": {n: list(s.depth_bytes) for n, s in dp.schedulers.items()},
        "paused": {
            n: [s.is_paused(p, now) for p in range(N_PRIORITIES)] for n, s in dp.schedulers.items()
        },
        "tx_bytes": {n: p.counters.tx_bytes for n, p in dp.ports.items()},
        # Credit links: per port, whether each VL has a frame waiting for credit.
        "blocked": {
            n: [link.blocked(p) for p in range(N_PRIORITIES)] for n, link in dp.credit_links.items()
        },
    }


def _by_port_and_prio(counts: dict) -> dict[int, list[int]]:
    """{(port, prio): n} -> {port: [n per priority]}."""
    out: dict[int, list[int]] = {}
    for (port_no, prio), n in counts.items():
        out.setdefault(port_no, [0] * N_PRIORITIES)[prio] += n
    return out


def live(dp: Datapath) -> dict:
    """Per port, what the live view (emu/live/) draws: one answer a few times a second.

    Counters are totals since the switch started; the reader turns two answers
    into rates and shares. `mono` is the switch's monotonic clock at the answer
    (CLOCK_MONOTONIC is one clock for every process of the machine), so the
    reader divides by the switch's own interval, not by its polling jitter.
    """
    now = time.monotonic()
    buf = dp.buffer
    pausing: dict[int, list[int]] = {}
    for port_no, prio in buf.paused_upstream:
        pausing.setdefault(port_no, []).append(prio)
    marks = _by_port_and_prio(buf.counters.marks)
    pause_rx = _by_port_and_prio(dp.pause_rx)
    xoff_sent = _by_port_and_prio(buf.counters.xoff_sent)
    drops: dict[int, int] = {}
    for (port_no, _prio), n in buf.counters.drops_by_queue.items():
        drops[port_no] = drops.get(port_no, 0) + n
    zeros = [0] * N_PRIORITIES
    out = []
    for port_no, sched in sorted(dp.schedulers.items()):
        port = dp.ports[port_no]
        c = port.counters
        out.append(
            {
                "port_no": port_no,
                "name": port.name,
                "link_up": port.link_up,
                "rate_bps": port.rate_bps,
                "tx_bytes": c.tx_bytes,
                "rx_bytes": c.rx_bytes,
                "depth_bytes": list(sched.depth_bytes),
                "paused_now": [p for p in range(N_PRIORITIES) if sched.is_paused(p, now)],
                "paused_s": sched.paused_so_far(now),
                "pausing": sorted(pausing.get(port_no, ())),
                "pause_rx_frames": pause_rx.get(port_no, zeros),
                "pause_tx_frames": xoff_sent.get(port_no, zeros),
                "ecn_marks": marks.get(port_no, zeros),
                "drops": drops.get(port_no, 0) + c.rx_dropped + c.tx_dropped,
            }
        )
    return {"time": time.time(), "mono": now, "ports": out}


def flows(dp: Datapath) -> list:
    now = time.monotonic()
    out = []
    for e in dp.pipeline.flow_stats():
        out.append(
            {
                "table": e.table_id,
                "priority": e.priority,
                "cookie": hex(e.cookie),
                "match": {k: _fmt_field(k, v) for k, v in e.match.items()},
                "instructions": [str(i) for i in e.ofinstructions],
                "packets": e.ctr.packets,
                "bytes": e.ctr.bytes,
                "duration_s": round(now - e.created, 3),
            }
        )
    return out


def groups(dp: Datapath) -> list:
    out = []
    for gid, g in sorted(dp.pipeline.groups.items()):
        out.append(
            {
                "group_id": gid,
                "type": {0: "all", 1: "select", 2: "indirect", 3: "fast_failover"}.get(
                    g.type, g.type
                ),
                "buckets": [
                    {
                        "weight": b.weight,
                        "watch_port": b.watch_port,
                        "actions": [str(a) for a in b.actions],
                        "packets": c.packets,
                        "bytes": c.bytes,
                    }
                    for b, c in zip(g.buckets, g.bucket_ctrs)
                ],
                "packets": g.ctr.packets,
                "bytes": g.ctr.bytes,
                "mode": _select_mode(dp, g),
            }
        )
    return out


def _select_mode(dp: Datapath, group) -> Optional[dict]:
    if group.type != 1:
        return None
    return dp.pipeline.modes.of(group.group_id).describe()


def adaptive(dp: Datapath) -> dict:
    """Adaptive routing: the default and per-group SELECT modes, and the decisions made
    (in both data planes): packets placed, picks per egress port, paused ports passed
    over, decisions that found every port paused."""
    modes = dp.pipeline.modes
    return {
        "default": modes.default.describe(),
        "groups": {gid: m.describe() for gid, m in sorted(modes.by_group.items())},
        **dp.adaptive_counts(),
    }


def agg(dp: Datapath) -> dict:
    """The reduction engine: slot pool, engine-wide drops, and every job's counters."""
    return {"time": time.time(), **dp.agg.report(), "engine_errors": dp.agg_errors}


def counters(dp: Datapath) -> dict:
    queues = {}
    for port_no, sched in dp.schedulers.items():
        queues[port_no] = [vars(c) for c in sched.counters]
    return {
        "time": time.time(),
        "ports": ports(dp),
        "queues": queues,
        "kernel_rx_drops": dp.kernel_drops,
        "flowlets": dp.pipeline.flowlets.report(),
        "adaptive": adaptive(dp),
        "buffer": dp.buffer.snapshot(),
        "watchdog": {
            "detected": dp.watchdog.detected,
            "restored": dp.watchdog.restored,
            "drops": dp.watchdog_drops,
            "stormed": sorted(f"{p}:{q}" for p, q in dp.watchdog.stormed()),
        },
        "pfc": {
            "pause_rx": {f"{p}:{q}": n for (p, q), n in dp.pause_rx.items()},
            "pfc_tx_frames": dp.pfc_tx_frames,
            "paused_s": {n: s.paused_so_far(time.monotonic()) for n, s in dp.schedulers.items()},
        },
        "credit": {
            "links": {n: link.stats(time.monotonic()) for n, link in dp.credit_links.items()},
            "fc_tx_frames": dp.fc_tx_frames,
            "fc_rx_frames": dp.fc_rx_frames,
        },
        "malformed_frames": dp.malformed_frames,
        "lost_frames": dict(dp.lost_frames),  # by a lossy-link fault, per port
        "pipeline": {
            "cache_misses": dp.pipeline.cache_misses,
            "dropped_port_down": dp.pipeline.dropped_port_down,
            "dropped_ttl": dp.pipeline.dropped_ttl,
        },
        "openflow_malformed": dict(MALFORMED),
        "agg": agg(dp),
    }
