"""A lab's instances (seeds), `emu lab reset` and `emu lab test` (no root, no fabric)."""

from __future__ import annotations

import os

import pytest

from emu import cli, labs, scenario
from emu.scenario import ScenarioError


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(labs.ENV_STUDENT, raising=False)
    monkeypatch.delenv(labs.ENV_SEED, raising=False)
    return tmp_path


def test_a_student_name_is_one_instance_per_lab():
    alice = labs.student_seed("gray_failure", "alice")
    assert alice == labs.student_seed("gray_failure", " Alice ")  # case and blanks aside
    assert alice != labs.student_seed("gray_failure", "bob")
    assert alice != labs.student_seed("pause_storm", "alice")  # another lab, another answer
    assert 0 <= alice <= labs.MAX_SEED
    for bad in ("", "  ", "a\nb"):
        with pytest.raises(labs.LabError, match="--student: .* is not a name"):
            labs.student_seed("gray_failure", bad)


def test_where_the_instance_comes_from(in_tmp):
    env = {labs.ENV_STUDENT: "carol"}
    assert labs.requested_instance("gray_failure", environ={}) is None
    assert labs.requested_instance("gray_failure", seed="7", environ=env).seed == 7
    by_name = labs.requested_instance("gray_failure", student="dave", environ=env)
    assert (by_name.student, by_name.seed) == ("dave", labs.student_seed("gray_failure", "dave"))
    from_env = labs.requested_instance("gray_failure", environ=env)
    assert from_env.seed == labs.student_seed("gray_failure", "carol")
    assert labs.requested_instance("x", environ={labs.ENV_SEED: "9"}).seed == 9
    for bad in ("-1", "x", "1.5", str(labs.MAX_SEED + 1)):
        with pytest.raises(labs.LabError, match=r"--seed: .* is not a seed \(an integer"):
            labs.requested_instance("gray_failure", seed=bad)
    with pytest.raises(labs.LabError, match="not both"):
        labs.requested_instance("gray_failure", student="a", seed="1")


def test_start_records_the_instance_and_check_grades_that_one(in_tmp):
    work = labs.copy_starting_point("gray_failure", student="alice")
    instance = labs.read_instance(work)
    assert instance.seed == labs.student_seed("gray_failure", "alice")
    assert labs.read_instance(work) == labs.Instance(instance.seed, "alice", "recorded")
    assert labs.instance_for("gray_failure", work, False).seed == instance.seed
    # A second start keeps the copy's instance; asking for another says how to start over.
    assert labs.read_instance(labs.copy_starting_point("gray_failure")).seed == instance.seed
    with pytest.raises(labs.LabError, match='emu lab reset gray-failure --student "bob"'):
        labs.copy_starting_point("gray_failure", student="bob")
    with pytest.raises(labs.LabError, match="this copy is seed .*, student alice"):
        labs.instance_for("gray_failure", work, False, seed="3")
    # The solution and the untouched start are the reference instance.
    assert labs.instance_for("gray_failure", labs.lab_dir("gray_failure"), False).seed == 2017
    solution = labs.lab_dir("gray_failure") / "solution"
    assert labs.instance_for("gray_failure", solution, True).seed == 2017
    with pytest.raises(labs.LabError, match="solution/ answers the reference instance"):
        labs.instance_for("gray_failure", solution, True, student="alice")


def test_without_a_name_a_new_copy_gets_its_own_random_instance(in_tmp):
    other = in_tmp / "other"
    other.mkdir()
    first = labs.read_instance(labs.copy_starting_point("pause_storm"))
    labs.reset("pause_storm")  # keeps the copy's instance
    assert labs.read_instance(in_tmp / "labs-work" / "pause_storm").seed == first.seed
    os.chdir(other)  # another student's machine, no name given: another instance
    second = labs.read_instance(labs.copy_starting_point("pause_storm"))
    assert second.seed != first.seed  # p = 2^-32 of a collision


def test_reset_keeps_a_backup_and_says_what_it_did(in_tmp, capsys):
    work = labs.copy_starting_point("fabric_basics", seed="5")
    (work / "answers.yaml").write_text("switches_h1_to_h3: 9\n")
    assert cli.main(["lab", "reset", "fabric-basics"]) == 0
    out = capsys.readouterr().out
    backups = sorted(in_tmp.glob("labs-work/fabric_basics.backup-*"))
    assert len(backups) == 1 and (backups[0] / "answers.yaml").read_text() == (
        "switches_h1_to_h3: 9\n"
    )
    start = (labs.lab_dir("fabric_basics") / "answers.yaml").read_text()
    assert (work / "answers.yaml").read_text() == start
    assert f"your copy is kept as labs-work/{backups[0].name}/" in out
    assert "answers.yaml" in out and "seed 5" in out
    # Another student: a fresh copy of theirs, the old one backed up again.
    assert cli.main(["lab", "reset", "fabric-basics", "--student", "erin"]) == 0
    assert labs.read_instance(work).student == "erin"
    assert len(list(in_tmp.glob("labs-work/fabric_basics.backup-*"))) == 2
    capsys.readouterr()
    assert cli.main(["lab", "reset", "gray-failure"]) == 0
    assert "nothing to back up" in capsys.readouterr().out


def test_bad_instances_are_one_line_and_exit_2(in_tmp, capsys):
    for argv in (
        ["lab", "start", "gray-failure", "--seed", "-3"],
        ["lab", "check", "gray-failure", "--seed", "nan"],
        ["lab", "check", "gray-failure", "--solution", "--student", "alice"],
        ["lab", "reset", "gray-failure", "--student", " "],
        ["lab", "test", "fabric-basics", "--work", str(in_tmp / "nowhere")],
    ):
        assert cli.main(argv) == cli.EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert err.startswith("emu: ") and err.count("\n") == 1 and "Traceback" not in err


def test_emu_lab_test_needs_no_root_and_no_fabric(in_tmp, monkeypatch, capsys):
    import emu.net

    def no_fabric(*args, **kwargs):
        raise AssertionError("emu lab test built a fabric")

    monkeypatch.setattr(emu.net.Fabric, "__init__", no_fabric)
    monkeypatch.setattr(cli, "need_root", no_fabric)
    assert cli.main(["lab", "test", "ecmp-app", "--solution"]) == 0
    assert "PASSED: 15 of 15" in capsys.readouterr().out
    assert cli.main(["lab", "test", "ecmp-app"]) == cli.EXIT_CHECKS_FAILED  # the start
    out = capsys.readouterr().out
    assert "[FAIL] [fat-tree k=4] every next hop on a shortest path is used (ECMP)" in out
    for name in labs.available():
        run = labs.offline(name, solution=True, log=lambda _: None)
        assert run.passed, labs.render(run)


LOOPS_ON_A_FAT_TREE = '''
def next_hops(topology, switch, destination):
    """Straight down when adjacent, else everywhere: right on two tiers, loops on three."""
    if topology.has_edge(switch, destination):
        return {topology.edges[switch, destination]["port"]}
    return {d["port"] for _, _, d in topology.out_edges(switch, data=True)}
'''


def test_ecmp_app_offline_finds_a_policy_that_loops_only_on_a_fat_tree(tmp_path):
    from labs import ecmp_app

    (tmp_path / "ecmp.py").write_text(LOOPS_ON_A_FAT_TREE)
    policy = ecmp_app.load_policy(tmp_path / "ecmp.py")
    assert not any(ecmp_app.policy_faults(policy, ecmp_app.graph()).values())
    faults = ecmp_app.policy_faults(policy, ecmp_app.fat_tree())
    assert faults["loops"] and faults["shortest"]
    assert all(" -> " in loop and loop.endswith("is a loop") for loop in faults["loops"])
    run = labs.offline("ecmp_app", work=str(tmp_path), log=lambda _: None)
    failed = {c.name for c in run.checks if not c.passed}
    assert "[fat-tree k=4] no loop: following the next hops always ends at the destination" in (
        failed
    )
    assert not any(name.startswith("[leaf/spine]") for name in failed)


def test_ecmp_app_offline_names_a_policy_that_raises_or_returns_a_dpid(tmp_path):
    from labs import ecmp_app

    raises = "def next_hops(topology, switch, destination):\n    return 1 / 0\n"
    dpids = "def next_hops(topology, switch, destination):\n    return set(topology[switch])\n"
    for source, key, text in (
        (raises, "runs", "raised ZeroDivisionError"),
        (dpids, "links", "lead to no switch"),
    ):
        (tmp_path / "ecmp.py").write_text(source)
        faults = ecmp_app.policy_faults(
            ecmp_app.load_policy(tmp_path / "ecmp.py"), ecmp_app.graph()
        )
        assert text in faults[key][0]
    (tmp_path / "ecmp.py").write_text("def next_hops(:\n")
    with pytest.raises(labs.LabError, match="ecmp.py: SyntaxError"):
        ecmp_app.load_policy(tmp_path / "ecmp.py")


def test_every_handout_has_its_picture_spoiler_troubleshooting_reset_and_next_lab():
    catalogue = list(labs.available())
    for i, name in enumerate(catalogue):
        handout = (labs.lab_dir(name) / "README.md").read_text()
        assert "![" in handout and f"]({labs.PICTURE})" in handout, name
        assert labs.picture(name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        for section in ("## Hints", "## Troubleshooting", "## Starting over", "## Next"):
            assert section in handout, (name, section)
        typed = labs.spelled(name)
        assert f"emu lab reset {typed}" in handout and f"emu lab test {typed}" in handout, name
        hints, spoiler = handout.index("## Hints"), handout.index("**Spoiler")
        assert hints < spoiler < handout.index("\n1. ", hints), name  # the note, then hints
        assert "solution/" not in handout[:spoiler], name
        if i + 1 < len(catalogue):
            assert f"../{catalogue[i + 1]}/README.md" in handout[handout.index("## Next") :], name


def test_labs_are_spelled_with_dashes_and_the_package_spelling_still_works(monkeypatch, capsys):
    """`pause-storm`, as the scenario is spelled; `pause_storm` with a deprecation line."""
    said: list[str] = []
    monkeypatch.setattr(scenario, "deprecated", said.append)
    assert cli._lab_package("pause-storm") == "pause_storm" and said == []
    assert cli._lab_package("pause_storm") == "pause_storm"
    assert said == ["lab 'pause_storm' is spelled 'pause-storm' now"]
    assert cli._lab_package("lossless") == "lossless"
    with pytest.raises(ScenarioError, match="unknown lab 'pause-strom'"):
        cli._lab_package("pause-strom")
    assert cli.main(["lab", "list"]) == 0
    listed = capsys.readouterr().out
    assert "pause-storm" in listed and "pause_storm" not in listed
