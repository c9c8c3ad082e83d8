"""Go-back-N's loss recovery: the least goodput a NIC that resends from the first lost packet keeps.

Owns the model that scenarios/livelock.py holds go-back-N's measured goodput
to: go-back-N's efficiency 1 - p*L (Bertsekas & Gallager, "Data Networks",
2nd ed., section 2.4: each error costs the frames of one NAK loop) on a link
that loses RoCEv2 frames with probability p, as Guo et al., "RDMA over
Commodity Ethernet at Scale" (SIGCOMM 2016, section 4) saw it. Pure: counts
in, bytes out (tests/unit/test_models_loss_recovery.py).
"""

from __future__ import annotations

from emu.host.rnic import DEFAULT_MTU_PAYLOAD


def go_back_n_floor(
    tx_payload_bytes: float,
    loss_prob: float,
    resent_per_loss: float,
    message_bytes: int,
    mtu_payload_bytes: int = DEFAULT_MTU_PAYLOAD,
) -> float:
    """The least bytes of whole messages go-back-N delivers for what it sent.

    Every lost frame costs itself and the L - 1 frames sent behind it before
    the NAK rewinds the sender, so of what it sends go-back-N delivers the
    share 1 - p*L (Bertsekas & Gallager, Data Networks, 2.4); less the message
    still in progress (counted only when whole) and one loop of frames in
    flight when the count was taken.

    Args:
        tx_payload_bytes: payload bytes the sender put on the wire, resent ones included.
        loss_prob: p, the probability that a frame is lost.
        resent_per_loss: L, frames resent per loss event (NAK or timeout), as measured.
        message_bytes: the size of each message (RDMA WRITE).
        mtu_payload_bytes: payload bytes per frame.

    Returns:
        (1 - p*L) x tx_payload_bytes - message_bytes - L x mtu_payload_bytes; negative
        when the losses leave no floor.

    Examples:
        >>> go_back_n_floor(1_000_000, 1 / 100, 10, 10_000, mtu_payload_bytes=1000)
        880000.0
    """
    loop = resent_per_loss
    return (1 - loss_prob * loop) * tx_payload_bytes - message_bytes - loop * mtu_payload_bytes
