"""The live view's sampler: asks every switch of the watched fabric for its port state, ~4 Hz.

Owns the one thread that reads a running fabric for the page: which fabric
is watched (a `Fabric` handed in, the fabrics this process opens one after
another during `emu run`, or any live run for `emu web`), one `live`
management call per switch per period (emu/switch/reports.py; a few hundred
bytes of JSON, served between frames by the switch's own loop), and the page
model built from the last two rounds (emu/live/model.py), encoded once per
round whatever the number of browsers.

Cheap by construction: the emulator has two cores and measures its own
fidelity, so the sampler asks nothing while no page has asked for the state
in the last few seconds, and counts its own CPU time (`stats`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import networkx as nx

from emu import fabric as fabric_mod
from emu import mgmt, registry
from emu.live import model
from emu.net import GRAPH_FILE

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.25  # 4 Hz: the page updates at least twice a second
IDLE_AFTER_S = 3.0  # no page asked for this long: stop asking the switches
CALL_TIMEOUT_S = 1.0  # a switch busy for longer is left out of one round


@dataclass(frozen=True)
class Watched:
    """A fabric to sample: its run id, its graph and where its switches' sockets are."""

    run_id: str
    graph: nx.Graph
    sock_dir: str

    def switch_socket(self, switch: str) -> str:
        return os.path.join(self.sock_dir, f"{switch}.sock")


class FabricSource(Protocol):
    def current(self) -> Watched | None:
        """The fabric to sample now, or None while there is none."""


class OneFabric:
    """A `emu.net.Fabric` handed in (a lab runner, `emu cli --web`): watched while it is open."""

    def __init__(self, fab) -> None:
        self.fab = fab

    def current(self) -> Watched | None:
        run = self.fab.run  # None before open() and after close()
        if run is None:
            return None
        return Watched(run.run_id, self.fab.graph, run.sock_dir)


class RegisteredRuns:
    """The newest live run in the registry (emu/registry.py), read from its graph file.

    `owner_pid` limits it to the runs of one process: `emu run --web` follows
    the fabrics its scenario opens, one after another, and nobody else's.
    """

    REREAD_S = 1.0  # the registry is a directory of JSON files: not every round

    def __init__(self, owner_pid: int | None = None, run_id: str | None = None) -> None:
        self.owner_pid = owner_pid
        self.run_id = run_id
        self._graphs: dict[str, nx.Graph] = {}
        self._current: Watched | None = None
        self._read_at = float("-inf")

    def current(self) -> Watched | None:
        now = time.monotonic()
        if now - self._read_at < self.REREAD_S:
            return self._current
        self._read_at = now
        runs = [
            r
            for r in registry.live_runs()
            if (self.owner_pid is None or r.owner_pid == self.owner_pid)
            and (self.run_id is None or r.run_id == self.run_id)
        ]
        self._current = None
        for run in sorted(runs, key=lambda r: r.created, reverse=True):
            graph = self._graph(run)
            if graph is not None:
                self._current = Watched(run.run_id, graph, run.sock_dir)
                break
        return self._current

    def _graph(self, run: registry.Run) -> nx.Graph | None:
        if run.run_id not in self._graphs:
            path = Path(run.sock_dir, GRAPH_FILE)
            try:
                self._graphs[run.run_id] = nx.node_link_graph(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                log.debug("run %s has no readable graph yet: %s", run.run_id, exc)
                return None
        return self._graphs[run.run_id]


class Sampler:
    """Samples the watched fabric on its own thread; `document()` is the latest page model.

    Args:
        source: which fabric to watch (`OneFabric`, `RegisteredRuns`).
        interval_s: the sampling period.
        idle_after_s: stop sampling when no page asked for this long.
        call: the management call (emu.mgmt.call); tests pass a fake.
    """

    def __init__(
        self,
        source: FabricSource,
        interval_s: float = SAMPLE_INTERVAL_S,
        idle_after_s: float = IDLE_AFTER_S,
        call: Callable[..., Any] = mgmt.call,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.idle_after_s = idle_after_s
        self.call = call
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wanted = threading.Event()
        self._asked_at = float("-inf")
        self._watched: Watched | None = None
        self._samples: dict[str, dict] = {}
        self._previous: dict[str, dict] = {}
        self._sampled_at: float | None = None
        self._results: dict | None = None
        self._running = False  # a fabric was there at the last round
        self._document = b""
        self.rounds = 0
        self.cpu_s = 0.0
        self.calls_failed = 0
        self._thread = threading.Thread(target=self._run, name="emu-live-sampler", daemon=True)
        self._rebuild()

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; returns once it ended (a round in flight ends within a call timeout)."""
        self._stop.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def document(self) -> bytes:
        """The latest page model as JSON bytes; asking keeps the sampler going."""
        self._asked_at = time.monotonic()
        self._wanted.set()
        with self._lock:
            return self._document

    def finished(self, results: dict) -> None:
        """The run ended: the page shows `results` (report, plots) under the last picture."""
        with self._lock:
            self._results = results
        self._rebuild()

    def stats(self) -> dict:
        """What sampling cost so far: rounds, the thread's CPU seconds, failed calls."""
        return {"rounds": self.rounds, "cpu_s": round(self.cpu_s, 4), "failed": self.calls_failed}

    # ----- the thread -------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._asked_at > self.idle_after_s:
                self._wanted.clear()
                self._wanted.wait()  # a page asked (document()) or close()
                continue
            started = time.monotonic()
            cpu = time.thread_time()
            try:
                self._round()
            except Exception:  # noqa: BLE001 - the view must outlive any one bad round
                log.exception("live view: a sampling round failed")
            self.cpu_s += time.thread_time() - cpu
            self.rounds += 1
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _round(self) -> None:
        watched = self.source.current()
        samples: dict[str, dict] = {}
        if watched is not None:
            for switch in fabric_mod.switches(watched.graph):
                path = watched.switch_socket(switch)
                if not os.path.exists(path):
                    continue  # not started yet, or crashed on purpose by a fault
                try:
                    samples[switch] = self.call(path, "live", timeout_s=CALL_TIMEOUT_S)
                except mgmt.MgmtError as exc:
                    self.calls_failed += 1
                    log.debug("live view: %s did not answer: %s", switch, exc)
        with self._lock:
            if watched is None:
                # Between a scenario's fabrics, or after the last: keep the last picture.
                pass
            elif self._watched is None or watched.run_id != self._watched.run_id:
                self._watched, self._previous, self._samples = watched, {}, samples
            else:
                self._previous = {**self._previous, **self._samples}
                self._samples = samples
            if watched is not None:
                self._sampled_at = time.time()
            self._running = watched is not None
        self._rebuild()

    def _rebuild(self) -> None:
        with self._lock:
            watched = self._watched
            running = self._running
            if self._results is not None:
                phase = "finished"
                message = f"run finished; results in {self._results.get('dir')}"
            elif running:
                phase = "running"
                missing = (
                    len(fabric_mod.switches(watched.graph)) - len(self._samples) if watched else 0
                )
                message = (
                    f"{missing} switches not answering (starting, or stopped by a fault)"
                    if missing
                    else ""
                )
            else:
                phase = "waiting"
                message = (
                    "waiting for the next fabric" if watched else "waiting for a fabric to start"
                )
            doc = model.page_model(
                watched.graph if watched else None,
                self._samples,
                self._previous,
                phase=phase,
                fabric=(
                    {
                        "run_id": watched.run_id,
                        "name": watched.graph.graph.get("name"),
                        "kind": watched.graph.graph.get("kind"),
                    }
                    if watched
                    else None
                ),
                results=self._results,
                sampled_at=self._sampled_at,
                interval_s=self.interval_s,
                message=message,
            )
            doc["sampler"] = self.stats()
            self._document = json.dumps(doc, separators=(",", ":")).encode()
