"""The live view in a real headless browser (Debian's chromium, driven through chromium-driver
by selenium): a small leaf/spine under RoCEv2 all-to-all load, then one NIC stuck sending
PAUSE; the page must show the links busy and the paused ports red within two seconds.

      spine1
      /    \\
   leaf1   leaf2
   h1 h2   h3 h4      all-to-all RoCEv2 on the lossless class; h1's NIC gets stuck

Skipped, with the reason, where chromium, its driver or selenium is missing
(scripts/bootstrap installs them). With EMU_LIVE_SCREENSHOT=PATH the test also
waits for the storm to spread and saves the page there: that is how
docs/img/live-pause-storm.png is made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import pytest

from emu import fabric as fabric_mod
from emu import live
from emu.faults import Faults
from emu.net import Fabric
from emu.traffic.rdma import RdmaHosts

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
PAUSED_RED = "rgb(214, 39, 40)"  # --paused in emu/live/static/live.css
RATE_BPS = 10_000_000
LOAD = 0.6  # of each host's link, spread over its flows
STUCK_HOST = "h1"
# The bound: from the NIC getting stuck to red ports on the page.
PAUSED_WITHIN_S = 2.0


def chromium_flags(user_data_dir: str) -> list[str]:
    # As root in a closed network: no sandbox (it needs a user namespace), and none
    # of the background connections that would hang on a network that never answers.
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1050",
        f"--user-data-dir={user_data_dir}",
    ]


def processes_using(marker: str) -> list[int]:
    """Pids whose command line names `marker` (our browser's own temp directory)."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True)
    return [int(line.split(None, 1)[0]) for line in ps.stdout.splitlines() if marker in line]


@pytest.fixture
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/bootstrap)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for drivers
    profile = tempfile.mkdtemp(prefix="emu-live-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in chromium_flags(profile):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver_pid = driver.service.process.pid
    try:
        yield driver
    finally:
        driver.quit()  # closes chromium, then stops chromedriver (by its pid)
        # Whatever of ours outlived quit(): found by our unique profile directory.
        left = [pid for pid in processes_using(profile) if pid != os.getpid()]
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(profile, ignore_errors=True)
        assert not left, f"chromium processes outlived driver.quit(): {left}"
        assert driver.service.process.poll() is not None, f"chromedriver {driver_pid} still runs"


def wait_until(driver, condition, timeout_s: float, what: str):
    """Poll the page (every 50 ms) until `condition(driver)` is truthy; fail naming `what`."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.05).until(condition)
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {timeout_s} s", pytrace=False)


def link_utilisations(driver) -> dict[str, float]:
    return driver.execute_script(
        "const out = {};"
        "for (const l of document.querySelectorAll('line.link'))"
        "  out[l.dataset.link] = l.dataset.util === '' ? null : Number(l.dataset.util);"
        "return out;"
    )


def red_ports(driver) -> list[str]:
    """Ports the page draws red: their state says paused and their fill is the paused red."""
    return driver.execute_script(
        "return [...document.querySelectorAll('circle.port')]"
        f"  .filter(c => getComputedStyle(c).fill === '{PAUSED_RED}')"
        "  .filter(c => c.dataset.state === 'paused')"
        "  .map(c => c.dataset.port);"
    )


def test_the_page_shows_load_and_the_ports_a_stuck_nic_pauses_turn_red(browser, tmp_path):
    graph = fabric_mod.leaf_spine(
        leaves=2, spines=1, hosts_per_leaf=2, host_rate_bps=RATE_BPS, name="live"
    )
    hosts = fabric_mod.hosts(graph)
    stuck_leaf = graph.nodes[STUCK_HOST]["leaf"]
    port_to_stuck = f"{stuck_leaf}:{graph.edges[STUCK_HOST, stuck_leaf]['ports'][stuck_leaf]}"
    switch_ports = sum(graph.degree(sw) for sw in fabric_mod.switches(graph))
    # The storm must spread to be seen: no watchdog; ECN off, as in scenarios/pause_storm.py.
    qos = {"watchdog": {"enabled": False}, "ecn": {"enabled": False}}
    with (
        Fabric(graph, out_dir=str(tmp_path / "emu"), qos=qos) as fab,
        live.serve(fab, port=0) as view,
    ):
        browser.get(view.url)
        wait_until(
            browser,
            lambda d: len(d.find_elements("css selector", "circle.port")) == switch_ports,
            10,
            f"the fabric's {switch_ports} switch ports",
        )
        idle = wait_until(
            browser,
            lambda d: (u := link_utilisations(d)) and None not in u.values() and u,
            5,
            "a utilisation for every link",
        )
        assert max(idle.values()) < 0.05, f"links busy before any traffic: {idle}"

        nics = RdmaHosts(fab, hosts, dcqcn=False)
        per_flow_bps = LOAD * RATE_BPS / (len(hosts) - 1)
        for src in hosts:
            for dst in hosts:
                if src != dst:
                    qp = nics.connect(src, dst, max_rate_bps=per_flow_bps)
                    nics.post(src, qp, 16384, int(per_flow_bps * 30 / 8 / 16384) + 2)
        busy = wait_until(
            browser,
            lambda d: (u := link_utilisations(d)) and max(v or 0 for v in u.values()) >= 0.3 and u,
            10,
            "a link at >= 30% under load",
        )
        assert red_ports(browser) == [], "ports red before any NIC got stuck"

        Faults(fab, nics).stuck_nic(STUCK_HOST)
        stuck_at = time.monotonic()
        red = wait_until(
            browser,
            lambda d: port_to_stuck in (r := red_ports(d)) and r,
            PAUSED_WITHIN_S,
            f"{port_to_stuck} (towards the stuck {STUCK_HOST}) red",
        )
        shown_after_s = time.monotonic() - stuck_at
        row_state = browser.find_element(
            "css selector", f'#ports tr[data-port="{port_to_stuck}"]'
        ).get_attribute("data-state")
        assert row_state == "paused"
        print(
            f"\nbusy links: { {k: v for k, v in busy.items() if v} }\n"
            f"red {shown_after_s:.2f} s after the NIC got stuck: {red}"
        )

        screenshot = os.environ.get("EMU_LIVE_SCREENSHOT")
        if screenshot:
            # The picture for the README: wait until PAUSE reached the spine.
            spread = wait_until(
                browser,
                lambda d: (r := red_ports(d)) and any(p.startswith("spine") for p in r) and r,
                10,
                "the storm reaching the spine",
            )
            browser.save_screenshot(screenshot)
            print(f"screenshot of {len(spread)} red ports: {screenshot}")
