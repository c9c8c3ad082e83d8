"""How late a normal thread's sleep ends, with the kernel's default timer slack and with 1 µs.

Owns one measurement behind emu/realtime.py's choice. Under the normal
scheduling policy the kernel may end a sleep up to the thread's timer slack
late (50 µs by default) to batch wake-ups; a real-time thread has none. emu's
switches and NIC agents run under SCHED_RR by default (EMU_RT_PRIORITY), and
ask for 1 µs of slack where they run under the normal policy
(EMU_RT_PRIORITY=0, or real-time refused). This sleeps `--rounds` times in
select() for each timeout, first with the slack the process started with,
then with 1 µs (PR_SET_TIMERSLACK), and prints the lateness past the timeout
(median, 90th and 99th percentile, µs). Run it on a quiet machine; it needs
no root.

    .venv/bin/python bench/timer_slack.py [--rounds 2000] [--timeouts-us 133,1000]

Results: docs/fidelity.md ("Timer slack under the normal policy").
"""

from __future__ import annotations

import argparse
import platform
import select
import time

from emu import registry


def lateness_us(timeout_s: float, rounds: int) -> list[float]:
    late = []
    for _ in range(rounds):
        start = time.perf_counter()
        select.select([], [], [], timeout_s)
        late.append((time.perf_counter() - start - timeout_s) * 1e6)
    return sorted(late)


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--timeouts-us", default="133,1000", help="comma-separated sleep lengths")
    args = ap.parse_args()
    timeouts = [float(t) / 1e6 for t in args.timeouts_us.split(",")]
    print(f"machine: {platform.node()} {platform.machine()} kernel {platform.release()}")
    print("slack_ns  timeout_us  median_us  p90_us  p99_us")
    for slack in (registry.timer_slack_ns(), 1000):
        if not registry.set_timer_slack_ns(slack):
            raise SystemExit(f"prctl(PR_SET_TIMERSLACK, {slack}) refused")
        for timeout in timeouts:
            late = lateness_us(timeout, args.rounds)
            print(
                f"{slack:8d}  {timeout * 1e6:10.0f}  {quantile(late, 0.5):9.1f}"
                f"  {quantile(late, 0.9):6.1f}  {quantile(late, 0.99):6.1f}"
            )


if __name__ == "__main__":
    main()
