"""What one wake-up of an event loop costs on this machine, in CPU time.

Every emu switch and NIC agent is a process that sleeps in select() until
its next frame is due or a frame arrives. On a VM a wake-up can cost more CPU
than forwarding the frame it was for (timer programming, halt and resume of
the virtual CPU, an inter-processor interrupt for a cross-CPU wake-up), and
that CPU is what a fabric runs out of. This bench measures, with getrusage:

- a timed sleep: select() with no descriptors and a timeout (one frame time
  at 10 Mbit/s, 1.2 ms; and 0.1 ms), CPU per sleep;
- a cross-process wake-up: two processes ping-pong one datagram over a Unix
  socketpair, each blocked in select(); CPU per round trip of one side, and
  the round trip's wall time: where the scheduler puts them, both pinned to
  one CPU, and pinned to two. Waking a process on another CPU that is idle
  costs an inter-processor interrupt and that CPU's way out of its idle
  state; on a VM both are exits to the hypervisor;
- for scale: one non-blocking SelectSelector.select(0) over 10 sockets, and
  one time.thread_time() call.

    .venv/bin/python bench/wakeup.py [--rounds 20000] [--idle-poll]

`--idle-poll` holds the CPUs' PM QoS latency at 0 while it measures
(/dev/cpu_dma_latency, as cyclictest does; root): an idle CPU then polls
instead of halting, which shows what the idle state costs a wake-up.

Results and how emu uses them: docs/performance.md ("Wake-ups").
"""

from __future__ import annotations

import argparse
import errno
import os
import platform
import resource
import select
import selectors
import socket
import sys
import time


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed_sleep(timeout_s: float, rounds: int) -> tuple[float, float]:
    """(CPU, wall) per select() sleep of `timeout_s`."""
    c0, t0 = cpu_s(), time.monotonic()
    for _ in range(rounds):
        select.select([], [], [], timeout_s)
    return (cpu_s() - c0) / rounds, (time.monotonic() - t0) / rounds


def ping_pong(rounds: int, cpus: tuple[int, int] | None = None) -> tuple[float, float]:
    """(CPU of one side, wall) per round trip between two processes (pinned to `cpus`).

    Raises:
        RuntimeError: the other side stopped answering (it could not be pinned, say).
    """
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    mine = os.sched_getaffinity(0)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if cpus is not None:
                os.sched_setaffinity(0, {cpus[1]})
            for _ in range(rounds):
                if not select.select([b], [], [], 5)[0]:
                    break
                b.recv(64)
                b.send(b"x")
            else:
                code = 0
        finally:
            os._exit(code)
    try:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[0]})
        c0, t0 = cpu_s(), time.monotonic()
        for _ in range(rounds):
            a.send(b"x")
            if not select.select([a], [], [], 5)[0]:
                raise RuntimeError(f"ping-pong on CPUs {cpus}: the other side stopped answering")
            a.recv(64)
        wall = time.monotonic() - t0
        cpu = cpu_s() - c0
    finally:
        os.sched_setaffinity(0, mine)
        a.close()  # a child still waiting sees its select() end and exits
        b.close()
        os.waitpid(pid, 0)
    return cpu / rounds, wall / rounds


def select_zero(rounds: int) -> float:
    sel = selectors.SelectSelector()
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    c0 = cpu_s()
    for _ in range(rounds):
        sel.select(0)
    cpu = (cpu_s() - c0) / rounds
    for s in socks:
        s.close()
    return cpu


def thread_time_call(rounds: int) -> float:
    c0 = cpu_s()
    for _ in range(rounds):
        time.thread_time()
    return (cpu_s() - c0) / rounds


PM_QOS_DEVICE = "/dev/cpu_dma_latency"


def hold_idle_poll() -> int:
    """Ask for a CPU wake-up latency of 0 (PM QoS) until the descriptor closes; the descriptor."""
    fd = os.open(PM_QOS_DEVICE, os.O_WRONLY)
    try:
        os.write(fd, (0).to_bytes(4, sys.byteorder))
    except OSError:
        os.close(fd)
        raise
    return fd


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=20000, help="round trips and calls to time")
    p.add_argument(
        "--idle-poll",
        action="store_true",
        help=f"hold PM QoS at 0 ({PM_QOS_DEVICE}) while measuring: idle CPUs poll",
    )
    args = p.parse_args(argv)
    if args.rounds < 100:
        p.error(f"--rounds {args.rounds}: at least 100")
    held = None
    if args.idle_poll:
        try:
            held = hold_idle_poll()
        except OSError as exc:
            root = " (it needs root)" if exc.errno in (errno.EACCES, errno.EPERM) else ""
            p.error(f"--idle-poll: {PM_QOS_DEVICE}: {exc.strerror}{root}")
    try:
        report(args.rounds, held is not None)
    finally:
        if held is not None:
            os.close(held)  # the kernel drops the request with its descriptor
    return 0


def report(rounds: int, idle_poll: bool) -> None:
    """Measure and print the table."""
    sleeps = max(100, rounds // 10)
    idle = "idle CPUs poll (PM QoS 0)" if idle_poll else "idle CPUs as the kernel chooses"
    print(
        f"# {platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
        f"Python {platform.python_version()}; {idle}"
    )
    print(f"{'what':42} {'CPU us':>8} {'wall us':>8}")
    for timeout in (0.0012, 0.0001):
        cpu, wall = timed_sleep(timeout, sleeps)
        print(f"{f'select() sleep of {timeout * 1e3:g} ms':42} {cpu * 1e6:8.1f} {wall * 1e6:8.0f}")
    cpu, wall = ping_pong(rounds)
    print(f"{'cross-process wake-up (ping-pong, one side)':42} {cpu * 1e6:8.1f} {wall * 1e6:8.0f}")
    allowed = sorted(os.sched_getaffinity(0))
    pairs = [("  both on one CPU", (allowed[0], allowed[0]))]
    if len(allowed) > 1:
        pairs.append(("  on two CPUs", (allowed[0], allowed[1])))
    for what, cpus in pairs:
        cpu, wall = ping_pong(rounds, cpus)
        print(f"{what:42} {cpu * 1e6:8.1f} {wall * 1e6:8.0f}")
    print(f"{'SelectSelector.select(0), 10 sockets':42} {select_zero(rounds) * 1e6:8.1f}")
    print(f"{'time.thread_time()':42} {thread_time_call(rounds) * 1e6:8.2f}")


if __name__ == "__main__":
    sys.exit(main())
