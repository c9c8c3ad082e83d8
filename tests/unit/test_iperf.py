"""What emu/traffic/iperf.py reads from iperf3's JSON for measurements: each stream's
payload by its source port (the stream's 5-tuple) and the MSS. On documents in
iperf3's shape (`iperf3 -J -P 2`), cut down to the fields read."""

from __future__ import annotations

from emu.traffic import iperf


def doc_of_two_streams() -> dict:
    return {
        "start": {
            "connected": [
                {"socket": 5, "local_port": 41000, "remote_port": 5202},
                {"socket": 7, "local_port": 41002, "remote_port": 5202},
            ],
            "tcp_mss_default": 1398,
        },
        "end": {
            "streams": [
                {"sender": {"socket": 5, "bytes": 9000}, "receiver": {"socket": 5, "bytes": 8000}},
                {"sender": {"socket": 7, "bytes": 5000}, "receiver": {"socket": 7, "bytes": 4500}},
            ]
        },
    }


def test_each_stream_is_named_by_its_source_port_with_what_the_server_received():
    assert iperf.received_by_stream(doc_of_two_streams()) == {41000: 8000, 41002: 4500}


def test_a_stream_whose_socket_was_not_listed_is_left_out():
    doc = doc_of_two_streams()
    doc["start"]["connected"].pop()
    assert iperf.received_by_stream(doc) == {41000: 8000}


def test_a_failed_test_has_no_streams():
    assert iperf.received_by_stream({"error": "unable to connect"}) == {}


def test_the_mss_is_iperfs_or_linuxs_default():
    assert iperf.tcp_mss(doc_of_two_streams()) == 1398
    assert iperf.tcp_mss({"start": {}}) == iperf.DEFAULT_TCP_MSS == 1448
    # iperf3 writes 0 when it could not read the MSS.
    assert iperf.tcp_mss({"start": {"tcp_mss_default": 0}}) == 1448
