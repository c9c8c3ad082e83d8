"""emu's switch for Mininet's `mn`: ``sudo mn --custom emu/mininet_custom.py --switch emu ...``.

A custom file, as `mn --custom` reads it (see /usr/bin/mn, `MininetRunner.custom`):
`mn` executes it and takes every name it leaves behind. It leaves two:
`switches`, which adds ``--switch emu`` (`emu.switch.node.EmuSwitch`, the
drop-in switch: rates from the links' `bw`, a run registry made on demand),
and `cleanup`, which replaces `mn`'s Mininet cleanup (called after an
exception, on Ctrl-C and for ``-c``) with one that removes only what emu's
manifests recorded (`emu.switch.node.mn_cleanup`). A third, `validate`,
rejects options the emu switch cannot honour.

`mn` runs under the system's python3, which cannot import emu from its
virtualenv: when emu is not importable, the file runs `mn` again, with the
same arguments, under the virtualenv's python (``$EMU_VENV`` or the checkout's
``.venv``), before `mn` has built anything. Also importable as a module, which
is how tests and `python -m` users reach the same names. See docs/mininet.md.
"""


def _under_emus_python() -> None:
    import importlib.util
    import inspect
    import os
    import sys

    if importlib.util.find_spec("emu") is not None and importlib.util.find_spec("os_ken"):
        return
    # `mn` compiles this file under its own name, so the code object knows where it is.
    here = os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename))
    venv = os.environ.get("EMU_VENV") or os.path.join(os.path.dirname(here), ".venv")
    python = os.path.join(venv, "bin", "python")
    if os.environ.get("EMU_MN_REEXEC") or not os.access(python, os.X_OK):
        sys.stderr.write(
            f"emu: {sys.executable} cannot import emu and {python} is not emu's python; "
            "run scripts/bootstrap, or set EMU_VENV to emu's virtualenv\n"
        )
        raise SystemExit(2)
    os.environ["EMU_MN_REEXEC"] = "1"  # once: a second failure is the error above
    os.execv(python, [python, *sys.argv])


_under_emus_python()

from emu.switch.node import EmuSwitch  # noqa: E402 - after the interpreter check
from emu.switch.node import mn_cleanup as cleanup  # noqa: E402,F401 - mn's `cleanup` global

switches = {"emu": EmuSwitch}


def validate(opts) -> None:
    """`mn`'s hook after option parsing, before anything is built: what the emu
    switch cannot do, said in one line, exit status 2."""
    import sys

    emu = opts.switch.split(",")[0] == "emu"
    for wrong, why in (
        (opts.innamespace, "--innamespace (the switch processes run in the root namespace)"),
        (opts.cluster, "--cluster (use Mininet's cluster edition with emu.net instead)"),
    ):
        if emu and wrong:
            sys.stderr.write(f"emu: --switch emu does not support {why}\n")
            raise SystemExit(2)
