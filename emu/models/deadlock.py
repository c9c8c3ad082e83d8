"""PFC deadlock's model: when a paused cycle stays frozen, how fast a deadlock-free ring
must still deliver, and how soon the watchdog must see a stuck queue.

Owns the numbers scenarios/pfc_deadlock.py (and any lab or test of a cyclic
buffer dependency) holds what the switches did to:

- PAUSE that stands: a switch refreshes a PAUSE every half of its pause time
  while the ingress queue stays above XOFF (IEEE 802.1Qbb: one quantum is 512
  bit times; the refresh at half the pause time as in ns3-rdma and
  emu/switch/buffer.py), and lifts it only once the queue falls below XON, two
  frames under XOFF (the hysteresis of emu/config.py `BufferSpec`). A cycle of
  paused queues (Hu et al., "Deadlocks in Datacenter Networks: Why Do They
  Form, and How to Avoid Them", HotNets 2016) is frozen when every ingress on
  it stays paused: above XON, or with frames in its headroom (`stays_paused`).
- The watchdog's bound: SONiC's pfcwd declares a storm once a queue has been
  paused with frames and sent nothing for its detection time; emu's watchdog
  (emu/switch/watchdog.py) runs that time on the fabric's clock and polls, so
  it may need one poll to see the queue send nothing and one to declare it
  (`watchdog_detection_bound_s`).
- A deadlock-free ring's floor: long-lived flows share links max-min fairly
  (emu/models/flow.py; Bertsekas & Gallager, Data Networks, 6.5.2), but PFC
  is not fair (it pauses per ingress port, not per flow), so a flow is held
  only to half its fair share (`fair_share_bps`, `pfc_goodput_floor_bps`).

Pure: numbers and paths in, numbers out (tests/unit/test_models_deadlock.py).
Measuring the cycle on a fabric is emu/traffic/deadlock.py's.
"""

from __future__ import annotations

from emu.config import BufferSpec, WatchdogSpec
from emu.models.flow import max_min_rates
from emu.proto.pfc import MAX_QUANTA, quanta_to_s


def pause_refresh_s(rate_bps: float, quanta: int = MAX_QUANTA) -> float:
    """How often a switch re-sends a standing PAUSE of `quanta` on a `rate_bps` link:
    every half of its pause time (802.1Qbb quanta of 512 bit times; emu/switch/buffer.py).

    Examples:
        >>> pause_refresh_s(10e6)  # 65535 quanta at 10 Mbit/s last 3.36 s
        1.677696
    """
    return quanta_to_s(quanta, rate_bps) / 2


def xon_bytes(xoff_bytes: int, spec: BufferSpec | None = None) -> int:
    """The ingress bytes below which a paused queue is resumed: XOFF less PFC's hysteresis
    (`BufferSpec.resume_offset_bytes`, two frames by default)."""
    return xoff_bytes - (spec or BufferSpec()).resume_offset_bytes


def stays_paused(ingress_bytes: int, headroom_bytes: int, xon: int) -> bool:
    """Whether a paused ingress queue keeps its upstream paused: it holds more than `xon`
    bytes in the shared buffer, or frames admitted past XOFF into its headroom.

    A queue stuck inside the band between XON and XOFF is as full as one at
    XOFF: nothing lifts its PAUSE. Every ingress of a wait-for cycle in this
    state, and the cycle is a deadlock.
    """
    return headroom_bytes > 0 or ingress_bytes > xon


def watchdog_detection_bound_s(time_scale: float, spec: WatchdogSpec | None = None) -> float:
    """The latest a PFC watchdog (emu/switch/watchdog.py) declares a stuck queue after it
    is turned on: the detection time on the fabric's clock (`time_scale`), plus one poll
    to see the queue send nothing and one to declare it. SONiC's defaults when `spec` is
    None (detection 200 ms, poll 100 ms).

    Examples:
        >>> watchdog_detection_bound_s(10.0)  # 200 ms x 10 + 2 x 100 ms
        2.2
    """
    spec = spec or WatchdogSpec()
    return spec.detection_s * time_scale + 2 * spec.poll_s


def fair_share_bps(paths: list[list[tuple]], rate_bps: float) -> list[float]:
    """Each flow's max-min fair rate when every link of `paths` (a flow's links, each a
    hashable such as (node, node)) runs at `rate_bps` (emu/models/flow.py).

    Examples:
        >>> fair_share_bps([[("a", "b")], [("a", "b"), ("b", "c")]], 10e6)
        [5000000.0, 5000000.0]
    """
    return max_min_rates(paths, capacity=rate_bps)


def pfc_goodput_floor_bps(fair_bps: float) -> float:
    """The least a flow of fair share `fair_bps` should get on a lossless, deadlock-free
    fabric: half of it, since PFC pauses an ingress port, not the flow that filled it."""
    return fair_bps / 2
