"""`emu allreduce` as a user runs it: nccl-tests tables on a real fabric, and bad input."""

from __future__ import annotations

import subprocess
import sys

from . import ROOT


def emu_allreduce(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "emu.cli", "allreduce", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout_s,
    )


def rows(text: str) -> list[list[str]]:
    """The data rows of nccl-tests tables: size count type redop root time algbw busbw #wrong."""
    return [
        line.split()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#") and line.split()[0].isdigit()
    ]


def test_both_algorithms_print_correct_tables(tmp_path, no_leaks):
    res = emu_allreduce(
        "--hosts",
        "4",
        "--algo",
        "both",
        "--sizes",
        "4K:64K",
        "--factor",
        "4",
        "--dtype",
        "int32",
        "--out",
        str(tmp_path / "ar"),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "# algo ring" in out and "# algo sharp" in out and "refused" not in out
    table = rows(out)
    # 4K, 16K, 64K for each algorithm; every element right (#wrong is the last column).
    assert [int(r[0]) for r in table] == [4096, 16384, 65536] * 2
    assert all(r[2] == "int32" and r[3] == "sum" and r[-1] == "0" for r in table)
    assert out.count("# Out of bounds values : 0 OK") == 2
    assert "# sharp/ring algbw at 65536 bytes:" in out


def test_bad_sizes_are_named_not_a_traceback():
    res = emu_allreduce("--sizes", "1K:lots")
    assert res.returncode != 0
    assert "--sizes '1K:lots'" in res.stderr and "Traceback" not in res.stderr
    res = emu_allreduce("--hosts", "1")
    assert res.returncode != 0 and "--hosts 1" in res.stderr and "Traceback" not in res.stderr
