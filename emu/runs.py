"""A run's fabrics: the run layer under scenarios and lab checks.

`RunFabrics` opens each fabric a run asks for, in a folder of the run's output
folder named by the fabric's label, and keeps in memory the fidelity document
each fabric collected as it closed (emu/telemetry.py `collect_fidelity`). The
run's verdict (emu.scenario `add_fidelity`, emu.labs `judge_fidelity`) judges
exactly those documents: the fabrics this run opened, however its folder is
laid out and whatever an earlier run left in it. The documents are written
to `LABEL/fidelity.json` too, for people and `emu reproduce`; nothing reads
them back to judge a run.

emu.scenario's `Context` and emu.labs' `LabRun` each hold one (`ctx.fabric`,
`lab.fabric`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from emu import fidelity
from emu.net import Fabric


class RunFabrics:
    """The fabrics of one run, under `out_dir`, and their fidelity documents."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        # (label, fidelity document) of every fabric that closed, in the order they did.
        self.documents: list[tuple[str, dict]] = []
        # (label, Fabric.servers_report()) of every fabric run over several servers.
        self.servers_documents: list[tuple[str, dict]] = []
        self._labels: dict[int, str] = {}  # id(fabric) -> label, while it is up

    def start(self, graph, label: str = "", **options) -> Fabric:
        """A fabric of `graph` (emu.net.Fabric's `options`), up, with its results in
        out_dir/label (out_dir itself for ""); `stop` it. One that fails to come up
        is stopped here (what it built torn down, what it measured kept)."""
        fab = Fabric(graph, out_dir=str(self.out_dir / label if label else self.out_dir), **options)
        self._labels[id(fab)] = label
        try:
            fab.open()
        except BaseException:
            self.stop(fab)
            raise
        return fab

    def stop(self, fab: Fabric) -> None:
        """Close `fab` (a fabric `start` gave) and keep its fidelity document."""
        try:
            fab.close()
        finally:
            label = self._labels.pop(id(fab), "")
            if fab.fidelity_document is not None:
                self.documents.append((label, fab.fidelity_document))
            if getattr(fab, "servers_document", None):  # a fabric over several servers
                self.servers_documents.append((label, fab.servers_document))

    @contextmanager
    def open(self, graph, label: str = "", **options) -> Iterator[Fabric]:
        """`start`, for the with-block, then `stop` however the block ends."""
        fab = self.start(graph, label, **options)
        try:
            yield fab
        finally:
            self.stop(fab)

    def records(self) -> list[tuple[str, dict]]:
        """[(fabric label, process record)] over every fabric that closed."""
        return fidelity.records_of(self.documents)

    def latest_records(self) -> list[tuple[str, dict]]:
        """[(fabric label, process record)] of the fabric that closed last."""
        return fidelity.records_of(self.documents[-1:])
