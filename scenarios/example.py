"""The smallest whole scenario, to copy: RDMA senders into one receiver, against a model.

Fabric: two leaves and a spine; the first `senders` hosts each SEND one message
at once to the last host. Model: the receiver's link is the bottleneck: the last
message completes once it has carried every frame (N x a message's bytes on the
wire at the link rate), plus the first frame's store-and-forward and the ACK's
way back. Checks: the time on the model, nothing lost (PFC holds the senders
back instead). Plot: each sender's completion beside the model.
"""

from __future__ import annotations

import time

from emu import fabric, fidelity
from emu.net import wait_for
from emu.proto import roce
from emu.scenario import Context, Param
from emu.switch.scheduler import PortScheduler
from emu.telemetry import Panel, save_panels
from emu.traffic.rdma import RdmaHosts

DESCRIPTION = "the smallest scenario, to copy: RDMA incast against its bottleneck model"
PARAMS = {
    "rate_mbps": Param(10.0, "every link's rate", min=1.0, max=100.0),
    "senders": Param(3, "RDMA senders (h1..hN; h8 receives)", min=1, max=7),
    "message_bytes": Param(200_000, "size of each sender's SEND", min=1024, max=16 << 20),
}
MTU, HOPS = 1024, 4  # the NICs' payload per frame (rnic.py); h1 -> leaf -> spine -> leaf -> h8
LIMITS = fidelity.Limits()  # what a faithful run keeps: the model's tolerance


def frame_bytes(payload: int, opcode: int = roce.SEND_MIDDLE) -> int:
    """A frame's length on the wire, from emu's own frame builder (emu/proto/roce.py)."""
    tmpl = roce.DataTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, 1)
    return len(
        tmpl.ack_frame(0, 0) if opcode == roce.ACKNOWLEDGE else tmpl.frame(opcode, 0, payload)
    )


def model_s(senders: int, message_bytes: int, rate_bps: float) -> tuple[float, float]:
    """(the bottleneck's busy time, the whole): every frame through the receiver's link,
    then the first frame's store-and-forward over the hops before it and the ACK back."""
    frames = -(-message_bytes // MTU)
    busy = senders * (message_bytes + frames * (frame_bytes(MTU) - MTU)) * 8 / rate_bps
    fill = (HOPS - 1) * frame_bytes(MTU) + HOPS * frame_bytes(0, roce.ACKNOWLEDGE)
    return busy, busy + fill * 8 / rate_bps


def run(ctx: Context) -> None:
    p = ctx.params
    rate = p["rate_mbps"] * 1e6
    g = fabric.leaf_spine(2, 1, 4, host_rate_bps=int(rate), fabric_rate_bps=int(rate))
    hosts = fabric.hosts(g)
    senders, receiver = hosts[: p["senders"]], hosts[-1]
    qos = {"ecn": {"enabled": False}}  # PFC alone: the lossless class, no DCQCN
    with ctx.fabric(g, qos=qos) as fab:
        nics = RdmaHosts(fab, senders + [receiver], dcqcn=False)
        qps = {s: nics.connect(s, receiver) for s in senders}
        posted, t0 = {}, time.monotonic()
        for s in senders:
            posted[s] = time.monotonic()
            nics.post(s, qps[s], p["message_bytes"])
        posting_s = time.monotonic() - t0  # the posts' own spread: the model's third term
        done: dict[str, float] = {}

        def all_done() -> bool:
            for s in senders:
                for c in nics.poll_completions(s, qps[s]):
                    done[s] = posted[s] - t0 + c["latency_s"]
            return len(done) == len(senders)

        wait_for(all_done, 120, "every SEND to complete", logs=fab.log_dir())
        counters = [fab.counters(sw) for sw in fabric.switches(g)]
    busy, model = model_s(len(senders), p["message_bytes"], rate)
    # A port may run ahead of its clock by its burst after idle (rate x T + burst over
    # any T, emu/switch/scheduler.py), and fall behind by a faithful run's limits.
    low = busy - PortScheduler(rate_bps=rate).burst_s - posting_s
    late_s = HOPS * LIMITS.on_time_frames * frame_bytes(MTU) * 8 / rate
    high = model * (1 + LIMITS.max_deficit_share) + late_s + posting_s
    last = max(done.values())
    ctx.metrics.update(completion_s=done, model_s=model, posting_s=posting_s)
    ctx.check(
        "the last SEND completes when the receiver's link has carried every frame",
        low <= last <= high,
        f"{last:.4f} s",
        f"{low:.4f}..{high:.4f} s (model {model:.4f} s; a port's burst, a faithful "
        "emulator's lost link time and lateness per hop, emu/fidelity.py; the posts' spread)",
    )
    drops = sum(sum(c.buffer.drops.values()) for c in counters)
    pauses = sum(sum(c.pfc.pfc_tx_frames.values()) for c in counters)
    ctx.check(
        "lossless: PFC pauses the senders, no frame dropped",
        drops == 0 and (pauses > 0 or len(senders) == 1),
        f"{drops} drops, {pauses} PAUSE frames",
        "0 drops, > 0 PAUSE frames (with more than one sender)",
    )
    panel = Panel("SEND completion", "", "s since the first post", bars=done, hline=model)
    ctx.plots.append(save_panels(ctx.out_dir / "example.png", [panel], title="example").name)
