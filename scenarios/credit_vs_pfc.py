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
link (ports from the spine, h5, h6), and the spine -> leaf2 link carries h1,
h2 and h3 frames in the proportion leaf1's three busy ingress ports sent
them (1/3 each), so the victim moves at about half of the spine port's
share: 1/6 of the line rate (emu/models/hol_blocking.py). Per-VL credits
isolate *classes*: within one VL they block exactly as PFC does, so the
model predicts the same victim slowdown under credits as under PFC (the
check allows half the line rate, three times the prediction). PFC + DCQCN
keeps the bottleneck queue near Kmax, below XOFF, so in steady state nothing
is paused and the victim gets its share back. On a class of its own the
victim has its own buffer at every ingress (a PFC threshold, a credit pool)
and strict priority over the incast's class at every egress: nothing of the
incast's stands in front of it, under PFC or credits alike, and it runs at
its max-min share. (Its receiver is no incast sender: a victim at the line
rate on priority 4 would starve that host's incoming priority-3 ACKs by
strict priority.)

Run:  emu run credit-vs-pfc
      emu run credit-vs-pfc --set modes=pfc,credit --set duration_s=6
"""

from __future__ import annotations

import dataclasses

from emu import fabric as fabric_mod
from emu.figures import WILDCARD, Entry, Figure, per_key
from emu.host.rnic import DSCP_SECOND_CLASS
from emu.models import hol_blocking
from emu.proto import roce
from emu.scenario import Context, Param, ScenarioError, choices, fabric_params
from emu.telemetry import save_panels
from emu.traffic import incast_victim
from emu.traffic.incast_victim import Tap, Workload

DESCRIPTION = "incast + victim flow: PFC vs PFC+DCQCN vs InfiniBand-style credits"

MODES = ("pfc", "dcqcn", "credit", "pfc-2class", "credit-2vl")
CREDIT_MODES = ("credit", "credit-2vl")
# The victim's own class in the -2class/-2vl modes: DSCP 34 -> priority 4 (emu/host/rnic.py).
VICTIM_DSCP = {"pfc-2class": DSCP_SECOND_CLASS, "credit-2vl": DSCP_SECOND_CLASS}
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
WORKLOAD = Workload(INCAST_SENDERS, RECEIVER, VICTIM)  # the victim's class set per mode
# The links captured (a pcap each, on the switch's side) and whose data each one's
# credit audit checks: the bottleneck, the link its congestion holds, the victim's own.
TAPS = {
    "bottleneck": Tap("leaf2", RECEIVER, sender="leaf2"),
    "spine-leaf2": Tap("leaf2", "spine1", sender="spine1"),
    "victim-sender": Tap("leaf1", VICTIM[0], sender=VICTIM[0], victim_only=True),
}

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
    ctx.metrics["line_goodput_bps"] = hol_blocking.line_goodput_bps(p["rate_mbps"] * 1e6)
    # The model's victim share under head-of-line blocking (module docstring):
    # 1/3 of the bottleneck for the spine's port, half of that for the victim.
    hol = hol_blocking.hol_shares(graph, INCAST_SENDERS, RECEIVER, VICTIM)
    report(ctx, results, hol.victim)
    # The incast's goodput of one sender behind the spine and one beside the receiver.
    panels = incast_victim.panels(results, graph, WORKLOAD, senders_shown=("h1", "h5"))
    ctx.plots.append(save_panels(ctx.out_dir / "credit_vs_pfc.png", panels, "credit vs PFC").name)


def run_mode(ctx: Context, graph, mode: str) -> dict:
    """One fresh fabric in `mode`: the incast and the victim, measured."""
    p = ctx.params
    flow_control = "credit" if mode in CREDIT_MODES else "pfc"
    options = {k: p[k] for k in ("seed", "switch_processes", "host_nic_pacing")}
    w = dataclasses.replace(WORKLOAD, victim_dscp=VICTIM_DSCP.get(mode, roce.DSCP_DATA))
    out = ctx.out_dir / mode  # the fabric's folder: the pcaps go beside its logs
    with ctx.fabric(graph, mode, qos=QOS[mode], flow_control=flow_control, **options) as fab:
        run = incast_victim.run(
            fab, graph, w, TAPS, out, p["duration_s"], p["message_bytes"], dcqcn=mode == "dcqcn"
        )
    return incast_victim.measure(run, graph, w, TAPS, p["warmup_s"], credit=mode in CREDIT_MODES)


def report(ctx: Context, results: dict, hol_victim_share: float) -> None:
    p = ctx.params
    line_goodput = ctx.metrics["line_goodput_bps"]
    ctx.table(*incast_victim.table(results, WORKLOAD, line_goodput, p["rate_mbps"]))
    # Incast: a full bottleneck carries payload at the payload share of the line rate;
    # the incast scenario's 90% utilisation bar leaves the rest to the emulator's pacing.
    for mode, r in results.items():
        ctx.check(
            f"{mode}: incast goodput >= 90% of the bottleneck's payload rate "
            f"({line_goodput / 1e6:.2f} Mbit/s: 1024 of {hol_blocking.DATA_FRAME_BYTES} "
            "bytes a frame)",
            r["incast_bps"] >= 0.9 * line_goodput,
            round(r["incast_bps"] / 1e6, 2),
            f">= {0.9 * line_goodput / 1e6:.2f}",
        )
    _check_lossless(ctx, results, line_goodput, hol_victim_share)
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


def _check_lossless(
    ctx: Context, results: dict, line_goodput: float, hol_victim_share: float
) -> None:
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
                f"{hol_victim_share * line_goodput / 1e6:.2f} Mbit/s; its max-min share "
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
