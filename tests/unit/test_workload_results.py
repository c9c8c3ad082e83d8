"""One result type per workload, and one duration keyword.

Pure: ping's output and iperf3's JSON as the tools print them (the formats of
iputils 20221126 and iperf 3.12), parsed without a fabric. The same code on
real packets: tests/integration/test_failures_with_plugin.py.
"""

from __future__ import annotations

import inspect
import warnings

import pytest

from emu.traffic import iperf
from emu.traffic.iperf import IperfResult, resolve_duration
from emu.traffic.ping import PingJob, parse

# Five requests every 50 ms; 3 and 4 lost (ping -D -O). Request 1 left at 100.000,
# ping's timer ran late (56 ms), and the replies took 0.2 ms.
PING_OUTPUT = """\
PING 10.0.0.4 (10.0.0.4) 56(84) bytes of data.
[100.000200] 64 bytes from 10.0.0.4: icmp_seq=1 ttl=64 time=0.200 ms
[100.056200] 64 bytes from 10.0.0.4: icmp_seq=2 ttl=64 time=0.200 ms
[100.168000] no answer yet for icmp_seq=3
[100.224000] no answer yet for icmp_seq=4
[100.224500] 64 bytes from 10.0.0.4: icmp_seq=5 ttl=64 time=0.500 ms

--- 10.0.0.4 ping statistics ---
5 packets transmitted, 3 received, 40% packet loss, time 224ms
"""


def test_ping_places_every_request_by_when_it_left():
    r = parse(PING_OUTPUT, 5, 0.05)
    assert (r.sent, r.received, r.lost, r.replied) == (5, 3, 2, (1, 2, 5))
    # A reply's time less its round trip; the request after a "no answer yet" line.
    assert r.sent_wall(1) == pytest.approx(100.000)
    assert r.sent_wall(4) == pytest.approx(100.168)
    assert r.sent_wall(5) == pytest.approx(100.224)
    # Request 3 is the only one with no time of its own: between 2 and 4.
    assert r.sent_wall(3) == pytest.approx((100.056 + 100.168) / 2)
    assert r.actual_interval_s == pytest.approx(0.056)
    assert r.longest_outage_s == pytest.approx(2 * 0.056)
    assert [ok for _, ok in r.timeline()] == [True, True, False, False, True]
    assert r.lost_between(100.1, 100.2) == [3, 4]
    assert r.restored_wall(100.1) == pytest.approx(100.2245)
    assert r.restored_wall(100.2) is None  # nothing sent after it was lost
    assert r.raw == PING_OUTPUT


def test_a_stream_with_no_reply_places_nothing_and_loses_everything():
    r = parse("PING 10.0.0.4 (10.0.0.4) 56(84) bytes of data.\n", 3, 0.05)
    assert (r.sent, r.received, r.timeline()) == (3, 0, [(None, False)] * 3)
    assert r.lost_between(0, 1) == [1, 2, 3]


TCP_DOC = {
    "start": {"test_start": {"protocol": "TCP", "duration": 3}},
    "end": {
        "sum_sent": {"bytes": 7_500_000, "bits_per_second": 20.0e6, "retransmits": 4},
        "sum_received": {"bytes": 7_400_000, "bits_per_second": 19.7e6},
    },
}
UDP_DOC = {
    "start": {"test_start": {"protocol": "UDP", "duration": 3}},
    "end": {
        "sum": {
            "bytes": 6_000_000,
            "bits_per_second": 16.0e6,
            "jitter_ms": 0.1,
            "lost_percent": 2.5,
        },
        "sum_sent": {"bytes": 6_000_000, "bits_per_second": 16.0e6},
        "sum_received": {"bytes": 5_850_000, "bits_per_second": 15.6e6},
    },
}


def test_iperf_gives_a_result_object_with_the_json_kept():
    tcp = IperfResult.from_json(TCP_DOC, "h1", "h4", 3.0)
    assert (tcp.protocol, tcp.ok, tcp.retransmits, tcp.lost_percent) == ("tcp", True, 4, None)
    assert tcp.sent_bps == 20.0e6 and tcp.received_bps == 19.7e6
    assert tcp.received_bytes == 7_400_000 and tcp.received_mbps == pytest.approx(19.7)
    assert tcp.raw is TCP_DOC
    udp = IperfResult.from_json(UDP_DOC, "h1", "h4", 3.0)
    assert (udp.protocol, udp.lost_percent, udp.retransmits) == ("udp", 2.5, None)
    assert udp.received_bps == 15.6e6
    failed = IperfResult.from_json({"error": "unable to connect"}, "h1", "h9", 3.0)
    assert not failed.ok and failed.error == "unable to connect" and failed.received_bps == 0


def test_every_workload_takes_duration_s():
    for workload in (PingJob, iperf.Job, iperf.measure, iperf.run, iperf.start):
        params = inspect.signature(workload).parameters
        assert "duration_s" in params and "seconds" in params, workload


def test_the_old_duration_keyword_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="seconds= is deprecated; use duration_s="):
        assert resolve_duration(None, 3, "iperf") == 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new keyword warns about nothing
        assert resolve_duration(4, None, "ping") == 4.0
        assert resolve_duration(None, None, "ping") == iperf.DEFAULT_DURATION_S
    with pytest.raises(ValueError, match="not also its old name"):
        resolve_duration(3, 3, "iperf")
    for bad in (0, -1, float("nan"), float("inf"), True, "3"):
        with pytest.raises(ValueError, match="duration_s="):
            resolve_duration(bad, None, "iperf")
