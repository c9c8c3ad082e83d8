"""The Vagrantfile parses, and provisions through scripts/bootstrap.

`vagrant validate --ignore-provider` loads the Vagrantfile and checks the
core config without a provider plugin (vagrant-libvirt need not be
installed) and without the box (nothing is downloaded). Vagrant's state
directories are redirected to a temporary directory so that the test leaves
no `.vagrant/` in the repository and needs no writable HOME.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "Vagrantfile"


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not on PATH")
def test_vagrant_validate(tmp_path):
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        VAGRANT_HOME=str(tmp_path / "vagrant.d"),
        VAGRANT_DOTFILE_PATH=str(tmp_path / "dotfile"),
        VAGRANT_CHECKPOINT_DISABLE="1",  # no version check over the network
        VAGRANT_CWD=str(REPO),
    )
    result = subprocess.run(
        ["vagrant", "validate", "--ignore-provider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validated successfully" in result.stdout


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
