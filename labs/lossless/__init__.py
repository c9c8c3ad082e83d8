"""Lab lossless: an incast without and with PFC, and the switch ports that paused.

The student owns two files: `config.yaml`, the PFC (and buffer) settings of
every switch, and `answers.yaml`, the switch ports that sent PAUSE. The
starting point has PFC on for the wrong priority, so the RoCEv2 incast of
scenarios/incast.py (priority 3) is lossy: the bottleneck overflows and
go-back-N resends whole windows. With the lossless class right, nothing is
dropped and PAUSE spreads back from the bottleneck to every sender.

    spine1
     /  \\
  leaf1  leaf2
  h1 h2 h3   h4 h5 h6      h1 h2 h4 h5 send RoCEv2 to h6 (4:1); h3 is idle

`check` builds that fabric with the student's config, runs the incast as a
fixed amount of data on emu's NIC model (scenarios/incast.py's workload,
`emu.traffic.rdma`), and grades drops (every switch's buffer and the
receiver's NIC), the incast's goodput against the bottleneck's line rate,
and the named ports against the ports whose PFC transmit counters moved.
`start` runs the same incast on the same fabric, prints what it measured and
opens the CLI on the fabric, whose counters then hold the answer.

Owns nothing of emu: it uses `emu.net.Fabric`, the switches' management
socket (`counters`) and `emu.traffic.rdma` as a user's script would.
"""

from __future__ import annotations

from emu import fabric as fabric_mod
from emu.config import ConfigError, parse_qos
from emu.host.rnic import DEFAULT_MTU_PAYLOAD
from emu.labs import LabError, LabRun
from emu.models.dcqcn import DATA_FRAME_BYTES
from emu.net import Fabric, FabricError, wait_for
from emu.traffic.rdma import RdmaHosts

TITLE = "Lossless Ethernet: incast without and with PFC; find the paused ports"
MINUTES = 45
ORDER = 3
GRADES = (
    "drops and goodput of a real 4:1 RoCEv2 incast with your PFC config, and the switch "
    "ports you name against the ports whose PAUSE counters moved"
)
FILES = ("config.yaml", "answers.yaml")

RATE_BPS = 10_000_000
# As the incast workload (emu/traffic/incast.py; the incast scenario runs it at
# 20 Mbit/s): 10 Mbit/s links stand for 1 Gbit/s NICs (time scale x100), so the
# NICs' retransmit timeout is 6.7 s, far above any queueing
# delay PFC causes here: every retransmission is a real loss, never a timeout
# that a paused queue provoked.
MODELLED_RATE_BPS = 1e9
SENDERS = ("h1", "h2", "h4", "h5")
RECEIVER = "h6"
MESSAGE_BYTES = 65536
# 16 x 64 KiB per sender: 4 MiB in all, 3.5 s at the bottleneck's line rate,
# long enough for PAUSE to reach every sender and short enough for CI.
MESSAGES_PER_SENDER = 16
TOTAL_PAYLOAD_BYTES = len(SENDERS) * MESSAGES_PER_SENDER * MESSAGE_BYTES
# The model of a lossless incast: the bottleneck (leaf2 -> h6) is work-conserving,
# busy from the first frame to the last, so payload arrives at its line rate
# times the payload's share of a RoCEv2 frame (1024 of 1082 bytes; the switch
# paces frame bytes, emu/switch/scheduler.py).
MODEL_GOODPUT_BPS = RATE_BPS * DEFAULT_MTU_PAYLOAD / DATA_FRAME_BYTES
# The exercise's target: at least 90% of the model (scenarios/incast.py asks the
# same of the PFC bottleneck's utilisation); the rest is the first frames'
# trip to the bottleneck and the last ACK's trip back.
GOODPUT_SHARE = 0.9
# A lossy incast never finishes when a window's tail is lost (the sender waits
# out its 6.7 s timeout): give up at twice the model's time, and grade what arrived.
INCAST_TIMEOUT_S = 2 * TOTAL_PAYLOAD_BYTES * 8 / MODEL_GOODPUT_BPS
CONFIG_SECTIONS = ("pfc", "buffer")


def graph():
    return fabric_mod.leaf_spine(
        leaves=2,
        spines=1,
        hosts_per_leaf=3,
        host_rate_bps=RATE_BPS,
        modelled_rate_bps=MODELLED_RATE_BPS,
        name="lossless",
    )


def student_qos(lab: LabRun) -> dict:
    """The switches' QoS from the student's config.yaml; ECN and the watchdog always off.

    Raises:
        LabError: a section other than pfc and buffer, or a value emu refuses (named).
    """
    doc = lab.answers("config.yaml", keys=CONFIG_SECTIONS)  # ECN and the watchdog stay off
    # The watchdog would take the incast's long, legitimate pauses for a storm
    # (scenarios/incast.py says why); ECN without DCQCN at the NICs does nothing.
    qos = {**doc, "ecn": {"enabled": False}, "watchdog": {"enabled": False}}
    for section in CONFIG_SECTIONS:
        if not isinstance(qos.get(section, {}), dict):
            raise LabError(f"{lab.path('config.yaml')}: {section} must be 'key: value' lines")
    try:
        parse_qos(qos)
    except (ConfigError, TypeError) as exc:
        raise LabError(f"{lab.path('config.yaml')}: {exc}") from None
    return qos


def port_neighbours(g) -> dict[tuple[str, int], str]:
    """(switch, port number) -> the node at the far end of that port."""
    out = {}
    for u, v, e in g.edges(data=True):
        for node, peer in ((u, v), (v, u)):
            if g.nodes[node]["kind"] == "switch":
                out[(node, e["ports"][node])] = peer
    return out


def pfc_tx(fab: Fabric) -> dict[tuple[str, int], int]:
    """PFC frames each switch port has sent so far (XOFF, refreshes and XON)."""
    return {
        (sw, port): n
        for sw in fabric_mod.switches(fab.graph)
        for port, n in fab.counters(sw).pfc.pfc_tx_frames.items()
    }


def run_incast(fab: Fabric, lab: LabRun) -> dict:
    """The incast on a running fabric: what was delivered, how fast, what dropped, who paused."""
    nics = RdmaHosts(fab, [*SENDERS, RECEIVER], dcqcn=False)
    qps = {s: nics.connect(s, RECEIVER) for s in SENDERS}
    before = pfc_tx(fab)
    lab.log(
        f"incast: {', '.join(SENDERS)} each send {MESSAGES_PER_SENDER} x {MESSAGE_BYTES} B "
        f"to {RECEIVER} (RoCEv2, DSCP 26)"
    )
    for s in SENDERS:
        nics.post(s, qps[s], MESSAGE_BYTES, MESSAGES_PER_SENDER)

    def completed() -> bool:
        return all(
            len(nics.nic_stats(s).send[qps[s]].completed) >= MESSAGES_PER_SENDER for s in SENDERS
        )

    try:
        wait_for(
            completed,
            INCAST_TIMEOUT_S,
            "every message of the incast to complete at its sender",
            interval_s=0.1,
        )
    except FabricError:
        pass  # a lossy incast stalls on its timeouts: graded on what arrived
    sent = {s: nics.nic_stats(s).send[qps[s]] for s in SENDERS}
    recv = nics.nic_stats(RECEIVER)
    after = pfc_tx(fab)
    counters = {sw: fab.counters(sw) for sw in fabric_mod.switches(fab.graph)}
    delivered = sum(recv.recv[q].rx_bytes for q in qps.values())
    # The NIC agents share the machine's monotonic clock: from the first post to
    # the last completion (or to now, for an incast that did not finish).
    posted = [m[2] for st in sent.values() for m in st.completed]
    done = [m[3] for st in sent.values() for m in st.completed]
    start = min(posted) if posted else None
    finished = delivered >= TOTAL_PAYLOAD_BYTES and len(done) == len(SENDERS) * MESSAGES_PER_SENDER
    elapsed = (max(done) - start) if finished and start is not None else INCAST_TIMEOUT_S
    neighbours = port_neighbours(fab.graph)
    paused = sorted(
        f"{sw} -> {neighbours[(sw, port)]}"
        for (sw, port), n in after.items()
        if n > before.get((sw, port), 0)
    )
    drops: dict[str, int] = {}
    for sw, c in counters.items():
        for cause, n in c.buffer.drops.items():
            drops[f"{sw} {cause}"] = drops.get(f"{sw} {cause}", 0) + n
        if c.watchdog.drops:
            drops[f"{sw} watchdog"] = c.watchdog.drops
    if recv.rx_overflow:
        drops[f"{RECEIVER} NIC overflow"] = recv.rx_overflow
    return {
        "delivered_bytes": delivered,
        "finished": finished,
        "elapsed_s": elapsed,
        "goodput_bps": delivered * 8 / elapsed if elapsed > 0 else 0.0,
        "per_sender_bytes": {s: recv.recv[q].rx_bytes for s, q in qps.items()},
        "retransmitted": sum(st.retransmitted for st in sent.values()),
        "drops": drops,
        "paused_ports": paused,
    }


def summary(result: dict) -> str:
    drops = sum(result["drops"].values())
    where = ", ".join(f"{k} {v}" for k, v in sorted(result["drops"].items()))
    lines = [
        f"incast {'finished' if result['finished'] else 'did NOT finish'}: "
        f"{result['delivered_bytes']} of {TOTAL_PAYLOAD_BYTES} B in {result['elapsed_s']:.2f} s, "
        f"goodput {result['goodput_bps'] / 1e6:.2f} Mbit/s "
        f"(line-rate model {MODEL_GOODPUT_BPS / 1e6:.2f})",
        f"  frames dropped: {drops}{f' ({where})' if where else ''}; "
        f"retransmitted by the senders: {result['retransmitted']}",
        "  per sender (bytes at h6): "
        + ", ".join(f"{s} {n}" for s, n in result["per_sender_bytes"].items()),
    ]
    return "\n".join(lines)


def start(lab: LabRun) -> None:
    from emu.cli import interactive

    qos = student_qos(lab)
    with lab.fabric(graph(), qos=qos) as fab:
        lab.log(summary(run_incast(fab, lab)))
        lab.log(
            "the incast is over; its counters stay. Which switch ports sent PAUSE? "
            "(ctl SWITCH counters, ctl SWITCH ports, net)"
        )
        interactive(fab)


def named_ports(lab: LabRun, g) -> tuple[set[str], list[str]]:
    """The student's paused ports as "SWITCH -> NEIGHBOUR", and the entries naming no port."""
    answers = lab.answers("answers.yaml")
    raw = answers.get("paused_ports") or []
    if not isinstance(raw, list):
        raise LabError(
            f"{lab.path('answers.yaml')}: paused_ports must be a list "
            '("- leaf9 -> h42" lines), found ' + type(raw).__name__
        )
    neighbours = port_neighbours(g)
    by_intf = {
        g.edges[node, peer]["intfs"][node]: f"{node} -> {peer}"
        for (node, _), peer in neighbours.items()
    }
    known = set(by_intf.values())
    named, bad = set(), []
    for entry in raw:
        text = str(entry).strip()
        as_edge = " -> ".join(part.strip() for part in text.split("->"))
        if text in by_intf:
            named.add(by_intf[text])
        elif as_edge in known:
            named.add(as_edge)
        else:
            bad.append(text)
    return named, bad


def check(lab: LabRun) -> None:
    g = graph()
    qos = student_qos(lab)
    named, bad = named_ports(lab, g)
    hint = f"a switch refused config.yaml; its log under {lab.out_dir}/logs says why"
    fab = lab.open_fabric("the fabric starts with your config", hint, g, qos=qos)
    if fab is None:
        return
    try:
        result = run_incast(fab, lab)
    finally:
        lab.close_fabric(fab)
    lab.log(summary(result))
    drops = sum(result["drops"].values())
    lab.check(
        "no frame of the incast is dropped",
        drops == 0,
        f"{drops} dropped"
        + (
            f" ({', '.join(f'{k} {v}' for k, v in sorted(result['drops'].items()))})"
            if drops
            else ""
        )
        + f", {result['retransmitted']} retransmitted",
        "0 (a lossless class never drops for lack of buffer)",
        "frames of the incast are still treated as lossy: the cause names it "
        "(lossy_threshold: their priority is not in pfc.lossless_priorities; "
        "lossless_threshold_pfc_off: PFC is off). `ctl leaf2 counters` shows "
        '"drops_by_queue" as "port:priority"; RoCEv2 is DSCP 26, and DESIGN.md\'s '
        "Conventions say which priority that is",
    )
    lab.check(
        "the incast's goodput at h6",
        result["finished"] and result["goodput_bps"] >= GOODPUT_SHARE * MODEL_GOODPUT_BPS,
        f"{result['goodput_bps'] / 1e6:.2f} Mbit/s"
        + ("" if result["finished"] else f" (did not finish in {INCAST_TIMEOUT_S:.1f} s)"),
        f">= {GOODPUT_SHARE * MODEL_GOODPUT_BPS / 1e6:.2f} Mbit/s ({GOODPUT_SHARE:.0%} of the "
        f"bottleneck's {RATE_BPS / 1e6:g} Mbit/s x {DEFAULT_MTU_PAYLOAD}/{DATA_FRAME_BYTES} "
        "payload share: a lossless bottleneck never idles)",
        "every dropped frame costs a go-back-N resend of the window behind it, and a lost "
        "tail waits out the 6.7 s retransmit timeout: make the incast lossless first",
    )
    grade_paused_ports(lab, named, bad, set(result["paused_ports"]))


def grade_paused_ports(lab: LabRun, named: set[str], bad: list[str], actual: set[str]) -> None:
    """The ports named against those whose PFC transmit counters moved (`actual`).

    A wrong answer is told which of its ports sent no PAUSE and that some are
    missing, never which are missing nor how many there are.
    """
    wrong = []
    if not actual:
        wrong.append("no switch port sent PAUSE in this run: fix config.yaml first")
    else:
        if named - actual:
            wrong.append(f"named but sent no PAUSE: {', '.join(sorted(named - actual))}")
        if actual - named:
            wrong.append("some ports that sent PAUSE are not named")
    if bad:
        wrong.append(f"not a switch port of this fabric: {', '.join(bad)}")
    lab.grade(
        "the switch ports you named are the ones that sent PAUSE",
        bool(actual) and named == actual and not bad,
        ", ".join(sorted(named) + bad),
        "; ".join(wrong),
        "with no PAUSE at all, fix config.yaml first. Otherwise: PAUSE leaves a switch "
        "through the port where the traffic that fills its buffer comes IN, towards the "
        'upstream sender; follow the incast back from leaf2. `ctl SWITCH counters` "pfc": '
        '"pfc_tx_frames" counts per port number, `ctl SWITCH ports` names each port, and '
        "Mininet's `net` says who is at its far end",
    )


def offline(lab: LabRun) -> None:
    """`emu lab test lossless`: config.yaml as the switches read it, the ports named exist."""
    qos = student_qos(lab)  # a LabError names a bad key or value
    lab.check("config.yaml is a configuration emu accepts", bool(qos), "valid", "valid", "")
    named, bad = named_ports(lab, graph())
    lab.check(
        "paused_ports names at least one port",
        bool(named or bad),
        f"{len(named) + len(bad)} entries",
        ">= 1",
        "list every switch port that sent PAUSE, one `- SWITCH -> NEIGHBOUR` line each",
    )
    lab.check(
        "every entry of paused_ports names a switch port",
        not bad,
        f"{len(named)} ports" + (f"; not a switch port: {', '.join(bad)}" if bad else ""),
        "SWITCH -> NEIGHBOUR or an interface name",
        "`net` in the lab's CLI lists every port and its far end; whether they sent PAUSE "
        "is graded on packets: sudo emu lab check lossless",
    )
