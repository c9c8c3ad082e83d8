"""Builds emu's compiled per-frame paths; everything else is setup.cfg.

emu.switch._fastpath is the switch's data plane (emu/switch/csrc/),
emu.host._nicpath the RDMA NIC's transport (emu/host/csrc/).

`pip install -e .` (scripts/bootstrap) compiles it with the distribution's gcc
and Python headers. EMU_SANITIZE=1 builds it with AddressSanitizer and
UndefinedBehaviorSanitizer for the fuzz run (scripts/sanitize).
"""

import glob
import os

from setuptools import Extension, setup

CFLAGS = [
    "-O2",
    "-std=gnu11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]
LDFLAGS: list = []
if os.environ.get("EMU_SANITIZE") == "1":
    CFLAGS += [
        "-O1",
        "-g",
        "-fsanitize=address,undefined",
        "-fno-omit-frame-pointer",
        "-fno-sanitize-recover=undefined",
    ]
    LDFLAGS += ["-fsanitize=address,undefined"]

setup(
    ext_modules=[
        Extension(
            "emu.switch._fastpath",
            sources=sorted(glob.glob("emu/switch/csrc/*.c")),
            depends=glob.glob("emu/switch/csrc/*.h") + glob.glob("emu/csrc/*.h"),
            include_dirs=["emu/csrc"],
            extra_compile_args=CFLAGS,
            extra_link_args=LDFLAGS,
        ),
        Extension(
            "emu.host._nicpath",
            sources=sorted(glob.glob("emu/host/csrc/*.c")),
            depends=glob.glob("emu/host/csrc/*.h") + glob.glob("emu/csrc/*.h"),
            include_dirs=["emu/csrc"],
            extra_compile_args=CFLAGS,
            extra_link_args=LDFLAGS,
        ),
    ]
)
