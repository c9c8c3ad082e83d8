"""Training jobs: a parallel training job written down as YAML, and where its ranks sit.

Owns the job file format (its JSON schema is `emu/data/job.schema.json`;
examples in jobs/), reading a file into a `Job` with errors that name the
file, the line and the field in one line (`JobFileError`, read as topology
files are: emu/yamlfile.py), and the placement of a job's ranks on a
rail-optimized fabric (`place`). What the job runs, step by step, is
emu/schedule.py's; running it on packets is emu/traffic/training.py's.

A file::

    # yaml-language-server: $schema=../emu/data/job.schema.json
    name: dense-dp2-tp2-pp2
    parallel: {dp: 2, tp: 2, pp: 2}
    placement: rail
    steps: 2
    micro_batches: 2
    layers: 2
    compute: {forward: 20ms, backward: 40ms}
    messages: {tp: 16K, pp: 32K, dp: 128K}

The ranks are numbered as Megatron-LM numbers them, tensor-parallel rank
fastest, then data-parallel, then the pipeline stage:
``rank = (stage x dp + d) x tp + t``. A tensor-parallel group is tp GPUs of
one node (its all-reduces cross the node's NVSwitch); the GPUs of a node
give G / tp such groups ("slots"). `place` gives the (stage, d) pairs slots
so that the data-parallel peers of a stage are on different nodes at the
same slot: with placement "rail" tensor-parallel rank t of every peer is the
same GPU of its node, so on the same rail, and its gradients' ring stays on
that rail's leaf; with "crossing" peer d's GPUs are turned by d within its
node (GPU (t + d) mod G), so each hop of the ring changes rail and crosses
a spine (the rail-optimized scenario's "crossing ring", at job scale).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx

from emu import fabric as fabric_mod
from emu.config import ConfigError
from emu.yamlfile import FileError, Marks, field_name, parse, schema_error, show

SCHEMA_FILE = "job.schema.json"
# Where an example in jobs/ finds the schema relative to itself, for editors.
SCHEMA_REF = "../emu/data/job.schema.json"
# The examples that ship with emu, by name (jobs/NAME.yaml).
JOBS_DIR = Path(__file__).resolve().parent.parent / "jobs"
PLACEMENTS = ("rail", "crossing")
DP_ALGORITHMS = ("ring", "sharp")
# The collectives' elements: float32, as the rail and straggler scenarios run them.
ITEMSIZE = 4
# A collective's bytes per GPU and a compute time: far beyond what an emulated link
# moves in a run (1 GiB is over an hour at 2 Mbit/s), and bounds for a file's typos.
MAX_BYTES = 1 << 30
MAX_TIME_S = 3600.0

_SIZE_RE = re.compile(r"^([0-9]+)([KMG]?)$")
_SIZE_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_TIME_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:[eE]-?[0-9]+)?)(ns|us|ms|s)$")
_TIME_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class JobFileError(FileError):
    """A job file that cannot be read, in one line (``job.yaml:7: parallel.ep: ...``)."""


class PlacementError(ConfigError):
    """A job that does not fit the fabric it is placed on; the message says why."""


@dataclass(frozen=True)
class Job:
    """A parallel training job (the file's fields, read and checked).

    Times are seconds in the fabric's time, sizes bytes per GPU; a size of 0
    means that collective is not run. `moe_every` 0: no MoE layers.
    """

    name: str
    dp: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    placement: str = "rail"
    steps: int = 2
    micro_batches: int = 1
    layers: int = 1
    forward_s: float = 0.0
    backward_s: float = 0.0
    tp_bytes: int = 0
    pp_bytes: int = 0
    dp_bytes: int = 0
    ep_bytes: int = 0
    moe_every: int = 0
    dp_algorithm: str = "ring"
    overlap: bool = False
    description: str = ""

    @property
    def gpus(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    @property
    def layers_per_stage(self) -> int:
        return self.layers // self.pp

    def rank(self, stage: int, d: int, t: int) -> int:
        """The rank of tensor-parallel rank `t` of data-parallel peer `d` in `stage`."""
        return (stage * self.dp + d) * self.tp + t

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(stage, d, t) of `rank` (`rank`'s inverse)."""
        t = rank % self.tp
        d = (rank // self.tp) % self.dp
        return rank // (self.tp * self.dp), d, t

    def is_moe(self, layer: int) -> bool:
        """Whether global layer `layer` (0-based) is an MoE layer: every moe_every-th."""
        return bool(self.moe_every) and self.ep > 1 and (layer + 1) % self.moe_every == 0

    def with_(self, **changes: Any) -> Job:
        """The same job with `changes` (a what-if: placement, dp_algorithm, overlap)."""
        return replace(self, **changes)


# ---------------------------------------------------------------- reading


def schema() -> dict[str, Any]:
    """The JSON schema of a job file (draft-07), as shipped in emu/data/."""
    return json.loads(resources.files("emu").joinpath("data", SCHEMA_FILE).read_text())


def schema_path() -> Path:
    """The schema file as installed (for an editor's ``$schema=`` line)."""
    return Path(str(resources.files("emu").joinpath("data", SCHEMA_FILE)))


def loads(text: str, filename: str = "<string>") -> Job:
    """Read a job from YAML text; `filename` is what errors name.

    Raises:
        JobFileError: the first thing wrong, in one line (FILE:LINE: FIELD: problem).
    """
    doc, marks = parse(text, filename, JobFileError, "name, parallel, compute and messages")
    error = schema_error(doc, marks, filename, schema(), JobFileError)
    if error:
        raise error
    return _read(doc, marks, filename)


def load(path: str | Path) -> Job:
    """Read the job file at `path`, or the example of that name in jobs/ (`examples`).

    Raises:
        JobFileError: the file cannot be read, or the first thing wrong in it.
    """
    path = Path(path)
    if not path.exists() and path.suffix == "" and (JOBS_DIR / f"{path}.yaml").exists():
        path = JOBS_DIR / f"{path}.yaml"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise JobFileError(str(path), None, "", f"cannot read: {exc}") from None
    return loads(text, str(path))


def examples() -> list[str]:
    """The names of the example jobs in jobs/ (each loads by name)."""
    return sorted(p.stem for p in JOBS_DIR.glob("*.yaml"))


def parse_size(value: int | str) -> int:
    """Bytes from 64K / 1M / 4096 (binary suffixes), 0..MAX_BYTES; ValueError otherwise."""
    match = _SIZE_RE.match(str(value).strip()) if not isinstance(value, float) else None
    if not match:
        raise ValueError(value)
    size = int(match.group(1)) * _SIZE_SUFFIX[match.group(2)]
    if size > MAX_BYTES:
        raise ValueError(value)
    return size


def parse_time(value: int | float | str) -> float:
    """Seconds from 2ms / 500us / 0.01s or a number of seconds, 0..MAX_TIME_S; ValueError otherwise."""
    if isinstance(value, str):
        match = _TIME_RE.match(value.strip())
        if not match:
            raise ValueError(value)
        seconds = round(float(match.group(1)) * _TIME_UNIT[match.group(2)], 12)
    else:
        seconds = float(value)
    if not 0 <= seconds <= MAX_TIME_S:  # also NaN and infinity
        raise ValueError(value)
    return seconds


def _read(doc: dict, marks: Marks, filename: str) -> Job:
    """The schema-valid `doc` as a Job, after the checks a schema cannot say."""

    def fail(path: tuple, problem: str) -> JobFileError:
        return JobFileError(filename, marks.value_line(path), field_name(path), problem)

    par = doc["parallel"]
    dp, tp, pp, ep = par["dp"], par.get("tp", 1), par.get("pp", 1), par.get("ep", 1)
    if dp % ep:
        raise fail(("parallel", "ep"), f"{ep} does not divide dp={dp}")
    layers = doc.get("layers", pp)
    if layers % pp:
        raise fail(("layers",), f"{layers} layers do not split evenly over pp={pp} stages")
    times, sizes = {}, {}
    for key in ("forward", "backward"):
        try:
            times[key] = parse_time(doc["compute"][key])
        except ValueError:
            raise fail(
                ("compute", key), f"{show(doc['compute'][key])}: a time in 0..{MAX_TIME_S:g} s"
            ) from None
    for key, value in doc["messages"].items():
        try:
            sizes[key] = parse_size(value)
        except ValueError:
            raise fail(("messages", key), f"{show(value)}: a size in 0..1G bytes") from None
    overlap = doc.get("overlap", False)
    # Each collective's share of a GPU's bytes must be whole float32 elements.
    parts = {"tp": 1, "pp": 1, "dp": layers // pp if overlap else 1, "ep": 1}
    for key, size in sizes.items():
        if size % (ITEMSIZE * parts[key]):
            what = f" ({parts[key]} layers' buckets)" if parts[key] > 1 else ""
            raise fail(
                ("messages", key),
                f"{show(doc['messages'][key])} = {size} B: not whole {ITEMSIZE}-byte "
                f"elements{what}",
            )
    if not any(times.values()) and not any(sizes.values()):
        raise fail(("compute",), "the step neither computes nor communicates: nothing to run")
    moe_every = doc.get("moe", {}).get("every", 0)
    if moe_every > layers:
        raise fail(("moe", "every"), f"{moe_every} is more than the job's {layers} layers")
    if sizes.get("ep", 0) and (ep == 1 or not moe_every):
        raise fail(("messages", "ep"), "all-to-all bytes need parallel.ep > 1 and moe.every")
    return Job(
        name=doc["name"],
        description=doc.get("description", ""),
        dp=dp,
        tp=tp,
        pp=pp,
        ep=ep,
        placement=doc.get("placement", "rail"),
        steps=doc.get("steps", 2),
        micro_batches=doc.get("micro_batches", 1),
        layers=layers,
        forward_s=times["forward"],
        backward_s=times["backward"],
        tp_bytes=sizes.get("tp", 0),
        pp_bytes=sizes.get("pp", 0),
        dp_bytes=sizes.get("dp", 0),
        ep_bytes=sizes.get("ep", 0),
        moe_every=moe_every,
        dp_algorithm=doc.get("dp_algorithm", "ring"),
        overlap=overlap,
    )


# ---------------------------------------------------------------- placement


def place(job: Job, graph: nx.Graph) -> dict[int, str]:
    """Each rank's GPU (its host name) on the rail-optimized fabric `graph`.

    See the module docstring: tensor-parallel groups in one node's slots,
    the data-parallel peers of a stage on different nodes at the same slot,
    their GPUs turned by their peer index when `job.placement` is
    "crossing". A job that uses fewer GPUs than the fabric has leaves the
    rest idle.

    Raises:
        PlacementError: `graph` has no NVLink domains, tp does not divide
            its GPUs per node, the job needs more nodes than it has, or a
            crossing placement on one-GPU nodes.

    Examples:
        >>> g = fabric_mod.rail_optimized(nodes=2, gpus_per_node=2, spines=1)
        >>> place(Job("j", dp=2), g), place(Job("j", dp=2, placement="crossing"), g)
        ({0: 'h1', 1: 'h3'}, {0: 'h1', 1: 'h4'})
    """
    domains = (
        fabric_mod.nvlink_domains(graph) if graph.graph.get("kind") == "rail_optimized" else {}
    )
    if not domains:
        raise PlacementError(
            f"{graph.graph.get('name', 'the fabric')} has no NVLink domains: a training "
            "job runs on a rail_optimized fabric"
        )
    nodes = sorted(domains)
    gpus = len(domains[nodes[0]])
    if gpus % job.tp:
        raise PlacementError(
            f"tp={job.tp} does not divide the fabric's {gpus} GPUs per node "
            "(a tensor-parallel group is inside one node)"
        )
    slots = gpus // job.tp
    blocks = -(-job.pp // slots)  # the stages' rounds of slots, dp nodes each
    if job.dp * blocks > len(nodes):
        raise PlacementError(
            f"{job.gpus} GPUs (dp={job.dp} x tp={job.tp} x pp={job.pp}) need "
            f"{job.dp * blocks} nodes of {gpus} GPUs; the fabric has {len(nodes)}"
        )
    if job.placement == "crossing" and gpus < 2:
        raise PlacementError("placement=crossing needs at least 2 GPUs per node (rails to cross)")
    out = {}
    for stage in range(job.pp):
        block, slot = divmod(stage, slots)
        for d in range(job.dp):
            node = nodes[block * job.dp + d]
            turn = d if job.placement == "crossing" else 0
            for t in range(job.tp):
                out[job.rank(stage, d, t)] = domains[node][(slot * job.tp + t + turn) % gpus]
    return out


def place_trace(schedule, graph: nx.Graph) -> None:
    """A trace's rank r on the rail-optimized fabric's r-th GPU in node order (its `hosts`).

    Raises:
        PlacementError: the trace has more ranks than the fabric has GPUs.
    """
    domains = fabric_mod.nvlink_domains(graph)
    gpus = [h for k in sorted(domains) for h in domains[k]]
    if schedule.ranks > len(gpus):
        raise PlacementError(f"{schedule.ranks} ranks, the fabric has {len(gpus)} GPUs")
    schedule.hosts = dict(enumerate(gpus))
