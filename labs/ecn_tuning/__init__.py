"""Lab ecn_tuning: choose ECN's Kmin/Kmax/Pmax so that a DCQCN incast keeps a short queue
and a full link.

Owns the lab's incast (the fabric and workload of scenarios/incast.py: three
leaves of three hosts, two spines, 10 Mbit/s links standing for 1 Gbit/s
NICs, h1..h8 sending RoCEv2 with DCQCN to h9), the targets it sets, and the
grading. The student's `ecn.yaml` gives the RED-style marking thresholds of
every switch's lossless class (emu/config.py's EcnSpec: Kmin, Kmax, Pmax at
the emulated rate). The check builds the fabric with them, runs the incast
once, and reads the bottleneck (leaf3's port towards h9) from the switch's
own telemetry, which it samples every 100 ms: the queue's 99th percentile
and the link's utilisation over the steady state, each against its target.

The targets, and where they come from:

- utilisation >= 0.97: the exercise's "keep the link full", to within 3%.
- queue p99 <= 3 x the loop's bandwidth-delay product (`loop_bdp_bytes`,
  about 31 KB here): what the link sends while DCQCN's loop turns (the CNP
  interval plus the data frame's hops out and the CNP's hops back; Zhu et
  al., SIGCOMM 2015, section 3.1). One BDP of queue is what keeps a link
  busy while its senders react (the buffer-sizing rule of thumb; Appenzeller
  et al., SIGCOMM 2004): a queue several times deeper adds waiting, not
  throughput.

Measured on the 2-core build VM (one run each, p99 / utilisation):
storage-tuned 60/160 frames, Pmax 0.2 (the starting point): 230 KB / 0.999;
training-tuned 2/10 frames, Pmax 0.2: 21.6 KB / 0.946; 8/32 frames, Pmax
0.2: 76 KB / 0.874 (the loop cycles between empty and a peak above Kmax);
2/10 frames, Pmax 1.0 (the solution): 15.1 KB / 0.987; 4/20 frames, Pmax
1.0: 29.2 KB / 0.973. Why Pmax matters: at DCQCN's fixed point (Zhu et al.,
"ECN or Delay", CoNEXT 2016; `scenarios.incast.dcqcn_fixed_point`) about 17%
of the packets must be marked to hold 8 senders at their share. With Pmax
below that, marking only reaches it above Kmax, the queue overshoots, the
senders cut hard, and the queue runs dry: both targets missed at once.
"""

from __future__ import annotations

import time

from emu import fabric as fabric_mod
from emu import fidelity
from emu.config import ConfigError, EcnSpec
from emu.host.dcqcn import DcqcnSpec
from emu.labs import LabError, LabRun
from emu.net import Fabric, FabricError, wait_for
from emu.traffic.rdma import RdmaHosts
from scenarios.incast import DATA_FRAME_BYTES, dcqcn_fixed_point, loop_base_delay_s

TITLE = "ECN tuning: pick Kmin/Kmax/Pmax for a short queue and a full link under DCQCN"
MINUTES = 45
ORDER = 4
GRADES = "the bottleneck queue's p99 and the link's utilisation in a DCQCN incast, 8 to 1"
FILES = ("ecn.yaml",)

# The incast scenario's fabric (scenarios/incast.py): 10 Mbit/s links standing for
# 1 Gbit/s NICs (time scale 100), so that DCQCN converges within seconds.
RATE_BPS = 10_000_000
MODELLED_RATE_BPS = 1e9
SENDERS = 8
MESSAGE_BYTES = 65536
DURATION_S = 12.0
# The start-up transient (every sender at line rate until its first CNPs) is over
# within about 1.5 s at these rates (scenarios/incast.py measures it); the window
# starts after it, so it grades the steady state.
WARMUP_S = 2.0
LIVE_S = 3600.0  # `emu lab start`: the incast runs until the CLI is left
LOSSLESS_PRIO = 3  # RoCE data (DESIGN.md conventions): the queue ECN and PFC act on
TELEMETRY_COLUMNS_PER_PRIO = 4  # depth, paused, marks, tx bytes (emu/telemetry.py)

# The control loop DCQCN closes: a mark travels with its frame to the receiver, a
# CNP comes back, at most one per CNP interval per flow (Zhu et al., SIGCOMM 2015,
# section 3.1). Its bandwidth-delay product is what the queue must hold so that
# the link stays busy while the senders hear of it.
DCQCN = DcqcnSpec.from_hardware(RATE_BPS, MODELLED_RATE_BPS)
CNP_INTERVAL_S = DCQCN.effective().cnp_interval_s

# Targets (module docstring): utilisation from the exercise ("full", to 3%), the
# queue from the loop's bandwidth-delay product (`queue_target_bytes`).
UTILISATION_TARGET = 0.97
QUEUE_TARGET_BDPS = 3


def graph():
    return fabric_mod.leaf_spine(
        leaves=3,
        spines=2,
        hosts_per_leaf=3,
        host_rate_bps=RATE_BPS,
        modelled_rate_bps=MODELLED_RATE_BPS,
    )


def roles(g) -> tuple[list[str], str, str, int]:
    """(senders, receiver, the receiver's leaf, the leaf's port towards it: the bottleneck)."""
    hosts = fabric_mod.hosts(g)
    receiver = hosts[-1]
    leaf = g.nodes[receiver]["leaf"]
    return hosts[:SENDERS], receiver, leaf, g.edges[receiver, leaf]["ports"][leaf]


def loop_bdp_bytes(g) -> float:
    """Bytes the bottleneck sends during one turn of DCQCN's loop (CNP interval + hops)."""
    senders, receiver, _, _ = roles(g)
    delay_s = CNP_INTERVAL_S + loop_base_delay_s(g, senders, receiver, RATE_BPS)
    return RATE_BPS / 8 * delay_s


def queue_target_bytes(g) -> int:
    return int(QUEUE_TARGET_BDPS * loop_bdp_bytes(g))


def marking_needed() -> float:
    """The share of packets DCQCN's fixed point marks (Zhu et al., CoNEXT 2016): where the
    senders' rate cuts balance their increases at a fair share each."""
    return dcqcn_fixed_point(SENDERS, RATE_BPS, 0, 1, 1.0, DCQCN)["p"]


def settling_bytes(ecn: dict, p_star: float) -> float:
    """Where DCQCN's fixed point puts the queue: the depth at which RED marks p* of the
    packets (Kmax when Pmax is below p*: marking reaches p* only past it)."""
    kmin, kmax, pmax = ecn["kmin_bytes"], ecn["kmax_bytes"], ecn["pmax"]
    return kmax if pmax <= p_star else kmin + p_star / pmax * (kmax - kmin)


def read_ecn(lab: LabRun) -> dict:
    """The student's `ecn.yaml` as the fabric's qos "ecn" section, validated as the switches
    will (emu/config.py's EcnSpec); LabError names a bad key or value."""
    doc = lab.answers("ecn.yaml")
    try:
        spec = EcnSpec.from_dict(doc)
    except (ConfigError, TypeError) as exc:  # TypeError: a value of the wrong kind
        raise LabError(f"{lab.path('ecn.yaml')}: {exc}") from None
    if spec.kmin_bytes is None or spec.kmax_bytes is None:
        raise LabError(f"{lab.path('ecn.yaml')}: give kmin_bytes, kmax_bytes and pmax")
    return {**doc, "pmax": spec.pmax}


def fabric(lab: LabRun, ecn: dict, out: str) -> Fabric:
    # The PFC watchdog stays off, as in the incast scenario: a congested queue that
    # stays paused is congestion, not a storm.
    return Fabric(graph(), out_dir=out, qos={"ecn": ecn, "watchdog": {"enabled": False}})


def start_incast(fab: Fabric, seconds: float) -> tuple[RdmaHosts, float]:
    """Every sender posts enough 64 KiB SENDs to keep sending for `seconds` at twice its
    share; returns the NICs and the wall time they started."""
    senders, receiver, _, _ = roles(fab.graph)
    nics = RdmaHosts(fab, senders + [receiver], dcqcn=True)
    qps = {s: nics.connect(s, receiver) for s in senders}
    backlog = int(2 * RATE_BPS * seconds / 8 / len(senders)) + MESSAGE_BYTES
    t0 = time.time()
    for s in senders:
        nics.post(s, qps[s], MESSAGE_BYTES, backlog // MESSAGE_BYTES + 1)
    return nics, t0


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    ecn = read_ecn(lab)
    with fabric(lab, ecn, str(lab.out_dir)) as fab:
        _, _, leaf, port = roles(fab.graph)
        start_incast(fab, LIVE_S)
        print(
            f"incast: h1..h{SENDERS} send RoCEv2 with DCQCN to h{SENDERS + 1}; the bottleneck "
            f"is {leaf} port {port} ({leaf}-eth{port}). Kmin {ecn['kmin_bytes']} B, "
            f"Kmax {ecn['kmax_bytes']} B, Pmax {ecn['pmax']} on every switch."
        )
        interactive(fab)


def percentile(xs: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest sample that q% of the samples do not exceed."""
    xs = sorted(xs)
    rank = max(1, -(-len(xs) * q // 100))  # ceil(n q / 100), at least the first
    return xs[int(rank) - 1]


def measure(lab: LabRun, ecn: dict) -> dict:
    """Run the incast once with `ecn` on every switch; the bottleneck's figures."""
    out = lab.out_dir / "incast"
    with fabric(lab, ecn, str(out)) as fab:
        _, _, leaf, port = roles(fab.graph)
        _, t0 = start_incast(fab, DURATION_S)
        end = t0 + DURATION_S

        def rows() -> list[list]:
            return [r for r in fab.switch_call(leaf, "telemetry", since=t0) if r[1] == port]

        # The switch samples itself every 100 ms: wait for its first sample past the end.
        wait_for(
            lambda: any(r[0] >= end for r in rows()),
            DURATION_S + 10.0,
            f"{leaf}'s telemetry to cover the incast",
        )
        series = rows()
        counters = {sw: fab.switch_call(sw, "counters") for sw in fabric_mod.switches(fab.graph)}
    window = [r for r in series if t0 + WARMUP_S <= r[0] <= end]
    if len(window) < 2:
        raise FabricError(f"{leaf} reported {len(window)} telemetry samples in the window")
    depth_col = 3 + TELEMETRY_COLUMNS_PER_PRIO * LOSSLESS_PRIO
    depths = [r[depth_col] for r in window]
    sent = window[-1][2] - window[0][2]
    verdict = fidelity.judge(fidelity.load_records(out))
    return {
        "queue_p99_bytes": percentile(depths, 99),
        "queue_p50_bytes": percentile(depths, 50),
        "samples": len(depths),
        "utilisation": sent * 8 / (RATE_BPS * (window[-1][0] - window[0][0])),
        "ecn_marks": sum(sum(c["buffer"]["ecn_marks"].values()) for c in counters.values()),
        "pfc_frames": sum(sum(c["pfc"]["pfc_tx_frames"].values()) for c in counters.values()),
        "faithful": verdict.faithful,
        "unfaithful": "; ".join(f.text for f in verdict.failures()),
        "telemetry": str(out / "telemetry" / f"{leaf}.csv"),
    }


def check(lab: LabRun) -> None:
    ecn = read_ecn(lab)
    g = graph()
    bdp, target = loop_bdp_bytes(g), queue_target_bytes(g)
    p_star = marking_needed()
    m = measure(lab, ecn)
    lab.log(
        f"ecn_tuning: {m['samples']} queue samples; p50 {m['queue_p50_bytes']} B; "
        f"{m['ecn_marks']} CE marks; {m['pfc_frames']} PAUSE frames; series in {m['telemetry']}"
    )
    lab.check(
        "the emulator kept up (the figures below are the network's)",
        m["faithful"],
        "faithful" if m["faithful"] else m["unfaithful"],
        "every port on time (emu/fidelity.py)",
        "not your thresholds: the machine was too busy to emulate the links on time; close "
        "other programs and check again",
    )
    settle = settling_bytes(ecn, p_star)
    if ecn["pmax"] < 2 * p_star:
        # Marking reaches p* only in the top half of Kmin..Kmax, or past Kmax.
        knob = (
            f"raise Pmax (yours: {ecn['pmax']}) well above {p_star:.2f}, the share of packets "
            "DCQCN must mark to hold 8 senders at their fair share: below it, or just above, "
            "marking gets there only near or past Kmax, so the queue overshoots and then, "
            "after the senders' hard cut, runs dry"
        )
    elif settle < 2 * DATA_FRAME_BYTES:
        knob = (
            f"the queue settles at about {settle:.0f} B (Kmin + {p_star:.2f}/Pmax x (Kmax - "
            "Kmin)), less than two frames, so the link idles whenever a frame comes late: "
            "raise Kmin a little"
        )
    else:
        knob = (
            f"the queue settles at about {settle:.0f} B (Kmin + {p_star:.2f}/Pmax x (Kmax - "
            f"Kmin)), and its own delay ({settle * 8 / RATE_BPS * 1e3:.0f} ms) lengthens "
            "DCQCN's loop until the queue swings between empty and a peak above Kmax: bring "
            "it down, by lowering Kmin and Kmax or raising Pmax"
        )
    p99 = m["queue_p99_bytes"]
    lab.check(
        "bottleneck queue p99 (lossless class)",
        p99 <= target,
        f"{p99} B",
        f"<= {target} B ({QUEUE_TARGET_BDPS} x the loop's bandwidth-delay product, {bdp:.0f} B)",
        f"too deep: {knob}",
    )
    util = m["utilisation"]
    lab.check(
        "bottleneck utilisation",
        util >= UTILISATION_TARGET,
        f"{util:.3f}",
        f">= {UTILISATION_TARGET}",
        f"the link idles: {knob}",
    )
