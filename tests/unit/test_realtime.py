"""emu/realtime.py: the priority a launcher passes on, and what a process got."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emu import realtime


def test_the_default_priority_is_used_when_the_variable_is_unset_or_empty():
    # The hardware runs first by default; 0 turns it off.
    assert realtime.DEFAULT_PRIORITY == realtime.RECOMMENDED_PRIORITY
    assert realtime.configured_priority({}) == realtime.DEFAULT_PRIORITY
    assert realtime.configured_priority({realtime.ENV: " "}) == realtime.DEFAULT_PRIORITY
    assert realtime.configured_priority({realtime.ENV: "0"}) == 0
    assert realtime.configured_priority({realtime.ENV: "42"}) == 42


@pytest.mark.parametrize("text", ["abc", "1.5", "-1", "100"])
def test_a_bad_priority_is_named(text):
    with pytest.raises(realtime.RealtimeError, match=realtime.ENV):
        realtime.configured_priority({realtime.ENV: text})


def test_priority_0_leaves_the_policy_alone_and_asks_for_fine_timer_slack():
    # In a child: the slack is the thread's, and the test process keeps its own.
    code = (
        "import ctypes; from emu import realtime; print(realtime.apply(0)); "
        "print(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))"  # PR_GET_TIMERSLACK
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    assert out == ["{'policy': 'other', 'timer_slack_ns': 1000}", "1000"]


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_RR needs CAP_SYS_NICE")
def test_a_process_that_asks_runs_under_sched_rr():
    # In a child: the test process itself must not become real-time.
    code = (
        "import os; from emu import realtime; print(realtime.apply(7)); "
        "print(os.sched_getscheduler(0) == os.SCHED_RR, os.sched_getparam(0).sched_priority)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    assert out == ["{'policy': 'rr', 'priority': 7}", "True 7"]


def test_the_report_says_how_each_process_was_scheduled():
    assert realtime.describe({"policy": "rr", "priority": 10}) == "SCHED_RR 10"
    assert realtime.describe({"policy": "other"}) == "normal"
    assert (
        realtime.describe({"policy": "other", "asked": 10, "refused": "Operation not permitted"})
        == "normal (real-time 10 refused: Operation not permitted)"
    )
    assert realtime.describe(None) == "unknown"


def test_a_nic_agent_s_arrays_get_4_kb_pages_only():
    # In a child, as an agent (emu/host/agent.py keep_page_faults_small): numpy
    # advises huge pages from 4 MB, and a 2 MB page's first write stalled the loop.
    code = (
        "import re, numpy as np; from emu import registry; "
        "from emu.host.agent import keep_page_faults_small; "
        "print(registry.huge_pages_disabled()); keep_page_faults_small(); "
        "print(registry.huge_pages_disabled()); a = np.empty(1 << 21); a[:] = 1; "
        "print(sum(map(int, re.findall(r'AnonHugePages:\\s+(\\d+)', open('/proc/self/smaps').read()))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    assert out == ["False", "True", "0"]  # 16 MB written, not one huge page
