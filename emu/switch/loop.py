"""The event loop that serves one or several switches in one process.

Owns the selector, the sleep and the wake-up. Each switch (`datapath.Datapath`)
registers its sockets here through a `SwitchSelector`, which tags them with the
switch, and keeps its own timers; the loop services a switch only when its
next deadline has come or one of its sockets is ready, and sleeps until the
earliest deadline of all of them.

Why several switches per process: at the scenarios' link rates a switch
forwards a frame every few hundred microseconds and sleeps in between, and one
sleep and wake-up costs a process 25-33 us of CPU on the 2-core VM
(docs/performance.md, "Wake-ups"), more than forwarding the frame. Switches
that share a loop share its wake-ups: one pass serves every switch whose frame
is due, and a busy loop does not sleep at all.
"""

from __future__ import annotations

import logging
import select
import selectors
import time

log = logging.getLogger(__name__)


class SwitchSelector:
    """One switch's view of the loop's selector: what it registers carries the switch.

    The switch and its OpenFlow channels register `(kind, ref)`; the loop gets
    `(kind, ref, switch)` back from select() and dispatches to that switch.
    """

    def __init__(self, sel: selectors.BaseSelector, owner) -> None:
        self.sel = sel
        self.owner = owner
        self.fileobjs: set = set()

    def register(self, fileobj, events: int, data: tuple):
        self.fileobjs.add(fileobj)
        return self.sel.register(fileobj, events, (*data, self.owner))

    def modify(self, fileobj, events: int, data: tuple):
        return self.sel.modify(fileobj, events, (*data, self.owner))

    def unregister(self, fileobj):
        self.fileobjs.discard(fileobj)
        return self.sel.unregister(fileobj)

    def unregister_all(self) -> None:
        """Forget every socket of this switch (it crashed or stopped)."""
        for fileobj in list(self.fileobjs):
            try:
                self.sel.unregister(fileobj)
            except (KeyError, ValueError):
                pass  # already closed
        self.fileobjs.clear()


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll, woken on time: the sleep is a select(2) on the epoll descriptor alone.

    epoll_wait's timeout is whole milliseconds, so a loop that sleeps until
    the next frame's slot woke up to 1 ms late (1.7 frame times at 20 Mbit/s;
    measured by emu/fidelity.py); select(2) takes microseconds but looks at
    every descriptor on every call, which was a fifth of a loop's CPU with
    ten switches (70 sockets) in it (perf, docs/performance.md). So: select(2)
    on the one epoll descriptor to sleep, then epoll_wait(0) for what is ready.
    """

    def select(self, timeout: float | None = None) -> list:
        if timeout is None or timeout > 0.0:
            readable, _, _ = select.select([self.fileno()], [], [], timeout)
            if not readable:
                return []
        return super().select(0)


class SwitchLoop:
    """Every switch of this process: their sockets, their timers, one sleep.

    One switch alone sleeps in select(2) (a handful of sockets); several
    share a `PreciseEpollSelector` (why: see there).

    A switch offers: `due` (monotonic time of its next timer or frame),
    `early_s` (how early its fastest port may send a frame),
    `service(now)` (run its timers and send what is due; updates `due`),
    `on_ready(kind, ref, events, now)` (returns frames read),
    `tx_due`/`busy` (its next frame), `fidelity.loop` (a LoopMonitor),
    `stopping` (it crashed or was stopped: the loop closes it) and `close()`.
    """

    def __init__(self, shared: bool = False) -> None:
        self.sel = PreciseEpollSelector() if shared else selectors.SelectSelector()
        self.switches: list = []
        self.stopping = False  # set by a signal (emu.registry.stop_on_signals)

    def view(self, owner) -> SwitchSelector:
        return SwitchSelector(self.sel, owner)

    def add(self, switch) -> None:
        self.switches.append(switch)

    def run(self) -> None:
        sel = self.sel
        monotonic = time.monotonic
        thread_time = time.thread_time
        awake_since = monotonic()  # when the loop last came back from select()
        awake_cpu = thread_time()
        work: list = []  # what this pass did (names the longest stall)
        frames_read = 0  # and how many frames it read
        several = len(self.switches) > 1
        switches = self.switches
        while switches and not self.stopping:
            now = monotonic()
            deadline = float("inf")
            if several:
                # Who is served first turns every pass: frames that two switches
                # send at the same moment must not always leave in the same order
                # (a fixed order decides, at every shared queue downstream, whose
                # frame finds the last free slot, an order only this loop imposes).
                switches.append(switches.pop(0))
            for sw in switches:
                # A loop that is awake anyway sends what is due within early_s
                # (emu.fidelity.EARLY_FRAMES), as the scheduler allows.
                if sw.due <= now + sw.early_s:
                    sw.service(now, work)
                if sw.due < deadline:
                    deadline = sw.due
            asleep_at = monotonic()
            worked_cpu = thread_time() - awake_cpu
            timeout = deadline - asleep_at
            ready = sel.select(timeout if timeout > 0.0 else 0.0)
            woke = monotonic()
            awake_cpu = thread_time()
            self._record_pass(
                ready, awake_since, asleep_at, timeout, woke, work, worked_cpu, frames_read
            )
            awake_since = woke
            work = []
            frames_read = 0
            touched = set()  # refresh each switch's deadline once, however many sockets
            for key, events in ready:
                kind, ref, sw = key.data
                if sw.stopping:
                    continue
                frames_read += sw.on_ready(kind, ref, events, monotonic())
                if kind == "mgmt":
                    served = sw.mgmt.take_served()
                    kind = f"mgmt({served})" if served else kind
                work.append(f"{sw.name}:{kind}" if several else kind)
                touched.add(sw)
            for sw in touched:
                sw.refresh_due()
            if any(sw.stopping for sw in self.switches):
                self._drop_stopped()
        for sw in self.switches:
            sw.close()

    def _record_pass(
        self, ready, awake_since, asleep_at, timeout, woke, work, cpu_s, frames
    ) -> None:
        """Tell each switch's loop monitor how long the pass that just ended kept it waiting.

        The stall is the loop's, shared by every switch in it; whether it
        mattered (a frame due, or frames waiting) is each switch's own.
        """
        overslept = woke - asleep_at - (timeout if timeout > 0.0 else 0.0)
        stall = asleep_at - awake_since + (overslept if overslept > 0 else 0.0)
        with_frames = None
        for sw in self.switches:
            monitor = sw.fidelity.loop
            if stall <= monitor.frame_s:
                monitor.passes += 1
                continue
            if with_frames is None:
                with_frames = {key.data[2] for key, _ in ready if key.data[0] == "port"}
            due_at = sw.tx_due if sw.busy else None
            monitor.woke(
                awake_since,
                asleep_at,
                timeout if timeout > 0.0 else 0.0,
                woke,
                due_at,
                sw in with_frames,
                work,
                cpu_s,
                frames,
            )

    def _drop_stopped(self) -> None:
        for sw in [s for s in self.switches if s.stopping]:
            log.warning(
                "%s: stopped; %d switch(es) left in this process", sw.name, len(self.switches) - 1
            )
            sw.close()
            self.switches.remove(sw)
