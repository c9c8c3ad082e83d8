"""Job files (emu/job.py): read as topology files are, one line per error; ranks placed on rails."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from emu import fabric, job
from emu.job import Job, JobFileError, PlacementError

GOOD = """\
name: j
parallel: {dp: 2, tp: 2, pp: 2}
layers: 4
micro_batches: 2
compute: {forward: 20ms, backward: 0.04}
messages: {tp: 16K, pp: 32K, dp: 128K}
"""


def test_a_good_file_reads_into_a_job():
    j = job.loads(GOOD)
    assert (j.dp, j.tp, j.pp, j.ep, j.layers, j.micro_batches) == (2, 2, 2, 1, 4, 2)
    assert (j.forward_s, j.backward_s) == (0.02, 0.04)
    assert (j.tp_bytes, j.pp_bytes, j.dp_bytes, j.ep_bytes) == (16384, 32768, 131072, 0)
    assert (j.placement, j.steps, j.dp_algorithm, j.overlap) == ("rail", 2, "ring", False)
    assert j.gpus == 8 and j.layers_per_stage == 2


@pytest.mark.parametrize("name", job.examples())
def test_every_example_loads_by_name_and_passes_the_schema(name):
    path = job.JOBS_DIR / f"{name}.yaml"
    first = path.read_text().splitlines()[0]
    assert first == f"# yaml-language-server: $schema={job.SCHEMA_REF}"
    jsonschema.Draft7Validator(job.schema()).validate(yaml.safe_load(path.read_text()))
    assert job.load(name) == job.load(path)


def test_the_schema_is_a_valid_draft_7_schema():
    jsonschema.Draft7Validator.check_schema(job.schema())
    assert json.loads(job.schema_path().read_text()) == job.schema()


@pytest.mark.parametrize(
    "change, where",
    [
        (
            ("parallel: {dp: 2, tp: 2, pp: 2}", "parallel: {dp: 2, tp: 2, pp: 2, ep: 3}"),
            "j.yaml:2: parallel.ep: 3 does not divide dp=2",
        ),
        (("layers: 4", "layers: 3"), "j.yaml:3: layers: 3 layers do not split evenly over pp=2"),
        (("tp: 16K", "tp: 16Q"), "j.yaml:6: messages.tp: '16Q' is not a size"),
        (("tp: 16K", "tp: 6"), "j.yaml:6: messages.tp: 6 = 6 B: not whole 4-byte elements"),
        (("forward: 20ms", "forward: soon"), "j.yaml:5: compute.forward: 'soon' is not a time"),
        (("micro_batches: 2", "micro_batches: 0"), "j.yaml:4: micro_batches: 0: must be"),
        (("layers: 4", "layers: 4\nlayer: 4"), "j.yaml:4: layer: unknown field; allowed:"),
        (("name: j\n", ""), "j.yaml:1: name: missing field"),
        (("dp: 2, tp", "dp: 2, dp: 3, tp"), "duplicate key"),
        (
            ("messages: {tp: 16K, pp: 32K, dp: 128K}", "messages: {ep: 16K}"),
            "messages.ep: all-to-all bytes need parallel.ep > 1 and moe.every",
        ),
        (
            ("layers: 4", "layers: 4\nplacement: diagonal"),
            "placement: 'diagonal' is not one of rail",
        ),
        (("dp: 2, tp", "dp: 2.0, tp"), "j.yaml:2: parallel.dp: 2.0: must be an integer in 1..64"),
        (("backward: 0.04", "backward: .inf"), "compute.backward: Infinity: a time in 0..3600 s"),
        (("dp: 128K", "dp: 4000G"), "messages.dp: '4000G': a size in 0..1G bytes"),
        (("layers: 4", "layers: 4\noverlap: true\n"), None),
    ],
)
def test_a_bad_file_is_one_line_naming_the_line_and_field(change, where):
    text = GOOD.replace(*change)
    if where is None:  # overlap: the dp bytes split into 2 layers' whole elements: fine
        assert job.loads(text, "j.yaml").overlap
        return
    with pytest.raises(JobFileError) as caught:
        job.loads(text, "j.yaml")
    assert where in str(caught.value)
    assert "\n" not in str(caught.value)


def test_overlap_needs_each_layers_bucket_in_whole_elements():
    text = GOOD.replace("dp: 128K", "dp: 12").replace("layers: 4", "layers: 4\noverlap: true")
    with pytest.raises(
        JobFileError, match=r"messages.dp: 12 = 12 B: not whole 4-byte elements \(2 layers"
    ):
        job.loads(text, "j.yaml")


def test_an_empty_or_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(JobFileError, match="the file is empty; expected name, parallel"):
        job.loads("", "e.yaml")
    with pytest.raises(JobFileError, match="cannot read"):
        job.load(tmp_path / "missing.yaml")


def test_ranks_are_numbered_as_megatron_numbers_them():
    j = Job("j", dp=2, tp=2, pp=2)
    assert [j.rank(s, d, t) for s in range(2) for d in range(2) for t in range(2)] == list(range(8))
    assert all(
        j.coords(j.rank(s, d, t)) == (s, d, t) for s in range(2) for d in range(2) for t in range(2)
    )


GRAPH = fabric.rail_optimized(nodes=4, gpus_per_node=2, spines=2)


def rail_of(host: str) -> int:
    return GRAPH.nodes[host]["rail"]


def node_of(host: str) -> int:
    return GRAPH.nodes[host]["node"]


def test_rail_placement_keeps_data_parallel_peers_on_one_rail_across_nodes():
    j = job.load("dense-dp-tp-pp")
    where = job.place(j, GRAPH)
    assert sorted(where.values()) == sorted(fabric.hosts(GRAPH))
    for s in range(j.pp):
        for t in range(j.tp):
            peers = [where[j.rank(s, d, t)] for d in range(j.dp)]
            assert len({rail_of(h) for h in peers}) == 1  # the gradients' ring stays on a leaf
            assert len({node_of(h) for h in peers}) == j.dp
        for d in range(j.dp):  # a tensor-parallel group is one node's GPUs (NVLink)
            assert len({node_of(where[j.rank(s, d, t)]) for t in range(j.tp)}) == 1


def test_crossing_placement_puts_each_peer_on_another_rail():
    j = job.load("dense-dp-tp-pp").with_(placement="crossing")
    where = job.place(j, GRAPH)
    for s in range(j.pp):
        for t in range(j.tp):
            assert len({rail_of(where[j.rank(s, d, t)]) for d in range(j.dp)}) == j.dp


@pytest.mark.parametrize(
    "j, words",
    [
        (Job("j", dp=2, tp=3), "tp=3 does not divide the fabric's 2 GPUs per node"),
        (Job("j", dp=8, tp=2), "need 8 nodes of 2 GPUs; the fabric has 4"),
        (Job("j", dp=2, tp=2, pp=4), "need 8 nodes"),
    ],
)
def test_a_job_that_does_not_fit_says_why(j, words):
    with pytest.raises(PlacementError, match=words):
        job.place(j, GRAPH)


def test_a_fabric_without_nvlink_domains_is_refused():
    with pytest.raises(PlacementError, match="no NVLink domains"):
        job.place(Job("j", dp=2), fabric.leaf_spine(leaves=2, spines=1))


def test_a_job_that_neither_computes_nor_communicates_is_refused():
    text = "name: j\nparallel: {dp: 2}\ncompute: {forward: 0, backward: 0}\nmessages: {dp: 0}\n"
    with pytest.raises(JobFileError, match="compute: the step neither computes nor communicates"):
        job.loads(text, "j.yaml")
