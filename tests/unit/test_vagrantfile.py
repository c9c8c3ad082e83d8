"""The Vagrantfile parses, and provisions through scripts/bootstrap.

`vagrant validate --ignore-provider` loads the Vagrantfile and checks the
core config without a provider plugin (vagrant-libvirt need not be
installed) and without the box (nothing is downloaded). Vagrant's state
directories are redirected to a temporary directory so that the test leaves
no `.vagrant/` in the repository and needs no writable HOME.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "Vagrantfile"


def _vagrant(tmp_path, *args, **env_extra):
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        VAGRANT_HOME=str(tmp_path / "vagrant.d"),
        VAGRANT_DOTFILE_PATH=str(tmp_path / "dotfile"),
        VAGRANT_CHECKPOINT_DISABLE="1",  # no version check over the network
        VAGRANT_CWD=str(REPO),
        **env_extra,
    )
    return subprocess.run(
        ["vagrant", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not on PATH")
def test_vagrant_validate(tmp_path):
    result = _vagrant(tmp_path, "validate", "--ignore-provider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validated successfully" in result.stdout
    assert not (tmp_path / "dotfile" / "emu-cluster-key").exists()  # one VM: no cluster key


# The Vagrantfile evaluated by plain Ruby under a recorder that stands for Vagrant's
# config object: which machines it defines and what it calls on them, with no
# provider (`vagrant status` needs one) and no box.
RECORDER = r"""
require "json"
class Rec
  def initialize(path, log) @path, @log = path, log end
  def method_missing(name, *args, **kw, &blk)
    @log << {"on" => @path, "call" => name.to_s, "args" => args.map(&:to_s),
             "kw" => kw.map { |k, v| [k.to_s, v.to_s] }.to_h}
    blk.call(Rec.new(name == :define ? "machine #{args[0]}" : "#{@path}.#{name}", @log)) if blk
    Rec.new("#{@path}.#{name}", @log)
  end
  def respond_to_missing?(*) true end
end
module Vagrant
  def self.configure(_version)
    log = []
    yield Rec.new("config", log)
    puts JSON.dump(log)
  end
end
load ARGV[0]
"""


def _recorded(tmp_path, **env_extra) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = dict(os.environ, VAGRANT_DOTFILE_PATH=str(tmp_path / "dotfile"), **env_extra)
    res = subprocess.run(
        ["ruby", "-e", RECORDER, str(VAGRANTFILE)], capture_output=True, text=True, env=env,
        timeout=60, check=False,
    )  # fmt: skip
    return res, (json.loads(res.stdout) if res.returncode == 0 else [])


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby (vagrant's) is not on PATH")
def test_emu_servers_makes_a_cluster_of_vms(tmp_path):
    """EMU_SERVERS=3: VMs emu, emu2, emu3 on the private network, one key for the
    cluster, MTU 1600 at every boot (docs/cluster.md); EMU_SERVERS unset: one VM."""
    res, one = _recorded(tmp_path)
    assert res.returncode == 0, res.stderr
    assert not [c for c in one if c["call"] == "define"]
    assert not (tmp_path / "dotfile" / "emu-cluster-key").exists()
    res, log = _recorded(tmp_path, EMU_SERVERS="3")
    assert res.returncode == 0, res.stderr
    assert [c["args"][0] for c in log if c["call"] == "define"] == ["emu", "emu2", "emu3"]
    ips = {c["on"]: c["kw"].get("ip") for c in log if c["call"] == "network"}
    assert ips == {"machine emu.vm": "192.168.56.11", "machine emu2.vm": "192.168.56.12",
                   "machine emu3.vm": "192.168.56.13"}  # fmt: skip
    assert (tmp_path / "dotfile" / "emu-cluster-key.pub").exists()
    cluster = [c for c in log if c["call"] == "provision" and c["kw"].get("name") == "cluster"]
    assert len(cluster) == 3
    script = cluster[0]["kw"]["inline"]
    assert "Host emu2" in script and "Host emu3" in script and "MaxSessions 1000" in script
    mtu = [c for c in log if c["call"] == "provision" and c["kw"].get("name") == "mtu"]
    assert len(mtu) == 3 and all(c["kw"]["run"] == "always" for c in mtu)
    assert "mtu 1600" in mtu[0]["kw"]["inline"]
    bad, _ = _recorded(tmp_path, EMU_SERVERS="nine")
    assert bad.returncode != 0
    assert "EMU_SERVERS=nine: expected a number of VMs from 1 to 8" in bad.stderr


def _provision_script() -> str:
    text = VAGRANTFILE.read_text()
    match = re.search(r'config\.vm\.provision\s+"shell".*?<<-SHELL\n(.*?)\n\s*SHELL', text, re.S)
    assert match, "no shell provisioner with an inline heredoc in the Vagrantfile"
    return match.group(1)


def test_provisioner_runs_bootstrap():
    lines = [line.strip() for line in _provision_script().splitlines()]
    assert "sudo bash scripts/bootstrap" in lines
    assert "cd /home/vagrant/emu" in lines
    assert (REPO / "scripts" / "bootstrap").is_file()


def test_box_and_providers():
    text = VAGRANTFILE.read_text()
    # Users get the public box; scripts/test-vagrant names its local one.
    assert re.search(
        r'config\.vm\.box\s*=\s*ENV\.fetch\("EMU_VAGRANT_BOX",\s*"debian/bookworm64"\)', text
    )
    for provider in ("virtualbox", "libvirt", "parallels"):
        block = re.search(rf'provider\s+"{provider}"\s+do\s*\|(\w+)\|(.*?)\bend\b', text, re.S)
        assert block, provider
        var, body = block.groups()
        assert re.search(rf"{var}\.memory\s*=\s*4096", body)
        assert re.search(rf"{var}\.cpus\s*=\s*2", body)
    # VMware (Fusion on Apple Silicon) takes the same through vmx keys.
    block = re.search(r'provider\s+"vmware_desktop"\s+do\s*\|(\w+)\|(.*?)\bend\b', text, re.S)
    assert block, "vmware_desktop"
    var, body = block.groups()
    assert re.search(rf'{var}\.vmx\["memsize"\]\s*=\s*"4096"', body)
    assert re.search(rf'{var}\.vmx\["numvcpus"\]\s*=\s*"2"', body)
    assert re.search(r'synced_folder\s+"\.",\s+"/home/vagrant/emu"', text)


def test_vm_boot_script_parses():
    """scripts/test-vagrant boots the VM (minutes, root, KVM): not run here,
    but it must stay valid bash and executable."""
    script = REPO / "scripts" / "test-vagrant"
    assert os.access(script, os.X_OK)
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
