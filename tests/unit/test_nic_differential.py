"""The C NIC engine against the Python model (emu/host/rnic.py is the specification).

Two NICs joined by a scripted wire exchange traffic on a virtual clock: loss,
reordering (random per-frame delay), CE marks, PAUSE frames injected, a receiver
that drains slowly and one that gets stuck, RDMA WRITEs, real data reassembled,
several QPs on two priorities with a static rate cap, DCQCN on and off,
go-back-N, go-back-0 and "selective" (packets held out of order, the NAK
rounds of holes found lost, PSNs beyond a small window, data placed out of
order), and the credit link instead of PFC (credit running
out, ACKs waiting for it, flow control frames lost). The same script runs once with two `rnic.Rnic` and
once with two `nicpath.CRnic`; every frame each NIC emits (with its time),
every wake-up time asked, the received messages, the completions and the
final counters must be equal. The wire's random draws follow the frames, so
the first difference in a frame changes everything after it: the comparison
names the first differing event.

EMU_DIFF_NIC_SCALE multiplies the scripted durations (scripts/sanitize runs
the test under ASan/UBSan).
"""

from __future__ import annotations

import heapq
import os
import random

import pytest

from emu.config import CreditSpec
from emu.host import nicpath, rnic
from emu.host.rnic import NicConfig
from emu.proto import credit, pfc, roce
from emu.switch import rewrite

pytestmark = pytest.mark.skipif(nicpath._nicpath is None, reason="emu.host._nicpath not built")

SCALE = float(os.environ.get("EMU_DIFF_NIC_SCALE", "1"))
RATE = 10_000_000
MAC = ("02:00:00:00:00:01", "02:00:00:00:00:02")
IP = ("10.0.0.1", "10.0.0.2")


def make_pair(kind: str, scenario: dict) -> list:
    cls = rnic.Rnic if kind == "python" else nicpath.CRnic
    nics = []
    for i in range(2):
        cfg = NicConfig(
            mac=MAC[i],
            ip=IP[i],
            rate_bps=RATE,
            dcqcn=scenario["dcqcn"],
            loss_recovery=scenario["loss_recovery"],
            mtu_payload=scenario.get("mtu", rnic.DEFAULT_MTU_PAYLOAD),
            modelled_rate_bps=scenario.get("modelled", 25e9),
            inbox_max_bytes=scenario.get("inbox_max", 64 << 20),
            rx_buffer_bytes=scenario.get("rx_buffer", 256 * 1024),
            rx_xoff_bytes=scenario.get("rx_xoff", 128 * 1024),
            rx_xon_bytes=scenario.get("rx_xon", 64 * 1024),
            credit=scenario.get("credit"),
            drain_rate_bps=scenario.get("drain"),
            ooo_window_packets=scenario.get("ooo_window", rnic.MAX_OUTSTANDING_PACKETS),
        )
        nics.append(cls(cfg, now=0.0))
    for a in range(2):
        b = 1 - a
        for k, (dscp, cap) in enumerate(scenario["qps"]):
            nics[a].connect(
                100 + k, 100 + k, MAC[b], IP[b], 49152 + k, 0.0, max_rate_bps=cap, dscp=dscp
            )
            if scenario.get("deliver"):
                nics[a].set_deliver_data(100 + k, True)
    return nics


def run(kind: str, scenario: dict, seed: int) -> list:
    """The events of one run: (time, what, NIC, bytes or value)."""
    rng = random.Random(seed)
    nics = make_pair(kind, scenario)
    events: list = []
    wire: list = []  # (arrival, seq, dst, frame)
    seq = 0
    loss, ce, jitter = scenario["loss"], scenario["ce"], scenario["jitter_s"]
    delay = 200e-6
    cut = False  # the link is down: every frame but PAUSE is lost

    def send(src: int, frame: bytes, now: float) -> None:
        nonlocal seq
        events.append((round(now, 9), "tx", src, frame))
        r = rng.random()
        if (r < loss or cut) and not pfc.is_mac_control(frame):
            return
        if rng.random() < ce and roce.is_rocev2(frame):
            frame = rewrite.set_ip_ecn(frame, roce.ECN_CE)
        seq += 1
        heapq.heappush(wire, (now + delay + rng.random() * jitter, seq, 1 - src, frame))

    posts = sorted(scenario["posts"])  # (time, nic, qp index, size, kind)
    step = 100e-6
    end = scenario["seconds"] * SCALE
    t = 0.0
    data_rng = random.Random(seed + 1)
    pause_every = scenario.get("pause_every_s")
    next_pause = pause_every if pause_every else None
    faults = sorted(scenario.get("faults", []))
    take_every = scenario.get("take_every_s", step)  # a slow consumer fills the inbox
    while t < end:
        while posts and posts[0][0] <= t:
            _, n, k, size, how = posts.pop(0)
            qpn = 100 + k
            if how == "data":
                data = bytes(data_rng.getrandbits(8) for _ in range(size))
                msg = nics[n].post_send(qpn, size, t, data=data)
            elif how == "write":
                msg = nics[n].post_write(qpn, size, t, remote_va=0x1000 * k, rkey=7 + k)
            else:
                msg = nics[n].post_send(qpn, size, t)
            events.append((round(t, 9), "post", n, msg))
        while faults and faults[0][0] <= t:
            _, n, what = faults.pop(0)
            if what == "stuck":
                nics[n].stuck = True
            elif what == "unstuck":
                nics[n].stuck = False
            else:
                cut = what == "cut"
        if next_pause is not None and t >= next_pause:
            quanta = rng.choice((0, 50, 500, 0xFFFF))
            frame = pfc.build(pfc.template(MAC[0]), {rnic.DATA_PRIO: quanta})
            target = rng.randrange(2)
            for f in nics[target].receive(frame, t):
                send(target, f, t)
            events.append((round(t, 9), "pause-in", target, quanta))
            next_pause += pause_every
        while wire and wire[0][0] <= t:
            _, _, dst, frame = heapq.heappop(wire)
            for f in nics[dst].receive(frame, t):
                send(dst, f, t)
        for n in range(2):
            for f in nics[n].tick(t):
                send(n, f, t)
            frame = nics[n].next_frame(t)
            while frame is not None:
                send(n, frame, t)
                frame = nics[n].next_frame(t)
            events.append((round(t, 9), "wake", n, (nics[n].next_wakeup(t), nics[n].next_tick())))
            if int(t / take_every) != int((t - step) / take_every):
                for k in range(len(scenario["qps"])):
                    for msn, data in nics[n].take_messages(100 + k):
                        events.append((round(t, 9), "msg", n, (k, msn, data)))
        # The drain of a slow receiver (drain_rate_bps) is configured on both.
        t += step
    for n in range(2):
        stats = nics[n].stats(t)
        events.append((t, "stats", n, stats))
        snap = nics[n].clock.snapshot()
        snap.pop("rate_bps", None)
        events.append((t, "clock", n, snap))
    return events


def first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"event {i}: python {x!r:.600}\n          c      {y!r:.600}"
    return f"lengths differ: python {len(a)} events, c {len(b)}"


SCENARIOS = {
    "loss-and-reorder-go-back-n": dict(
        dcqcn=True,
        loss_recovery=rnic.GO_BACK_N,
        qps=[(roce.DSCP_DATA, None), (rnic.DSCP_SECOND_CLASS, 3e6)],
        posts=[
            (0.0, 0, 0, 200_000, "send"),
            (0.0, 1, 1, 60_000, "write"),
            (0.05, 0, 1, 1, "send"),
            (0.1, 1, 0, 50_000, "send"),
        ],
        modelled=RATE,
        faults=[(0.12, 0, "cut"), (0.25, 0, "uncut")],
        expect_timeouts=True,
        loss=0.01,
        ce=0.0,
        jitter_s=300e-6,
        seconds=0.6,
    ),
    "go-back-0": dict(
        dcqcn=False,
        loss_recovery=rnic.GO_BACK_0,
        qps=[(roce.DSCP_DATA, None)],
        posts=[
            (0.0, 0, 0, 40_000, "send"),
            (0.0, 0, 0, 30_000, "send"),
            (0.0, 1, 0, 20_000, "send"),
        ],
        loss=0.03,
        modelled=RATE,  # time scale 1: the RTO is 67 ms and fires within the run
        faults=[(0.03, 0, "cut"), (0.12, 0, "uncut")],
        expect_timeouts=True,
        ce=0.0,
        jitter_s=100e-6,
        seconds=0.6,
    ),
    "ce-marks-and-dcqcn": dict(
        dcqcn=True,
        loss_recovery=rnic.GO_BACK_N,
        qps=[(roce.DSCP_DATA, None), (roce.DSCP_DATA, None)],
        posts=[(0.0, 0, 0, 300_000, "send"), (0.0, 0, 1, 300_000, "send")],
        loss=0.0,
        ce=0.2,
        jitter_s=0.0,
        modelled=10e6 * 50,  # a time scale of 50: DCQCN's timers fire within the run
        seconds=0.6,
    ),
    "pause-and-stuck-receiver": dict(
        dcqcn=True,
        loss_recovery=rnic.GO_BACK_N,
        qps=[(roce.DSCP_DATA, None)],
        posts=[(0.0, 0, 0, 400_000, "send")],
        loss=0.0,
        ce=0.0,
        jitter_s=50e-6,
        pause_every_s=0.02,
        faults=[(0.1, 1, "stuck"), (0.2, 1, "unstuck")],
        rx_buffer=40_000,
        rx_xoff=20_000,
        rx_xon=10_000,
        seconds=0.6,
    ),
    "data-reassembly-and-rnr": dict(
        dcqcn=False,
        loss_recovery=rnic.GO_BACK_N,
        qps=[(roce.DSCP_DATA, None)],
        posts=[
            (0.0, 0, 0, 5000, "data"),
            (0.0, 0, 0, 0, "data"),
            (0.01, 0, 0, 9000, "data"),
            (0.02, 1, 0, 3000, "data"),
            (0.03, 0, 0, 6000, "data"),
        ]
        + [(0.04 + 0.01 * i, i % 2, 0, 1000 + 700 * i, "data") for i in range(12)],
        deliver=True,
        inbox_max=12_000,
        take_every_s=0.03,
        loss=0.02,
        ce=0.0,
        jitter_s=200e-6,
        seconds=0.5,
    ),
    # The credit link instead of PFC (emu/credit.py): both priorities are credit VLs,
    # a small receive buffer drained slowly so that credit runs out and ACKs wait
    # for it, flow control frames lost with the rest (the refresh and the FCTBS
    # resync recover), a receiver stuck for a while (it returns no credit).
    "credit-link": dict(
        dcqcn=False,
        loss_recovery=rnic.GO_BACK_N,
        qps=[(roce.DSCP_DATA, None), (rnic.DSCP_SECOND_CLASS, None)],
        posts=[
            (0.0, 0, 0, 150_000, "send"),
            (0.0, 0, 1, 60_000, "write"),
            (0.02, 1, 0, 80_000, "send"),
            (0.2, 1, 1, 30_000, "send"),
        ],
        credit=CreditSpec(enabled=True, priorities=(3, 4), refresh_symbols=4096),
        rx_buffer=12_000,
        drain=6e6,
        faults=[(0.3, 1, "stuck"), (0.4, 1, "unstuck")],
        expect_credit_waits=True,
        loss=0.01,
        ce=0.0,
        jitter_s=100e-6,
        seconds=0.6,
    ),
    "credit-link-dcqcn-go-back-0": dict(
        dcqcn=True,
        loss_recovery=rnic.GO_BACK_0,
        qps=[(roce.DSCP_DATA, None)],
        posts=[
            (0.0, 0, 0, 100_000, "send"),
            (0.0, 0, 0, 100_000, "send"),
            (0.0, 1, 0, 80_000, "send"),
            (0.1, 1, 0, 60_000, "send"),
        ],
        credit=CreditSpec(enabled=True),
        modelled=10e6 * 50,
        expect_credit_waits=False,
        loss=0.02,
        ce=0.1,
        jitter_s=50e-6,
        seconds=0.5,
    ),
    # "selective" (emu/host/reorder.py): a wire that reorders by up to 3 ms (about
    # 4 packets at 10 Mbit/s) and loses 1%, a cut (the RTO goes back N, the holes'
    # NAK rounds repeat), DCQCN and CE marks; the reorder timeout is 33 ms.
    "selective-reorder-and-loss": dict(
        dcqcn=True,
        loss_recovery=rnic.SELECTIVE,
        qps=[(roce.DSCP_DATA, None), (rnic.DSCP_SECOND_CLASS, 3e6)],
        posts=[
            (0.0, 0, 0, 250_000, "send"),
            (0.0, 1, 1, 60_000, "write"),
            (0.05, 0, 1, 1, "send"),
            (0.1, 1, 0, 80_000, "send"),
        ],
        modelled=RATE,
        faults=[(0.1, 0, "cut"), (0.2, 0, "uncut")],
        expect_timeouts=True,
        loss=0.01,
        ce=0.05,
        jitter_s=3e-3,
        seconds=0.7,
    ),
    # Reordering alone: neither engine NAKs or resends anything.
    "selective-reorder-only": dict(
        dcqcn=False,
        loss_recovery=rnic.SELECTIVE,
        qps=[(roce.DSCP_DATA, None)],
        posts=[(0.0, 0, 0, 300_000, "send"), (0.0, 1, 0, 100_000, "write")],
        modelled=RATE,
        expect_no_naks=True,
        loss=0.0,
        ce=0.0,
        jitter_s=5e-3,
        seconds=0.5,
    ),
    # Real data placed out of order in a window smaller than the requester's
    # (PSNs beyond it are dropped and the base NAKed), an inbox that fills (RNR
    # NAKs with packets held), a slow receiver's PAUSE, on a credit link's twin
    # below.
    "selective-small-window-data": dict(
        dcqcn=False,
        loss_recovery=rnic.SELECTIVE,
        qps=[(roce.DSCP_DATA, None)],
        posts=[(0.0, 0, 0, 20_000, "data"), (0.0, 0, 0, 1, "data"), (0.01, 1, 0, 9000, "data")]
        + [(0.02 + 0.01 * i, i % 2, 0, 1000 + 900 * i, "data") for i in range(14)],
        deliver=True,
        inbox_max=14_000,
        take_every_s=0.03,
        ooo_window=8,
        expect_beyond_window=True,
        modelled=RATE,
        loss=0.02,
        ce=0.0,
        jitter_s=2e-3,
        seconds=0.6,
    ),
    "selective-credit-link": dict(
        dcqcn=False,
        loss_recovery=rnic.SELECTIVE,
        qps=[(roce.DSCP_DATA, None), (rnic.DSCP_SECOND_CLASS, None)],
        posts=[
            (0.0, 0, 0, 150_000, "send"),
            (0.0, 0, 1, 60_000, "write"),
            (0.02, 1, 0, 80_000, "send"),
        ],
        credit=CreditSpec(enabled=True, priorities=(3, 4), refresh_symbols=4096),
        rx_buffer=24_000,
        drain=8e6,
        modelled=RATE,
        expect_credit_waits=True,
        loss=0.01,
        ce=0.0,
        jitter_s=2e-3,
        seconds=0.6,
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("seed", [1, 2])
def test_the_c_engine_emits_what_the_python_model_emits(name, seed):
    scenario = SCENARIOS[name]
    py = run("python", scenario, seed)
    c = run("c", scenario, seed)
    assert py == c, first_difference(py, c)
    # The run exercised what it is named for (a scenario that did nothing compares nothing).
    stats = [e[3] for e in py if e[1] == "stats"]
    sent = sum(q["tx_packets"] for s in stats for q in s["send"].values())
    assert sent > 50
    if scenario["loss"]:
        assert sum(q["retransmitted"] for s in stats for q in s["send"].values()) > 0
    if scenario["ce"]:
        assert sum(s["cnps_sent"] for s in stats) > 0
    if scenario.get("pause_every_s"):
        assert sum(s["pause_rx"] for s in stats) > 0 and sum(s["pause_tx"] for s in stats) > 0
    if scenario.get("expect_timeouts"):
        assert sum(q["timeouts"] for s in stats for q in s["send"].values()) > 0
    recv = [q for s in stats for q in s["recv"].values()]
    if scenario["loss_recovery"] == rnic.SELECTIVE:
        assert sum(q["out_of_order"] for q in recv) > 20 and max(
            q["reorder_depth_max"] for q in recv
        ) >= (4 if scenario["jitter_s"] >= 3e-3 else 2)
        assert (
            sum(q["naks_sent"] for q in recv)
            == sum(q["naks"] for s in stats for q in s["send"].values())
            or scenario["loss"]
        )  # a NAK may be lost on the wire too
    if scenario.get("expect_no_naks"):
        assert sum(q["naks_sent"] for q in recv) == 0
        assert sum(q["retransmitted"] for s in stats for q in s["send"].values()) == 0
    elif scenario["loss_recovery"] == rnic.SELECTIVE:
        assert sum(q["naks_sent"] for q in recv) > 0
    if scenario.get("expect_beyond_window"):
        assert sum(q["beyond_window"] for q in recv) > 0
    if scenario.get("deliver"):
        assert [e for e in py if e[1] == "msg"]
        assert sum(q["rnr_naks_sent"] for s in stats for q in s["recv"].values()) > 0
    if scenario.get("credit"):
        lanes = [lane for s in stats for lane in s["credit"].values()]
        assert sum(s["fc_rx"] for s in stats) > 0 and all(lane["fc_tx"] > 0 for lane in lanes)
        if scenario["loss"]:
            assert sum(lane["abr_resyncs"] for lane in lanes) > 0  # a lost frame's credit back
        if scenario["expect_credit_waits"]:
            assert sum(lane["blocked_count"] for lane in lanes) > 0


def test_the_comparison_fails_when_the_engines_transports_differ(monkeypatch):
    # The Python model asks for an ACK every 3rd packet, the C engine every 4th
    # (NIC_ACK_EVERY): one transport difference, and the comparison must see it and
    # name the first frame sent where the two part.
    scenario = SCENARIOS["loss-and-reorder-go-back-n"]
    monkeypatch.setattr(rnic, "ACK_EVERY", 3)
    py = run("python", scenario, 1)
    c = run("c", scenario, 1)
    assert py != c
    first = next(i for i, (x, y) in enumerate(zip(py, c)) if x != y)
    assert py[first][1] == c[first][1] == "tx", (py[first], c[first])
    assert first_difference(py, c).startswith(f"event {first}: python ")


def mutated_frames(seed: int, count: int):
    """Valid frames of every kind the NICs exchange, then truncated, bit-flipped and lied about."""
    rng = random.Random(seed)
    tmpl = roce.DataTemplate(MAC[1], MAC[0], IP[1], IP[0], 49152, dest_qp=100)
    valid = [
        tmpl.frame(roce.SEND_ONLY, 0, 64, ack_req=True),
        tmpl.frame(roce.SEND_FIRST, 0, 1024),
        tmpl.frame(roce.RDMA_WRITE_ONLY, 0, 100, reth=(1, 2, 100)),
        tmpl.frame(roce.SEND_LAST, 1, payload=b"abc", ack_req=True),
        tmpl.ack_frame(0, 1),
        tmpl.nak_frame(0, 0),
        tmpl.ack_frame(0, 0, roce.AETH_RNR_NAK | 3),
        tmpl.cnp_frame(),
        pfc.build(pfc.template(MAC[1]), {3: 100}),
        bytes.fromhex("0180c2000001020000000002880800010064") + bytes(42),  # 802.3x PAUSE
        credit.build(credit.template(MAC[1]), credit.FcPacket(3, 40, 900)),
        credit.build(credit.template(MAC[1]), credit.FcPacket(4, 4000, 100, op=1)),
    ]
    for _ in range(count):
        f = bytearray(rng.choice(valid))
        how = rng.randrange(4)
        if how == 0:
            f = f[: rng.randrange(len(f) + 1)]
        elif how == 1:
            for _ in range(rng.randrange(1, 4)):
                f[rng.randrange(min(len(f), 64))] = rng.randrange(256)
        elif how == 2 and len(f) > 40:
            # IPv4/UDP lengths, BTH flags, AETH; a flow control frame's Op, VL and FCCL
            pos = rng.choice((14, 16, 17, 38, 43, 54, 56))
            f[pos] = rng.randrange(256)
        else:
            f = f + bytes(rng.randrange(64))
        yield bytes(f)


@pytest.mark.parametrize(
    "name", ["loss-and-reorder-go-back-n", "credit-link", "selective-small-window-data"]
)
def test_malformed_frames_change_both_engines_alike_and_never_crash(name):
    scenario = SCENARIOS[name]
    count = int(os.environ.get("EMU_DIFF_NIC_FRAMES", "20000"))
    py, c = make_pair("python", scenario)[0], make_pair("c", scenario)[0]
    py.post_send(100, 50_000, 0.0)
    c.post_send(100, 50_000, 0.0)
    t = 0.0
    for i, frame in enumerate(mutated_frames(7, count)):
        t += 1e-5
        assert py.receive(frame, t) == c.receive(frame, t), f"frame {i}: {frame.hex()}"
        if i % 50 == 0:
            assert py.next_frame(t) == c.next_frame(t), f"after frame {i}"
    assert py.stats(t) == c.stats(t)


def test_a_credit_link_nic_runs_on_the_c_engine(monkeypatch):
    """make_nic: the credit link is C's too (the differential runs above hold it to rnic.py)."""
    monkeypatch.delenv(nicpath.ENV, raising=False)
    cfg = NicConfig(mac=MAC[0], ip=IP[0], rate_bps=RATE, credit=CreditSpec(enabled=True))
    nic = nicpath.make_nic(cfg, 0.0)
    assert isinstance(nic, nicpath.CRnic)
    # Its first pass advertises the receive buffer on lane 3 as credit, as rnic.py's does.
    [fc] = nic.tick(0.0)
    assert fc == rnic.Rnic(cfg, 0.0).tick(0.0)[0]
    decoded = credit.parse(fc)
    assert (decoded.vl, decoded.fctbs) == (3, 0) and decoded.fccl == min(256 * 1024 // 64, 2048)
    monkeypatch.setenv(nicpath.ENV, "python")
    assert isinstance(nicpath.make_nic(cfg, 0.0), rnic.Rnic)
