"""How the emulator's own processes are scheduled: the hardware runs first.

Owns the scheduling policy of the processes that stand for hardware, the
switches (`emu/switch/datapath.py`) and the NIC agents (`emu/host/agent.py`).
They run under SCHED_RR at a low real-time priority, so a frame that is due
is sent when it is due even while the hosts' applications (iperf, ping, the
collective driver), the controller and pytest use every CPU. In a real fabric
the switches' ASICs and the NICs never wait for a host's CPU; under the
default policy they did. Measured on the 2-core VM (`emu run smoke --set
topology=fat_tree --set k=4`, 20 switch processes): 98.0-98.4% of frames
within one frame time of their slot under SCHED_OTHER (2 runs at ab1c1c0),
99.92-99.96% under SCHED_RR (2 runs), see docs/results.md.

Why SCHED_RR and not FIFO: among themselves the emulator's processes still
take turns (100 ms quanta) if one of them is busy for long. Why a low
priority (10): kernel threads that serve interrupts run at 50, and RT
throttling (`kernel.sched_rt_runtime_us`, 95% by default) still leaves the
rest of the machine a share if a loop ever spins.

The priority comes from `EMU_RT_PRIORITY` (1..99, default 10; 0 leaves the
normal policy). It was opt-in for a while: with it on, CI saw link-flap's "no
flow stuck" fail in 2 of 2 full runs (a TCP flow with 91-146 retransmissions
and no progress for 3 s in a faithful run). After early departure
(emu.fidelity.EARLY_FRAMES) lowered the NICs' and switches' CPU, a
reproduction of every scenario with it on passed link-flap in 3 of 3, and the
one full CI run with it as the default (c11e18f) failed only
ecmp-vs-adaptive's old ECMP-against-model check, which hash luck failed
under either policy (the check now uses the paths the hash chose; README).
Where the kernel refuses (no CAP_SYS_NICE, or a cgroup without a real-time
budget) a process runs as before and says so in its fidelity record, so a
report shows it.

Under the normal policy (`EMU_RT_PRIORITY=0`, or refused) the kernel lets a
sleep end up to the thread's timer slack late, 50 µs by default, so that it
can batch wake-ups; a real-time thread has none. A 1500-byte frame at 90
Mbit/s lasts 133 µs, so such a process asks for 1 µs of slack
(PR_SET_TIMERSLACK): the median lateness of a 133 µs sleep fell from 57-60
µs to 14-15 µs on the 2-core VM (`bench/timer_slack.py`; docs/fidelity.md,
"Timer slack under the normal policy").
"""

from __future__ import annotations

import os

from emu import registry

RECOMMENDED_PRIORITY = 10  # what EMU_RT_PRIORITY=10 asks for; measured below
DEFAULT_PRIORITY = RECOMMENDED_PRIORITY
ENV = "EMU_RT_PRIORITY"


class RealtimeError(ValueError):
    """A bad `EMU_RT_PRIORITY`."""


def configured_priority(environ=None) -> int:
    """The priority the launcher passes to switches and NIC agents (0: normal policy)."""
    text = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not text:
        return DEFAULT_PRIORITY
    try:
        prio = int(text)
    except ValueError:
        raise RealtimeError(
            f"{ENV}={text!r}: must be an integer 0..99 (0: normal scheduling)"
        ) from None
    if not 0 <= prio <= 99:
        raise RealtimeError(f"{ENV}={prio}: must be 0..99 (0: normal scheduling)")
    return prio


def apply(priority: int) -> dict:
    """Put this process under SCHED_RR at `priority` (0: leave it); returns what it got.

    The result goes into the process's fidelity record: {"policy": "rr",
    "priority": 10}, or {"policy": "other", "asked": 10, "refused": "..."}.
    """
    if priority <= 0:
        return {"policy": "other", **_fine_timer_slack()}
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(priority))
    except OSError as exc:
        refused = {"policy": "other", "asked": priority, "refused": exc.strerror or str(exc)}
        return {**refused, **_fine_timer_slack()}
    return {"policy": "rr", "priority": priority}


FINE_TIMER_SLACK_NS = 1000


def _fine_timer_slack() -> dict:
    """Ask that this thread's sleeps end within 1 µs of when they are due (normal policy
    only: a real-time thread has no slack). Returns {"timer_slack_ns": N}, or {} where
    the kernel refused."""
    if not registry.set_timer_slack_ns(FINE_TIMER_SLACK_NS):
        return {}
    return {"timer_slack_ns": FINE_TIMER_SLACK_NS}


def normal_for_this_thread() -> None:
    """A worker thread of a real-time process: back to SCHED_OTHER (it inherited RR).

    On Linux, pid 0 names the calling thread, so only this thread changes.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        pass  # already normal, or not allowed to change: nothing to undo


def describe(sched: dict | None) -> str:
    """'SCHED_RR 10' / 'normal (real-time refused: Operation not permitted)'."""
    if not sched:
        return "unknown"
    if sched.get("policy") == "rr":
        return f"SCHED_RR {sched['priority']}"
    if "refused" in sched:
        return f"normal (real-time {sched['asked']} refused: {sched['refused']})"
    return "normal"
