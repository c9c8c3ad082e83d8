"""The incast scenario's expected outcome on real RoCEv2 traffic, via `emu run incast`.

8 NIC agents send to one over a 2-spine/3-leaf fabric, three times: PFC off
(drops, go-back-N), PFC (zero drops, full link), PFC + ECN/DCQCN (full link,
fair, little PAUSE, and a bottleneck queue where DCQCN's fluid model puts it).
Every check is asserted by name.
"""

from __future__ import annotations

import subprocess
import sys

from . import ROOT, assert_checks, emu_run

CHECKS = [
    "PFC: zero drops anywhere",
    "PFC: bottleneck utilisation >= 90%",
    "PFC off: frames are dropped",
    "PFC off: go-back-N retransmits",
    "DCQCN: bottleneck utilisation >= 90%",
    "DCQCN: Jain's fairness >= 0.9",
    # The steady-state queue's p50 and p95 against DCQCN's fluid model run with the scenario's
    # own timers and thresholds (scenarios/incast.py, dcqcn_fluid), within one frame per sender.
    "DCQCN: steady-state queue p50 and p95 within one frame per sender of the fluid model's "
    "(Zhu et al., CoNEXT 2016)",
    "DCQCN: PAUSE rare compared with PFC only",
]


def test_incast_lossy_vs_pfc_vs_dcqcn(tmp_path, no_leaks):
    out = tmp_path / "incast"
    res, doc = emu_run(out, "incast")
    assert_checks(res, doc, CHECKS)
    modes = doc["metrics"]["modes"]
    # The story in numbers: PFC trades drops for PAUSE; DCQCN removes most PAUSE.
    assert modes["pfc"]["pfc_frames"] > 0 and modes["lossy"]["pfc_frames"] == 0
    assert modes["dcqcn"]["cnps"] > 0 and modes["pfc"]["cnps"] == 0
    # The model's fixed point lies between Kmin and Kmax (DCQCN's design); with the loop delay
    # of marking at enqueue the queue does not rest there, and the report says which it does.
    model = doc["metrics"]["dcqcn_model"]
    kmin, kmax = modes["dcqcn"]["kmin_kmax"]
    assert kmin < model["fixed_point"]["queue_bytes"] < kmax
    assert (out / "incast.png").stat().st_size > 10_000
    assert (out / "dcqcn" / "telemetry" / "leaf3.csv").stat().st_size > 1000
    pcaps_decode_with_tshark(out)


def tshark(path, *fields, display=""):
    argv = ["tshark", "-r", str(path), "-T", "fields"]
    if display:
        argv += ["-Y", display]
    for f in fields:
        argv += ["-e", f]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines() if line.strip()]


def pcaps_decode_with_tshark(out):
    """Real ports' captures: PFC frames, RoCEv2 BTH with increasing PSNs, CNPs, CE marks."""
    # PFC mode, the first sender's link: leaf1 pauses h1's NIC (XOFF) and releases it (XON).
    pfc = tshark(
        out / "pfc" / "leaf1-eth1.pcap",
        "macc.cbfc.enbv",
        "macc.cbfc.pause_time.c3",
        display="macc.opcode == 0x0101",
    )
    assert pfc and {row[0] for row in pfc} == {"0x0008"}
    assert {"65535", "0"} <= {row[1] for row in pfc}
    # DCQCN mode, the bottleneck link leaf3 -> h9: data, ACKs, CNPs back, CE marks.
    rows = tshark(
        out / "dcqcn" / "leaf3-eth3.pcap",
        "ip.src",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "ip.dsfield.ecn",
        display="infiniband",
    )
    data = [r for r in rows if int(r[1]) in (0, 1, 2, 4)]
    assert any(int(r[1]) == 0x81 for r in rows), "no CNP (opcode 0x81) on the bottleneck link"
    assert any(r[4] == "3" for r in data), "no CE-marked data"
    assert any(r[4] == "2" for r in data), "no ECT(0) data"
    per_qp = {}
    for src, _, qp, psn, _ in data:
        per_qp.setdefault((src, qp), []).append(int(psn))
    assert len(per_qp) == 8
    for key, psns in per_qp.items():
        steps = [b - a for a, b in zip(psns, psns[1:])]
        assert sum(1 for d in steps if d == 1) >= 0.95 * len(steps), f"{key}: PSNs {psns[:20]}"


def test_incast_bad_modes_is_a_clear_error(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "emu.cli",
            "run",
            "incast",
            "--set",
            "modes=pfc,magic",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2 and "modes='pfc,magic'" in res.stderr
    assert "Traceback" not in res.stderr
