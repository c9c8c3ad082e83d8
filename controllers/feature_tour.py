"""A tour of OpenFlow 1.3 in one os-ken app: each family a Ryu app may use, on one switch.

Owns one switch's flows, one group and one meter, installed when the switch
connects, each written the way an ordinary Ryu/os-ken app writes it (no emu
imports, nothing emu-specific): a reference for students who write their
own app, and the app that tests/integration/test_same_as_ovs.py runs
unchanged against emu's switch and against Open vSwitch, frame for frame.

What arrives on any port and where it goes (`TOUR` below, one line each):

    ICMPv6 echo from fd00::/64       set ipv6_dst and ip_dscp         -> port 2
    UDP to port 1001                 push an 802.1ad tag (vid 100)    -> port 2
    a frame tagged with vid 200      pop the tag                      -> port 2
    UDP to port 1002                 push MPLS label 17               -> port 2
    MPLS label 18, bottom of stack   pop MPLS back to IPv4            -> port 2
    UDP to port 1003                 set ipv4_dst, udp_dst; dec TTL   -> port 2
    UDP to port 2000                 SELECT group, weights 1:3        -> port 2 or 3
    UDP to port 3000                 meter 1 (50 pkt/s, burst 20)     -> port 3
    UDP to port 4000                 write metadata, goto table 1     -> port 3

The checksums a rewrite touches (IPv4 header, UDP, ICMPv6) are the switch's
to fix. When every message is acknowledged (a barrier reply), the app writes
`{"dpid": D, "flows": N, "refused": [[type, code], ...]}` to the status file (`--status-file`), so a
test or a script knows the switch is programmed.

Run it with emu's launcher (os-ken 4.x has no osken-manager):

    python -m controllers.launch --ofp-tcp-listen-port 6653 --status-file /tmp/tour.json \\
        controllers.feature_tour
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controllers.launch import app_options

LOG = logging.getLogger(__name__)

GROUP_ID = 1
METER_ID = 1
METER_PKTPS, METER_BURST = 50, 20
WEIGHTS = (1, 3)  # bucket to port 2, bucket to port 3
METADATA = 0xC0FFEE
PRIORITY = 100


def _apply(*actions) -> list:
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, list(actions))]


def _out(port: int) -> parser.OFPActionOutput:
    return parser.OFPActionOutput(port)


def _set(**field) -> parser.OFPActionSetField:
    return parser.OFPActionSetField(**field)


def _udp(dport: int) -> dict:
    return {"eth_type": 0x0800, "ip_proto": 17, "udp_dst": dport}


# (what it shows, table, match fields, instructions)
TOUR = (
    (
        "IPv6 match with a mask; set_field on IPv6 and DSCP (ICMPv6 checksum)",
        0,
        {
            "eth_type": 0x86DD,
            "ipv6_src": ("fd00::", "ffff:ffff:ffff:ffff::"),
            "ip_proto": 58,
            "icmpv6_type": 128,
        },
        _apply(_set(ipv6_dst="fd00::99"), _set(ip_dscp=10), _out(2)),
    ),
    (
        "push an 802.1ad (0x88a8) tag and set its VID and PCP",
        0,
        _udp(1001),
        _apply(
            parser.OFPActionPushVlan(0x88A8),
            _set(vlan_vid=ofp.OFPVID_PRESENT | 100),
            _set(vlan_pcp=3),
            _out(2),
        ),
    ),
    (
        "match a VLAN ID and pop the tag",
        0,
        {"vlan_vid": ofp.OFPVID_PRESENT | 200},
        _apply(parser.OFPActionPopVlan(), _out(2)),
    ),
    (
        "push an MPLS label",
        0,
        _udp(1002),
        _apply(parser.OFPActionPushMpls(0x8847), _set(mpls_label=17), _out(2)),
    ),
    (
        "match an MPLS label at the bottom of the stack and pop it",
        0,
        {"eth_type": 0x8847, "mpls_label": 18, "mpls_bos": 1},
        _apply(parser.OFPActionPopMpls(0x0800), _out(2)),
    ),
    (
        "rewrite IPv4 and UDP (both checksums) and decrement the TTL",
        0,
        _udp(1003),
        _apply(parser.OFPActionDecNwTtl(), _set(ipv4_dst="10.9.9.9"), _set(udp_dst=2003), _out(2)),
    ),
    (
        "a weighted SELECT group",
        0,
        _udp(2000),
        _apply(parser.OFPActionGroup(GROUP_ID)),
    ),
    (
        "a meter that limits a flow to 50 packets/s",
        0,
        _udp(3000),
        [parser.OFPInstructionMeter(METER_ID)] + _apply(_out(3)),
    ),
    (
        "write metadata and continue in table 1",
        0,
        _udp(4000),
        [
            parser.OFPInstructionWriteMetadata(METADATA, 0xFFFFFFFF),
            parser.OFPInstructionGotoTable(1),
        ],
    ),
    (
        "table 1: match the metadata table 0 wrote",
        1,
        {"metadata": METADATA},
        _apply(_out(3)),
    ),
)


class FeatureTour(app_manager.OSKenApp):
    """Programs every switch that connects with `TOUR`, its group and its meter."""

    OFP_VERSIONS = [ofp.OFP_VERSION]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.status_file = app_options().status_file
        self.pending: dict[int, int] = {}  # barrier xid -> dpid
        self.refused: dict[int, list[list[int]]] = {}  # dpid -> [[type, code], ...]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev) -> None:
        dp = ev.msg.datapath
        # A meter and a group exist before the flows that name them (else BAD_METER/BAD_GROUP).
        dp.send_msg(
            parser.OFPMeterMod(
                dp,
                ofp.OFPMC_ADD,
                ofp.OFPMF_PKTPS | ofp.OFPMF_BURST | ofp.OFPMF_STATS,
                METER_ID,
                [parser.OFPMeterBandDrop(rate=METER_PKTPS, burst_size=METER_BURST)],
            )
        )
        buckets = [
            parser.OFPBucket(weight, ofp.OFPP_ANY, ofp.OFPG_ANY, [_out(port)])
            for weight, port in zip(WEIGHTS, (2, 3))
        ]
        dp.send_msg(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, GROUP_ID, buckets))
        for _, table, fields, instructions in TOUR:
            dp.send_msg(
                parser.OFPFlowMod(
                    dp,
                    table_id=table,
                    priority=PRIORITY,
                    match=parser.OFPMatch(**fields),
                    instructions=instructions,
                )
            )
        barrier = parser.OFPBarrierRequest(dp)
        dp.set_xid(barrier)
        self.pending[barrier.xid] = dp.id
        dp.send_msg(barrier)
        LOG.info("switch %016x: sent %d flows, 1 group, 1 meter", dp.id, len(TOUR))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev) -> None:
        dpid = self.pending.pop(ev.msg.xid, None)
        if dpid is None:
            return
        LOG.info("switch %016x: every message acknowledged", dpid)
        if self.status_file:
            status = {"dpid": dpid, "flows": len(TOUR), "refused": self.refused.get(dpid, [])}
            _write_atomically(self.status_file, status)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev) -> None:
        # Errors come before the barrier's reply (OF1.3 6.2), so the status file lists them.
        dpid, err = ev.msg.datapath.id, [ev.msg.type, ev.msg.code]
        self.refused.setdefault(dpid, []).append(err)
        LOG.error("switch %016x refused a message: type %d code %d", dpid, *err)


def _write_atomically(path: str, data: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tour-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
