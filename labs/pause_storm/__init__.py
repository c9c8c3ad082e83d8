"""Lab pause_storm: find a stuck NIC from PAUSE counters, then contain it with the PFC watchdog.

The student owns two files: `answers.yaml` (which host's NIC got stuck) and
`watchdog.yaml` (the switches' PFC watchdog: on/off, detection, restoration,
action). The lab picks the culprit from the instance's seed (emu/labs.py: each
student has their own) and never names it, not even in a failed check; its
NIC stops draining and floods PAUSE (emu/faults.py `stuck_nic`), as in
scenarios/pause_storm.py, on a smaller fabric:

    spine1
     /  \\
  leaf1  leaf2
  h1 h2 h3   h4 h5 h6      every host sends RoCEv2 to every other at 40% of
                           its link; one NIC gets stuck at 2.5 s, heals 3 s later

`check` runs that timeline once with the student's watchdog and grades, on
real frames: the named culprit against the host the fault was injected on;
the watchdog's storm events (on the culprit's leaf port, within detection
plus one poll, nowhere else); the victim flows' goodput and their NICs'
paused time between the recovery target and the heal against what they had
before the fault; and the culprit's queue restored within restoration plus
one poll after the heal. `start` runs the same fabric, traffic and fault
(without the heal) and opens the CLI in the storm.

Owns nothing of emu: it uses `emu.net.Fabric`, `emu.traffic.rdma`,
`emu.faults` and the switches' management socket as a user's script would.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict

from emu import fabric as fabric_mod
from emu.config import ConfigError, WatchdogSpec
from emu.labs import LabError, LabRun
from emu.net import Fabric
from emu.proto.pfc import quanta_to_s
from emu.traffic.rdma import RdmaHosts, received_bps

TITLE = "Pause storm: find the misbehaving NIC from telemetry alone, then contain it"
MINUTES = 50
ORDER = 5
GRADES = (
    "the stuck NIC you name, and with your PFC watchdog: storm detection time, victims' "
    "goodput and paused time after the fault, restoration after the NIC heals"
)
FILES = ("answers.yaml", "watchdog.yaml")

RATE_BPS = 10_000_000
# Time scale 1, as scenarios/pause_storm.py: the storm and SONiC's 200 ms
# watchdog live on the same clock as the emulated links, and the NICs keep the
# IB local ACK timeout of 67 ms (emu/host/rnic.py), so a victim whose frames
# were held by the storm resends 67 ms after it was released at the latest.
RTO_S = 4.096e-6 * 2**14
SEED = 2016  # the reference instance (Guo et al., SIGCOMM 2016): solution/ answers it
LOAD = 0.4  # each host's rate as a share of its link, over its flows (scenarios/pause_storm.py)
MESSAGE_BYTES = 16384
FAULT_AT_S = 2.5  # the NIC gets stuck
STORM_S = 3.0  # and heals this long after
# A NIC that keeps pausing refreshes its PAUSE every half pause time (802.1Qbb;
# emu/host/rnic.py): 65535 quanta of 512 bit times at 10 Mbit/s last 3.36 s,
# so the watchdog hears from the stuck NIC only every 1.68 s. A restoration
# time shorter than that ends the storm between two refreshes (and declares it
# again at the next): the watchdog flaps.
PAUSE_REFRESH_S = quanta_to_s(0xFFFF, RATE_BPS) / 2
# The exercise's target for the healed host: its queue restored within 2.5 s
# of the heal; the run goes on a little longer, so that a late restore is seen.
RESTORE_TARGET_S = 2.5
AFTER_HEAL_S = RESTORE_TARGET_S + 0.3
BEFORE_WINDOW_S = (1.5, 0.2)  # victims' baseline: from 1.5 s to 0.2 s before the fault
# The exercise's target: victims run again within 1 s of the fault. The model
# of what a watchdog needs (detection + one poll + the RTO of a held frame) is
# printed beside it, from the student's own settings.
RECOVERY_TARGET_S = 1.0
# scenarios/pause_storm.py's criterion: a victim flow has recovered at half its
# rate before the fault, and the storm is contained when 90% of them have.
RECOVERED_SHARE = 0.5
RECOVERED_FLOWS = 0.9
# At 40% load every port has 60% to spare: no healthy queue stays above XOFF,
# so a victim NIC paused for more than a tenth of the window is still in the storm.
MAX_PAUSED_SHARE = 0.1
# From the fault (or heal) to the NIC's first (or last) PAUSE reaching the
# switch, and the queue's first frame waiting (scenarios/pause_storm.py's slack).
SLACK_S = 0.15
STUDENT_KEYS = ("enabled", "detection_s", "restoration_s", "action")
LOSSLESS_PRIO = 3  # DESIGN.md: RoCEv2 data, DSCP 26


def graph():
    return fabric_mod.leaf_spine(
        leaves=2, spines=1, hosts_per_leaf=3, host_rate_bps=RATE_BPS, name="pause_storm"
    )


def culprit(g, seed: int = SEED) -> str:
    """The host whose NIC gets stuck in instance `seed`; never printed by the lab."""
    return random.Random(seed).choice(fabric_mod.hosts(g))


def student_watchdog(lab: LabRun) -> dict:
    """The watchdog section from watchdog.yaml, validated as emu validates it.

    Raises:
        LabError: an unknown key (poll_s and time_scale are the switch's and the
            fabric's, not the student's) or a value emu refuses.
    """
    doc = lab.answers("watchdog.yaml", keys=STUDENT_KEYS)
    try:
        WatchdogSpec.from_dict(doc)
    except (ConfigError, TypeError) as exc:
        raise LabError(f"{lab.path('watchdog.yaml')}: {exc}") from None
    return dict(doc)


def all_to_all(g) -> list[tuple[str, str]]:
    hosts = fabric_mod.hosts(g)
    return [(s, d) for s in hosts for d in hosts if s != d]


def start_traffic(fab: Fabric, seconds: float) -> tuple[RdmaHosts, dict]:
    """Every host sends to every other at LOAD of its link for `seconds`; returns NICs and QPs."""
    hosts = fabric_mod.hosts(fab.graph)
    nics = RdmaHosts(fab, hosts, dcqcn=False)  # the fabric's: its NIC faults go to these agents
    per_flow = LOAD * RATE_BPS / (len(hosts) - 1)
    qps = {(s, d): nics.connect(s, d, max_rate_bps=per_flow) for s, d in all_to_all(fab.graph)}
    for (s, _), q in qps.items():
        nics.post(s, q, MESSAGE_BYTES, int(per_flow * seconds / 8 / MESSAGE_BYTES) + 2)
    return nics, qps


def wait_until(t_monotonic: float) -> None:
    """Let the experiment's timeline run to `t_monotonic`; the traffic is the agents'."""
    threading.Event().wait(max(0.0, t_monotonic - time.monotonic()))


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    wd = student_watchdog(lab)
    g = graph()
    with lab.fabric(g, qos={"watchdog": wd, "ecn": {"enabled": False}}) as fab:
        # Traffic for the whole session, so that the storm is there to be found.
        start_traffic(fab, seconds=1800)
        lab.log(
            f"all-to-all RoCEv2 between {len(fabric_mod.hosts(g))} hosts at {LOAD:.0%} load; "
            f"one NIC gets stuck {FAULT_AT_S:g} s from now and stays stuck"
        )
        wait_until(time.monotonic() + FAULT_AT_S)
        fab.faults.stuck_nic(culprit(g, lab.seed))
        lab.log(
            "a NIC is stuck: find it from the switches' PAUSE counters "
            "(ctl SWITCH counters: pfc.pause_rx; ctl SWITCH ports; net)"
        )
        interactive(fab)


def run_storm(fab: Fabric, seed: int = SEED) -> dict:
    """The graded timeline on a running fabric; returns what the checks measure."""
    g = fab.graph
    stuck = culprit(g, seed)
    hosts = fabric_mod.hosts(g)
    victims = [h for h in hosts if h != stuck]
    t0 = time.monotonic()
    nics, qps = start_traffic(fab, seconds=FAULT_AT_S + STORM_S + AFTER_HEAL_S)
    wait_until(t0 + FAULT_AT_S)
    t_fault = time.monotonic()
    fab.faults.stuck_nic(stuck)
    wait_until(t_fault + RECOVERY_TARGET_S)
    t_target = time.monotonic()
    paused_at_target = {h: nics.nic_stats(h).paused_s[LOSSLESS_PRIO] for h in victims}
    wait_until(t_fault + STORM_S)
    t_heal = time.monotonic()
    paused_at_heal = {h: nics.nic_stats(h).paused_s[LOSSLESS_PRIO] for h in victims}
    fab.faults.stuck_nic(stuck, stuck=False)
    wait_until(t_heal + AFTER_HEAL_S)
    samples = {h: nics.nic_samples(h) for h in hosts}
    events = [(sw, e) for sw in fabric_mod.switches(g) for e in fab.watchdog(sw).events]
    truth = [e["host"] for e in fab.faults.events if e["kind"] == "stuck_nic"]
    flows = {}
    for (s, d), q in qps.items():
        if stuck in (s, d):
            continue
        before = received_bps(
            samples[d], q, t_fault - BEFORE_WINDOW_S[0], t_fault - BEFORE_WINDOW_S[1]
        )
        after = received_bps(samples[d], q, t_target, t_heal)
        flows[f"{s}->{d}"] = (before, after)
    window = t_heal - t_target
    leaf = g.nodes[stuck]["leaf"]
    return {
        "truth": truth,
        "t_fault": t_fault,
        "t_heal": t_heal,
        "flows": flows,
        "paused_share": {h: (paused_at_heal[h] - paused_at_target[h]) / window for h in victims},
        "storms": [{"switch": sw, **asdict(e)} for sw, e in events if e.kind == "storm"],
        "restores": [{"switch": sw, **asdict(e)} for sw, e in events if e.kind == "restored"],
        "stuck_port": (leaf, g.edges[stuck, leaf]["ports"][leaf]),
    }


def check(lab: LabRun) -> None:
    g = graph()
    wd = student_watchdog(lab)
    spec = WatchdogSpec.from_dict(wd)
    named = str(lab.answers("answers.yaml").get("culprit") or "").strip()
    hint = f"a switch refused watchdog.yaml; its log under {lab.out_dir}/logs says why"
    qos = {"watchdog": wd, "ecn": {"enabled": False}}
    fab = lab.open_fabric("the fabric starts with your watchdog", hint, g, qos=qos)
    if fab is None:
        return
    try:
        r = run_storm(fab, lab.seed)
    finally:
        lab.close_fabric(fab)
    report(lab, g, spec, named, r)


def report(lab: LabRun, g, spec: WatchdogSpec, named: str, r: dict) -> None:
    """The checks of one graded run `r` with the student's watchdog `spec`."""
    truth = r["truth"][0] if r["truth"] else None
    if truth is None:
        wrong = "no NIC got stuck in this run: a lab defect, not your answer; please report it"
    elif not named:
        wrong = "fill in `culprit:` in answers.yaml"
    elif named not in fabric_mod.hosts(g):
        wrong = f"{named} is not a host of this fabric (`net` lists them)"
    else:
        wrong = f"{named}'s NIC drains its queue: it sends no PAUSE of its own"
    lab.grade(
        "the host whose NIC is stuck",
        bool(named) and named == truth,
        named,
        wrong,
        "run `sudo emu lab start pause_storm` and read `ctl SWITCH counters` on every switch: "
        '"pfc": "pause_rx" ("port:priority") says which ports PAUSE came IN on. Follow it: a '
        "switch that receives PAUSE from a switch was paused because that switch's buffer "
        "filled; the storm starts where a HOST sends PAUSE (`ctl SWITCH ports` and `net` "
        "say who is behind a port). The stuck NIC is your instance's own: a neighbour's "
        "answer need not be yours",
    )
    leaf, port = r["stuck_port"]
    on_port = [e for e in r["storms"] if (e["switch"], e["port"]) == (leaf, port)]
    elsewhere = sorted(
        {f"{e['switch']} port {e['port']}" for e in r["storms"]} - {f"{leaf} port {port}"}
    )
    # A storm is declared at the first poll at least `detection` after the queue
    # stopped; it stopped within SLACK_S of the fault, and polls come every poll_s.
    detection = spec.detection_s * spec.time_scale
    bound = detection + spec.poll_s + SLACK_S
    delay = (min(e["t"] for e in on_port) - r["t_fault"]) if on_port else None
    lab.check(
        "the watchdog declares the storm on the stuck NIC's port, in time, and nowhere else",
        delay is not None and delay <= bound and not elsewhere,
        ("no storm declared on it" if delay is None else f"declared {delay:.2f} s after the fault")
        + (f"; also declared on {', '.join(elsewhere)}" if elsewhere else ""),
        f"<= {bound:.2f} s (detection {detection:g} + one poll {spec.poll_s:g} + {SLACK_S:g} "
        "for the PAUSE to arrive and the queue to fill), on that port only",
        "is the watchdog enabled, and does detection_s fit the run? A storm declared on a "
        "switch-to-switch port means the storm had spread before the stuck queue was "
        "isolated: only drop or forward free the buffer behind it (alert only counts)",
    )
    flows = r["flows"]
    recovered = [k for k, (before, after) in flows.items() if after >= RECOVERED_SHARE * before]
    before_mbps = sum(b for b, _ in flows.values()) / max(1, len(flows)) / 1e6
    after_mbps = sum(a for _, a in flows.values()) / max(1, len(flows)) / 1e6
    model_s = detection + spec.poll_s + RTO_S
    lab.check(
        f"victim flows run again from {RECOVERY_TARGET_S:g} s after the fault",
        len(recovered) >= RECOVERED_FLOWS * len(flows),
        f"{len(recovered)} of {len(flows)} at >= {RECOVERED_SHARE:.0%} of their rate before "
        f"the fault (mean {before_mbps:.2f} -> {after_mbps:.2f} Mbit/s)",
        f">= {RECOVERED_FLOWS:.0%} of them (the target {RECOVERY_TARGET_S:g} s; your "
        f"watchdog's model: detection {detection:g} + poll {spec.poll_s:g} + RTO "
        f"{RTO_S:.3f} = {model_s:.2f} s)",
        "flows that never touch the stuck NIC stall because PAUSE spreads: the stuck queue "
        "fills the leaf's buffer, the leaf pauses its upstream, and so on. The watchdog must "
        "act (enabled, action drop or forward) and act soon enough: detection + one poll + "
        "the RTO must fit in the target",
    )
    shares = r["paused_share"]
    worst = max(shares, key=shares.get)
    lab.check(
        "victim NICs are no longer paused between the target and the heal",
        shares[worst] <= MAX_PAUSED_SHARE,
        f"most paused: {worst} for {shares[worst]:.0%} of the window",
        f"<= {MAX_PAUSED_SHARE:.0%} (at {LOAD:.0%} load no healthy queue stays above XOFF)",
        "a NIC that is paused while it has nothing to do with the stuck host is the storm's "
        "victim: see the hint above; `emu ctl HOST stats` shows each NIC's paused_s",
    )
    restores = [e["t"] for e in r["restores"] if (e["switch"], e["port"]) == (leaf, port)]
    first_storm = min((e["t"] for e in on_port), default=None)
    # Restored between its first storm and the heal: the watchdog gave the queue back
    # to a NIC that was still stuck (and will declare the storm again).
    flaps = [t for t in restores if first_storm is not None and first_storm < t < r["t_heal"]]
    after = [t - r["t_heal"] for t in restores if t > r["t_heal"]]
    restoration = spec.restoration_s * spec.time_scale
    rbound = min(restoration + spec.poll_s + SLACK_S, RESTORE_TARGET_S)
    rdelay = min(after) if after else None
    value = "not restored" if rdelay is None else f"restored {rdelay:.2f} s after the heal"
    if flaps:
        value += f"; restored {len(flaps)} time(s) while the NIC was still stuck"
    lab.check(
        "the stuck NIC's queue stays isolated until it heals, then is restored",
        bool(on_port) and not flaps and rdelay is not None and rdelay <= rbound,
        value,
        f"no restore before the heal; after it within {rbound:.2f} s (restoration "
        f"{restoration:g} + one poll {spec.poll_s:g} + {SLACK_S:g} for the NIC's last "
        f"PAUSE, and the target {RESTORE_TARGET_S:g} s)",
        "the watchdog restores a queue once no PAUSE arrived on it for restoration_s. A "
        f"stuck NIC refreshes its PAUSE only every {PAUSE_REFRESH_S:.2f} s here (65535 "
        f"quanta x 512 bit times at {RATE_BPS / 1e6:g} Mbit/s, halved): a shorter "
        "restoration gives the queue back between two refreshes. A much longer one keeps "
        "the healed host cut off past the target",
    )


def offline(lab: LabRun) -> None:
    """`emu lab test pause_storm`: watchdog.yaml as the switches read it, a host named."""
    wd = student_watchdog(lab)  # a LabError names a bad key or value
    lab.check("watchdog.yaml is a watchdog emu accepts", isinstance(wd, dict), "valid", "valid", "")
    named = str(lab.answers("answers.yaml", keys=("culprit",)).get("culprit") or "").strip()
    lab.check(
        "answers.yaml names a host",
        named in fabric_mod.hosts(graph()),
        named or "(blank)",
        "a host of the fabric (`net` lists them)",
        "whether it is the stuck one is graded on packets: sudo emu lab check pause_storm",
    )
