"""credit-vs-pfc: an incast and a victim flow under PFC, PFC + DCQCN, and InfiniBand credits.

                 spine1                  leaf-spine links at 2x the host rate:
               /        \\               the fabric itself is non-blocking
         leaf1            leaf2
      h1 h2 h3 h4      h5 h6 h7 h8
      |  |  |          |  |     ^
      +--+--|----------+--+-----+  incast: h1, h2, h5, h6 -> h8 (4:1 on leaf2 -> h8)
            +-------------> h7     victim: h3 -> h7 (its own path never congested)

The same fabric and workload run on a fresh fabric per mode:
- pfc: PFC on the lossless class, no congestion control (ECN off).
- dcqcn: PFC plus ECN marking and DCQCN at the NICs.
- credit: InfiniBand-style credit-based link flow control on every link
  (`flow_control="credit"`, emu/credit.py), no PFC, no congestion control.
- pfc-2class, credit-2vl: as pfc and credit, with the victim's QP on a class
  of its own (DSCP 34 -> priority 4, lossless too: a second PFC priority, a
  second virtual lane).

The model (what to expect and why). The victim's path (h3 -> leaf1 -> spine1
-> leaf2 -> h7) shares no congested link with the incast: on its own it
would run at the line rate, its max-min share. It shares *queues* with it:
the spine's egress towards leaf2 and leaf1's uplink carry the incast's h1
and h2 frames in the same class. Without congestion control the bottleneck
queue (leaf2 -> h8) fills, leaf2's ingress from the spine holds h8-bound
frames, and leaf2 stops the spine -> leaf2 link for the whole class: with
PFC by PAUSE (XOFF on the per-(port, priority) threshold), with credits by
not returning credit for that (port, VL)'s buffer. Either way the victim's
frames wait behind the incast's: head-of-line blocking. With the ingress
ports served fairly at leaf2's egress, the spine port gets 1/3 of the h8
link (ports from the spine, h5, h6), and the spine -> leaf2 link carries
h1, h2 and h3 frames in the proportion leaf1's three busy ingress ports sent
them (1/3 each), so the victim moves at about half of the spine port's
share: 1/6 of the line rate. Per-VL credits isolate *classes*: within one
VL they block exactly as PFC does, so the model predicts the same victim
slowdown under credits as under PFC (the check allows half the line rate,
three times the prediction). PFC + DCQCN keeps the bottleneck queue near
Kmax, below XOFF, so in steady state nothing is paused and the victim gets
its share back. On a class of its own the victim has its own buffer at every
ingress (a PFC threshold, a credit pool) and strict priority over the
incast's class at every egress: nothing of the incast's stands in front of
it, under PFC or credits alike, and it runs at its max-min share. (Its
receiver is no incast sender: a victim at the line rate on priority 4 would
starve that host's incoming priority-3 ACKs by strict priority.)

Run:  emu run credit-vs-pfc
      emu run credit-vs-pfc --set modes=pfc,credit --set duration_s=6
"""

from __future__ import annotations

import threading
import time

from scapy.layers.l2 import Ether
from scapy.utils import PcapReader

from emu import fabric as fabric_mod
from emu.answers import NicSample
from emu.credit_audit import audit
from emu.figures import WILDCARD, Entry, Figure, per_key
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.proto import credit, pfc, roce
from emu.scenario import Context, Param, ScenarioError, choices, fabric_params
from emu.telemetry import Panel, save_panels, start_capture
from emu.traffic.rdma import RdmaHosts, received_bps

DESCRIPTION = "incast + victim flow: PFC vs PFC+DCQCN vs InfiniBand-style credits"

MODES = ("pfc", "dcqcn", "credit", "pfc-2class", "credit-2vl")
CREDIT_MODES = ("credit", "credit-2vl")
# The victim's own class in the -2class/-2vl modes: DSCP 34 -> priority 4 (emu/host/rnic.py).
VICTIM_DSCP = {"pfc-2class": 34, "credit-2vl": 34}
SAMPLE_S = 0.05
# The incast scenario's settings (scenarios/incast.py): the watchdog off, since
# an incast legitimately keeps a queue paused for long; ECN only with DCQCN.
QOS = {
    "pfc": {"ecn": {"enabled": False}, "watchdog": {"enabled": False}},
    "dcqcn": {"watchdog": {"enabled": False}},
    "credit": {"ecn": {"enabled": False}, "watchdog": {"enabled": False}},
    "pfc-2class": {
        "pfc": {"lossless_priorities": [3, 4]},
        "ecn": {"enabled": False},
        "watchdog": {"enabled": False},
    },
    "credit-2vl": {
        "credit": {"priorities": [3, 4]},
        "ecn": {"enabled": False},
        "watchdog": {"enabled": False},
    },
}
INCAST_SENDERS = ("h1", "h2", "h5", "h6")
RECEIVER = "h8"
VICTIM = ("h3", "h7")
DSCP_TO_VL = {roce.DSCP_DATA: 3, 34: 4, roce.DSCP_CNP: 6}
# A RoCEv2 data frame: Ethernet, IPv4, UDP, BTH, payload, ICRC. Goodput counts
# payload, so a link full of data frames carries payload at this share of its rate.
DATA_FRAME_BYTES = 14 + 20 + 8 + roce.BTH_BYTES + DEFAULT_MTU_PAYLOAD + roce.ICRC_BYTES
PAYLOAD_SHARE = DEFAULT_MTU_PAYLOAD / DATA_FRAME_BYTES
# The model's victim share under head-of-line blocking (module docstring):
# 1/3 of the bottleneck for the spine's port, half of that for the victim.
HOL_VICTIM_SHARE = 1 / 6

_SHARED = ("rate_mbps", "modelled_gbps", "seed", "host_nic_pacing", "switch_processes")
PARAMS = {
    # As the incast scenario: DCQCN's timers and the RTO on a 1 Gbit/s clock over
    # 10 Mbit/s links (x100), so that DCQCN converges within a run of seconds.
    **{k: v for k, v in fabric_params(rate_mbps=10.0, modelled_gbps=1.0).items() if k in _SHARED},
    "duration_s": Param(8.0, "how long the senders send", min=2.0, max=600.0),
    "warmup_s": Param(2.0, "start of the measurement window", min=0.0, max=60.0),
    "message_bytes": Param(65536, "size of each SEND", min=1024, max=16 << 20),
    "modes": Param(",".join(MODES), "which of pfc,dcqcn,credit to run"),
}


def validate(params: dict) -> None:
    choices(params, "modes", MODES)
    if params["warmup_s"] >= params["duration_s"]:
        raise ScenarioError(
            f"parameter warmup_s={params['warmup_s']}: must be below "
            f"duration_s={params['duration_s']}"
        )


def build_graph(p: dict):
    rate = int(p["rate_mbps"] * 1e6)
    return fabric_mod.leaf_spine(
        leaves=2,
        spines=1,
        hosts_per_leaf=4,
        host_rate_bps=rate,
        fabric_rate_bps=2 * rate,
        modelled_rate_bps=p["modelled_gbps"] * 1e9 or None,
    )


def run(ctx: Context) -> None:
    p = ctx.params
    graph = build_graph(p)
    results = {}
    for mode in p["modes"].split(","):
        ctx.log(f"credit-vs-pfc: mode {mode}")
        results[mode] = run_mode(ctx, graph, mode)
        ctx.event(f"{mode} done", victim_mbps=round(results[mode]["victim_bps"] / 1e6, 2))
    ctx.metrics["modes"] = {
        m: {k: v for k, v in r.items() if k != "series"} for m, r in results.items()
    }
    # The victim's max-min share: a host link full of data frames, in payload.
    ctx.metrics["line_goodput_bps"] = p["rate_mbps"] * 1e6 * PAYLOAD_SHARE
    report(ctx, results)
    plot(ctx, results)


def _port_intf(graph, sw: str, peer: str) -> str:
    return graph.edges[sw, peer]["intfs"][sw]


def run_mode(ctx: Context, graph, mode: str) -> dict:
    """One fresh fabric in `mode`: the incast and the victim, measured."""
    p = ctx.params
    out = ctx.out_dir / mode
    flow_control = "credit" if mode in CREDIT_MODES else "pfc"
    options = {
        "seed": p["seed"],
        "switch_processes": p["switch_processes"],
        "host_nic_pacing": p["host_nic_pacing"],
    }
    rate = int(p["rate_mbps"] * 1e6)
    bottleneck_port = graph.edges[RECEIVER, "leaf2"]["ports"]["leaf2"]
    links = {  # name -> (switch, peer): captured on the switch's interface
        "bottleneck": ("leaf2", RECEIVER),
        "spine-leaf2": ("leaf2", "spine1"),
        "victim-sender": ("leaf1", VICTIM[0]),
    }
    with ctx.fabric(graph, mode, qos=QOS[mode], flow_control=flow_control, **options) as fab:
        caps = {
            name: start_capture(fab, _port_intf(graph, sw, peer), out / f"{name}.pcap")
            for name, (sw, peer) in links.items()
        }
        hosts = sorted({*INCAST_SENDERS, RECEIVER, *VICTIM})
        nics = RdmaHosts(fab, hosts, dcqcn=(mode == "dcqcn"))
        qps = {s: nics.connect(s, RECEIVER) for s in INCAST_SENDERS}
        victim_qp = nics.connect(*VICTIM, dscp=VICTIM_DSCP.get(mode, roce.DSCP_DATA))
        backlog = int(2 * rate * p["duration_s"] / 8) + p["message_bytes"]
        count = backlog // p["message_bytes"] + 1
        samples: list = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(fab.queues("leaf2"))
                stop.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.monotonic()
        wall0 = time.time()
        for s in INCAST_SENDERS:
            nics.post(s, qps[s], p["message_bytes"], count)
        nics.post(VICTIM[0], victim_qp, p["message_bytes"], count)
        try:
            stop.wait(p["duration_s"])
        finally:
            stop.set()
            sampler.join()
        end = time.monotonic()
        rx = {h: nics.nic_samples(h) for h in (RECEIVER, VICTIM[1])}
        nic_stats = {h: nics.nic_stats(h) for h in hosts}
        counters = {sw: fab.counters(sw) for sw in fabric_mod.switches(graph)}
        macs = {
            port.name: port.hw_addr
            for sw in fabric_mod.switches(graph)
            for port in fab.port_stats(sw).values()
        }
        for cap in caps.values():
            fab.stop_proc(cap)
    w0 = t0 + p["warmup_s"]
    goodput = {s: received_bps(rx[RECEIVER], qps[s], w0, end) for s in INCAST_SENDERS}
    victim_bps = received_bps(rx[VICTIM[1]], victim_qp, w0, end)
    depth = [
        (s.time - wall0, s.depth_bytes[bottleneck_port][3])
        for s in samples
        if bottleneck_port in s.depth_bytes
    ]
    steady = sorted(d for t, d in depth if t >= p["warmup_s"])
    wire = {name: _wire_counts(out / f"{name}.pcap") for name in links}
    result = {
        "goodput_bps": goodput,
        "incast_bps": sum(goodput.values()),
        "victim_bps": victim_bps,
        "queue_p50_bytes": steady[len(steady) // 2] if steady else 0,
        "queue_max_bytes": steady[-1] if steady else 0,
        "switch_drops": sum(sum(c.buffer.drops.values()) for c in counters.values()),
        "nic_drops": sum(st.rx_overflow for st in nic_stats.values()),
        "retransmitted": sum(
            sum(q.retransmitted for q in st.send.values()) for st in nic_stats.values()
        ),
        "cnps": sum(st.cnps_sent for st in nic_stats.values()),
        "pause_frames_sent": sum(sum(c.pfc.pfc_tx_frames.values()) for c in counters.values())
        + sum(st.pause_tx for st in nic_stats.values()),
        "wire": wire,
        "stalled_s": _stalled(mode, counters, nic_stats),
        "series": {
            "queue": depth,
            "victim": _series(rx[VICTIM[1]], victim_qp, t0),
            "incast": {s: _series(rx[RECEIVER], qps[s], t0) for s in INCAST_SENDERS},
        },
    }
    if mode in CREDIT_MODES:
        result["audit"] = _audits(graph, out, macs, victim_vl=4 if mode == "credit-2vl" else 3)
        result.update(_credit_counts(counters, nic_stats))
    return result


def _credit_counts(counters: dict, nic_stats: dict) -> dict[str, int]:
    """Credit overruns counted by the receivers and credit frames sent, switches and NICs."""
    return {
        "overruns": sum(
            vl.overruns
            for c in counters.values()
            for link in c.credit.links.values()
            for vl in link.values()
        )
        + sum(st.credit_overruns for st in nic_stats.values()),
        "fc_frames_sent": sum(sum(c.credit.fc_tx_frames.values()) for c in counters.values())
        + sum(st.fc_tx for st in nic_stats.values()),
    }


def _series(samples: list[NicSample], qpn: int, t0: float) -> tuple[list, list]:
    """Goodput (Mbit/s) over time for a plot."""
    pts = [(s.t - t0, s.rx_bytes.get(qpn, 0)) for s in samples if s.t >= t0]
    ts, rates = [], []
    for (ta, a), (tb, b) in zip(pts, pts[1:]):
        if tb > ta:
            ts.append(tb)
            rates.append((b - a) * 8 / (tb - ta) / 1e6)
    return ts, rates


def _stalled(mode: str, counters: dict, nic_stats: dict) -> dict[str, float]:
    """Seconds each port (and NIC) spent unable to send on priority 3: paused or blocked."""
    out = {}
    for sw, c in counters.items():
        if mode in CREDIT_MODES:
            for port, link in c.credit.links.items():
                if link[3].blocked_s > 0:
                    out[f"{sw}:{port}"] = link[3].blocked_s
        else:
            for port, per_prio in c.pfc.paused_s.items():
                if per_prio[3] > 0:
                    out[f"{sw}:{port}"] = per_prio[3]
    for h, st in nic_stats.items():
        secs = st.credit[3].blocked_s if mode in CREDIT_MODES else st.paused_s[3]
        if secs > 0:
            out[h] = secs
    return out


def _wire_counts(path) -> dict[str, int]:
    """PAUSE/PFC frames and credit updates a capture holds, counted on the wire."""
    counts = {"pause": 0, "flow_control": 0, "frames": 0}
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            counts["frames"] += 1
            if Ether not in pkt:
                continue
            if pkt[Ether].type == pfc.ETH_TYPE_MAC_CONTROL:
                counts["pause"] += 1
            elif pkt[Ether].type == credit.ETH_TYPE_IB_FC:
                counts["flow_control"] += 1
    return counts


def _audits(graph, out, macs: dict, victim_vl: int = 3) -> dict:
    """Each captured credit link checked against the credit advertised on its data's VL."""

    def port_mac(sw, peer):
        return macs[_port_intf(graph, sw, peer)]

    def host_mac(h):
        return graph.nodes[h]["mac"]

    leaf2_hosts = {host_mac(h) for h in ("h5", "h6", "h7", "h8")}
    cases = {
        # (pcap, sender's FC source, receiver's FC source, data_from, data_to)
        "h3 -> leaf1": (
            "victim-sender",
            host_mac("h3"),
            port_mac("leaf1", "h3"),
            None,
            None,
            victim_vl,
        ),
        f"leaf2 -> {RECEIVER}": (
            "bottleneck",
            port_mac("leaf2", RECEIVER),
            host_mac(RECEIVER),
            None,
            {host_mac(RECEIVER)},
            3,
        ),
        "spine1 -> leaf2": (
            "spine-leaf2",
            port_mac("spine1", "leaf2"),
            port_mac("leaf2", "spine1"),
            None,
            leaf2_hosts,
            3,
        ),
    }
    result = {}
    for name, (pcap, sender, receiver, data_from, data_to, vl) in cases.items():
        a = audit(out / f"{pcap}.pcap", sender, receiver, vl, DSCP_TO_VL, data_from, data_to)
        result[name] = {
            "data_frames": a.data_frames,
            "checked": a.checked,
            "violations": a.violations,
            "fc_from_sender": a.fc_from_sender,
            "fc_from_receiver": a.fc_from_receiver,
        }
    return result


def report(ctx: Context, results: dict) -> None:
    p = ctx.params
    line_goodput = ctx.metrics["line_goodput_bps"]
    rows = []
    for mode, r in results.items():
        wire = r["wire"]
        rows.append(
            [
                mode,
                *(round(r["goodput_bps"][s] / 1e6, 2) for s in INCAST_SENDERS),
                round(r["incast_bps"] / 1e6, 2),
                round(r["victim_bps"] / 1e6, 2),
                round(line_goodput / max(r["victim_bps"], 1.0), 1),
                r["queue_p50_bytes"],
                r["queue_max_bytes"],
                round(sum(r["stalled_s"].values()), 2),
                r["switch_drops"] + r["nic_drops"],
                sum(w["pause"] for w in wire.values()),
                sum(w["flow_control"] for w in wire.values()),
                r["cnps"],
            ]
        )
    ctx.table(
        f"incast {','.join(INCAST_SENDERS)} -> {RECEIVER} and victim {VICTIM[0]} -> {VICTIM[1]} "
        f"({p['rate_mbps']:g} Mbit/s host links; goodput in Mbit/s over the window)",
        [
            "mode",
            *(f"{s} Mb/s" for s in INCAST_SENDERS),
            "incast Mb/s",
            "victim Mb/s",
            "victim slowdown x",
            "queue p50 B",
            "queue max B",
            "paused/blocked s",
            "drops",
            "PAUSE on wire",
            "credit frames on wire",
            "CNPs",
        ],
        rows,
    )
    # Incast: a full bottleneck carries payload at PAYLOAD_SHARE of the line rate; the
    # incast scenario's 90% utilisation bar leaves the rest to the emulator's pacing.
    for mode, r in results.items():
        ctx.check(
            f"{mode}: incast goodput >= 90% of the bottleneck's payload rate "
            f"({line_goodput / 1e6:.2f} Mbit/s: 1024 of {DATA_FRAME_BYTES} bytes a frame)",
            r["incast_bps"] >= 0.9 * line_goodput,
            round(r["incast_bps"] / 1e6, 2),
            f">= {0.9 * line_goodput / 1e6:.2f}",
        )
    _check_lossless(ctx, results, line_goodput)
    _check_credit(ctx, results)
    if "dcqcn" in results and "pfc" in results:
        # DCQCN keeps the bottleneck queue below XOFF: no PAUSE in steady state, so the
        # victim gets at least twice what head-of-line blocking leaves it under PFC.
        d, pf = results["dcqcn"]["victim_bps"], results["pfc"]["victim_bps"]
        ctx.check(
            "dcqcn: the victim recovers (>= 2x its goodput under PFC alone)",
            d >= 2 * pf,
            f"{d / 1e6:.2f} vs {pf / 1e6:.2f}",
            ">= 2x",
        )
    if "credit" in results and "pfc" in results:
        c, pf = results["credit"]["victim_bps"], results["pfc"]["victim_bps"]
        ctx.text(
            f"victim under credits / under PFC: {c / max(pf, 1.0):.2f} (the model: 1, the same "
            "head-of-line blocking within one virtual lane)"
        )


def _check_lossless(ctx: Context, results: dict, line_goodput: float) -> None:
    """The lossless modes: no drop, and the victim blocked or not as its class says."""
    for mode in ("pfc", "credit", "pfc-2class", "credit-2vl"):
        if mode not in results:
            continue
        r = results[mode]
        drops = r["switch_drops"] + r["nic_drops"]
        ctx.check(
            f"{mode}: zero drops and zero retransmissions (lossless)",
            drops == 0 and r["retransmitted"] == 0,
            f"{drops} drops, {r['retransmitted']} retransmitted",
            "0 and 0",
        )
        if mode.endswith(("-2class", "-2vl")):
            # Its own class: its own per-(port, class) buffer (PFC threshold or credit
            # pool) and strict priority over the incast's class at every egress, so
            # nothing of the incast's stands in front of it: the model gives it its
            # max-min share, the line rate; the check is the incast's 90% bar.
            ctx.check(
                f"{mode}: the victim on its own class is not blocked (model: its max-min "
                f"share, {line_goodput / 1e6:.2f} Mbit/s)",
                r["victim_bps"] >= 0.9 * line_goodput,
                round(r["victim_bps"] / 1e6, 2),
                f">= {0.9 * line_goodput / 1e6:.2f}",
            )
        else:
            # Head-of-line blocking model: the victim moves at ~1/6 of the line rate;
            # the check allows three times that, half the line rate.
            ctx.check(
                f"{mode}: victim slowed by head-of-line blocking (model: "
                f"{HOL_VICTIM_SHARE * line_goodput / 1e6:.2f} Mbit/s; its max-min share "
                f"{line_goodput / 1e6:.2f})",
                r["victim_bps"] <= 0.5 * line_goodput,
                round(r["victim_bps"] / 1e6, 2),
                f"<= {0.5 * line_goodput / 1e6:.2f}",
            )


def _check_credit(ctx: Context, results: dict) -> None:
    """The credit modes: no PAUSE, credit on every link, no sender past its credit."""
    for mode in (m for m in CREDIT_MODES if m in results):
        r = results[mode]
        pauses = sum(w["pause"] for w in r["wire"].values())
        ctx.check(
            f"{mode}: no PAUSE frame on the captured links nor sent by any switch or NIC",
            pauses == 0 and r["pause_frames_sent"] == 0,
            f"{pauses} on the wire, {r['pause_frames_sent']} sent",
            "0 and 0",
        )
        fc = {name: w["flow_control"] for name, w in r["wire"].items()}
        ctx.check(
            f"{mode}: credit updates on every captured link",
            all(n > 0 for n in fc.values()),
            fc,
            "> 0 on each",
        )
        audits = r["audit"]
        violations = sum(a["violations"] for a in audits.values())
        checked = {name: a["checked"] for name, a in audits.items()}
        ctx.check(
            f"{mode}: no sender exceeded the credit advertised (pcaps replayed, both "
            "directions' FCTBS/FCCL) and no receiver counted an overrun",
            violations == 0 and r["overruns"] == 0 and all(n > 100 for n in checked.values()),
            f"{violations} violations in {checked} frames checked, {r['overruns']} overruns",
            "0 violations, > 100 frames checked per link, 0 overruns",
        )
        ctx.check(
            f"{mode}: senders waited for credit (the loop, not drops, held the incast back)",
            sum(r["stalled_s"].values()) > 0,
            round(sum(r["stalled_s"].values()), 2),
            "> 0 s blocked",
        )


def plot(ctx: Context, results: dict) -> None:
    queue = Panel(
        f"bottleneck queue leaf2 -> {RECEIVER} (priority 3)",
        "time (s)",
        "bytes",
        lines={
            m: ([t for t, _ in r["series"]["queue"]], [d for _, d in r["series"]["queue"]])
            for m, r in results.items()
        },
    )
    victim = Panel(
        f"victim {VICTIM[0]} -> {VICTIM[1]} goodput",
        "time (s)",
        "Mbit/s",
        lines={m: r["series"]["victim"] for m, r in results.items()},
    )
    incast = Panel(
        "incast goodput per sender",
        "time (s)",
        "Mbit/s",
        lines={
            f"{m} {s}": series
            for m, r in results.items()
            for s, series in r["series"]["incast"].items()
            if s in ("h1", "h5")
        },
    )
    stalled = {
        f"{m}\n{where}": secs
        for m, r in results.items()
        for where, secs in sorted(r["stalled_s"].items(), key=lambda kv: -kv[1])[:4]
    }
    panels = [queue, victim, incast]
    if stalled:
        panels.append(
            Panel("paused (PFC) / blocked (credit) s, top 4", "", "seconds", bars=stalled)
        )
    path = save_panels(ctx.out_dir / "credit_vs_pfc.png", panels, title="credit vs PFC")
    ctx.plots.append(path.name)


# ----- what the README quotes: `emu reproduce` runs these (emu/figures.py) -----

_FIGURES_PER_MODE = (
    *(
        (f"{h} goodput (Mbit/s)", ("goodput_bps", h), {"scale": 1e-6})
        for h in ("h1", "h2", "h5", "h6")
    ),
    ("incast goodput (Mbit/s)", ("incast_bps",), {"scale": 1e-6}),
    ("victim goodput (Mbit/s)", ("victim_bps",), {"scale": 1e-6}),
    ("bottleneck queue p50 (B)", ("queue_p50_bytes",)),
    ("bottleneck queue max (B)", ("queue_max_bytes",)),
    ("paused / blocked port-seconds", ("stalled_s",), {"op": "sum"}),
    ("drops (switch + NIC)", ("switch_drops",), {"op": "add", "other": ("nic_drops",)}),
    ("PAUSE frames on the captured links", ("wire", WILDCARD, "pause"), {"op": "sum"}),
    ("credit frames on the captured links", ("wire", WILDCARD, "flow_control"), {"op": "sum"}),
    ("CNPs", ("cnps",)),
)
# Only the credit modes replay their pcaps against the credit advertised.
_CREDIT_AUDIT_FIGURES = (
    ("frames checked against the credit", ("audit", WILDCARD, "checked"), {"op": "sum"}),
    ("credit violations", ("audit", WILDCARD, "violations"), {"op": "sum"}),
)


def _victim_slowdown(mode: str) -> Figure:
    """The victim's max-min share (its line rate's payload) over what it got."""
    return Figure(
        f"{mode}: victim slowdown (x)",
        ("line_goodput_bps",),
        "ratio",
        ("modes", mode, "victim_bps"),
    )


REPRODUCE: tuple[Entry, ...] = (
    Entry(
        "credit-vs-pfc",
        "credit-vs-pfc",
        "credit-vs-pfc: an incast and a victim flow, PFC vs DCQCN vs credits",
        quick=("duration_s=5", "warmup_s=1.5"),
        figures=(Figure("victim's max-min share (Mbit/s)", ("line_goodput_bps",), scale=1e-6),)
        + sum(
            (per_key((m,), ("modes",), _FIGURES_PER_MODE) + (_victim_slowdown(m),) for m in MODES),
            (),
        )
        + per_key(CREDIT_MODES, ("modes",), _CREDIT_AUDIT_FIGURES),
        timeout_s=900,
    ),
)
