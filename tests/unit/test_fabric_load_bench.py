"""bench/fabric_load.py's bookkeeping: a shared process's CPU is counted once."""

from __future__ import annotations

from bench import fabric_load


def _rec(name: str, pid: int, cpu_s: float, frames: int, kind: str = "switch") -> tuple:
    return (
        name,
        {
            "name": name,
            "kind": kind,
            "pid": pid,
            "window_s": 12.0,
            "cpu": {"cpu_s": cpu_s},
            "ports": {"1": {"frames": frames}, "2": {"frames": 1}},
        },
    )


def test_switches_of_one_process_count_its_cpu_once_and_their_frames_each() -> None:
    records = [
        _rec("leaf1", 100, 5.0, 10),
        _rec("spine1", 100, 5.0, 20),  # the same process: the same 5 s
        _rec("leaf2", 200, 3.0, 30),
        _rec("h1", 300, 9.0, 99, kind="nic"),  # not a switch
    ]
    cpu, frames, window = fabric_load.switch_cpu(records)
    assert cpu == 8.0
    assert frames == 10 + 20 + 30 + 3
    assert window == 12.0


def test_the_table_keeps_an_unfaithful_run_apart_from_a_failed_one() -> None:
    ok = fabric_load.LoadRun(
        10.0, 2, boot_s=2.5, goodput_of_links=0.52, faithful=True, idle_share=0.12
    )
    ok.switch_cpu_s, ok.frame_hops = 18.0, 1_000_000
    bad = fabric_load.LoadRun(20.0, 0, boot_s=4.6, goodput_of_links=0.38, worst="e5 port 3 late")
    bad.switch_cpu_s, bad.frame_hops = 27.0, 900_000
    broken = fabric_load.LoadRun(20.0, 0, error="FabricError: switch a1 did not answer")
    text = fabric_load.table([ok, bad, broken], markdown=True)
    assert "| 10 | 2 | 1 | 1 | 0.52 | 18.0 | 18.0 | 2.5 | 12% |  |" in text
    assert (
        "| 20 | one per switch | 2 | 0 | 0.38 | 27.0 | 30.0 | 4.6 | 0% | e5 port 3 late |" in text
    )


def test_scale_counts_a_shared_switch_process_once(monkeypatch) -> None:
    from bench import scale

    monkeypatch.setattr(scale, "memory_kib", lambda pid: {10: (1024, 512), 20: (2048, 1024)}[pid])
    monkeypatch.setattr(scale.fw, "_cpu_s", lambda pid: 0.0)
    row = scale.Row("ft4", "emu", 4, 16)
    # Four switches in process 10, the controller is process 20.
    scale.measure_side(row, [10, 10, 10, 10, 20], [10, 10, 10, 10], 0.0, switches=4)
    assert row.processes == 2
    assert row.rss_mib == 3.0
    assert row.rss_per_switch_mib == 0.2  # 1 MiB shared by four switches
