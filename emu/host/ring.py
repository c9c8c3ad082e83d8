"""The ring all-reduce: one rank's pure algorithm, and the same on the NIC's queue pairs.

Owns `RingAllReduce`, the ring all-reduce of one rank as a pure state
machine (no sockets, no clock): reduce-scatter then all-gather, every chunk
cut into slices that are pipelined as NCCL does; it says what to send and
consumes what arrives. And `RingOnNic`, the collective algorithm a host
agent runs for "ring" (emu/host/collective.py, ALGORITHMS): the ring's
messages become SENDs with data on the NIC's reliable connection to rank+1.
The slice limits (`DEFAULT_SLICE_BYTES`, `MAX_SLICE_BYTES`) are the ring's.

Not owned here: the data and its check (emu/host/data.py), the job's spec
and per-rank driver (emu/host/collective.py), the transport
(emu/host/rnic.py), connecting the ring's queue pairs and driving jobs from
outside the hosts (emu/traffic/rdma.py, emu/traffic/collectives.py, which
import this module; nothing in emu/host imports emu/traffic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from emu.host.data import DTYPES, dtype_name

if TYPE_CHECKING:
    from emu.host.collective import CollectiveSpec
    from emu.host.rnic import Rnic

DEFAULT_SLICE_BYTES = 64 * 1024  # bytes per pipelined message (a few NCCL_STEPS of 8-16 KiB)
MAX_SLICE_BYTES = 16 << 20  # a message must fit in the receiver's inbox (rnic.inbox_max_bytes)


class RingAllReduce:
    """Ring all-reduce (sum) of one rank, chunked and pipelined; pure.

    The array is cut into `nranks` near-equal chunks (chunk c holds elements
    [c*L/n, (c+1)*L/n) rounded down); every chunk into the same number of
    near-equal slices, each at most `slice_bytes`. Step k = 0..n-2 is the
    reduce-scatter: rank r sends chunk (r-k) mod n and receives chunk
    (r-k-1) mod n, which it adds into its copy; steps n-1..2n-3 are the
    all-gather, the same pattern copying finished chunks. Messages from the
    previous rank arrive in order (one RC QP), so the m-th received message is
    step m // nslices, slice m % nslices: it is reduced (or copied) and, unless
    it was the last step, sent on at once as the next step's slice. That is
    the pipeline: a rank forwards slice s of step k+1 while slice s+1 of step
    k is still on the wire. Empty slices (fewer elements than ranks x slices)
    are sent as empty messages so that every rank counts the same.

    Args:
        rank: this rank, 0..nranks-1; it sends to rank+1 and receives from rank-1.
        nranks: ranks in the ring (>= 1).
        data: the local input, a 1-D int32 or float32 array (not modified:
            out of place, as nccl-tests' default).
        slice_bytes: the largest message, in bytes.

    Raises:
        ValueError: a rank out of range, a bad array or slice size.

    Examples:
        >>> from collections import deque
        >>> xs = [np.arange(5, dtype=np.int32) * (r + 1) for r in range(3)]
        >>> ring = [RingAllReduce(r, 3, xs[r], slice_bytes=4) for r in range(3)]
        >>> wires = [deque(ring[r].start()) for r in range(3)]  # wires[r]: r -> r+1
        >>> while any(wires):
        ...     for r in range(3):
        ...         if wires[r]:
        ...             nxt = (r + 1) % 3
        ...             wires[nxt].extend(ring[nxt].on_message(wires[r].popleft()))
        >>> [ring[r].result.tolist() for r in range(3)]
        [[0, 6, 12, 18, 24], [0, 6, 12, 18, 24], [0, 6, 12, 18, 24]]
    """

    def __init__(
        self, rank: int, nranks: int, data: np.ndarray, slice_bytes: int = DEFAULT_SLICE_BYTES
    ) -> None:
        if not isinstance(nranks, int) or nranks < 1:
            raise ValueError(f"nranks={nranks!r}: must be an integer >= 1")
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise ValueError(f"rank={rank!r}: allowed 0..{nranks - 1}")
        if not isinstance(data, np.ndarray) or data.ndim != 1:
            raise ValueError(
                f"data must be a 1-D numpy array, got {type(data).__name__}"
                f"{'' if not isinstance(data, np.ndarray) else f' of shape {data.shape}'}"
            )
        self.dtype = DTYPES[dtype_name(data.dtype)]
        if (
            not isinstance(slice_bytes, int)
            or not self.dtype.itemsize <= slice_bytes <= MAX_SLICE_BYTES
        ):
            raise ValueError(
                f"slice_bytes={slice_bytes!r}: allowed {self.dtype.itemsize}..{MAX_SLICE_BYTES}"
            )
        self.rank, self.nranks = rank, nranks
        # The input stays as it was. The working copy is not made here: copying 16 MB
        # into fresh pages took ~17 ms of a NIC agent's loop (page faults) while the
        # other ranks sent to it. Each slice is written the first time the ring
        # touches it instead (`on_message`): a chunk received in the reduce-scatter
        # is input + incoming, the rank's own chunk is first written in the all-gather.
        self._input = np.asarray(data, dtype=self.dtype)
        if nranks == 1:
            self.buf = self._input.copy()
        else:
            self.buf = np.empty_like(self._input)
        count = self.buf.size
        edges = [c * count // nranks for c in range(nranks + 1)]
        largest = max(edges[c + 1] - edges[c] for c in range(nranks))
        slice_elems = slice_bytes // self.dtype.itemsize
        self.nslices = max(1, -(-largest // slice_elems))
        self._slices = [
            [
                (
                    edges[c] + s * (edges[c + 1] - edges[c]) // self.nslices,
                    edges[c] + (s + 1) * (edges[c + 1] - edges[c]) // self.nslices,
                )
                for s in range(self.nslices)
            ]
            for c in range(nranks)
        ]
        self.steps = 2 * (nranks - 1)
        self.messages_expected = self.steps * self.nslices
        self.received = 0
        self.started = False

    @property
    def done(self) -> bool:
        """Every message of every step received (at once for a single rank)."""
        return self.started and self.received == self.messages_expected

    @property
    def result(self) -> np.ndarray:
        """The reduced array (complete once `done`)."""
        return self.buf

    def chunk_bounds(self, chunk: int) -> tuple[int, int]:
        """[lo, hi) element indices of chunk `chunk`."""
        sl = self._slices[chunk]
        return sl[0][0], sl[-1][1]

    def start(self) -> list[bytes]:
        """Step 0's messages: the slices of chunk `rank`, to send to rank+1 in this order.

        Raises:
            ValueError: started twice.
        """
        if self.started:
            raise ValueError(f"rank {self.rank}: the ring all-reduce was started already")
        self.started = True
        if self.nranks == 1:
            return []
        return [self._input[lo:hi].tobytes() for lo, hi in self._slices[self.rank]]

    def on_message(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Consume the next message from rank-1; returns what to send on to rank+1.

        Raises:
            ValueError: not started, more messages than the ring has, or a
                message whose length is not the slice's.
        """
        if not self.started:
            raise ValueError(f"rank {self.rank}: message before start()")
        if self.received >= self.messages_expected:
            raise ValueError(
                f"rank {self.rank}: message {self.received + 1} but the ring has "
                f"{self.messages_expected}"
            )
        step, s = divmod(self.received, self.nslices)
        chunk = (self.rank - step - 1) % self.nranks
        lo, hi = self._slices[chunk][s]
        nbytes = memoryview(data).nbytes
        if nbytes != (hi - lo) * self.dtype.itemsize:
            raise ValueError(
                f"rank {self.rank}: message {self.received} (step {step}, chunk "
                f"{chunk}, slice {s}) has {nbytes} bytes, expected "
                f"{(hi - lo) * self.dtype.itemsize}"
            )
        incoming = np.frombuffer(data, dtype=self.dtype)
        if step < self.nranks - 1:
            # The slice's first touch: input + incoming into the working copy
            # (int32 wraps modulo 2**32, as NCCL's sum does).
            np.add(self._input[lo:hi], incoming, out=self.buf[lo:hi])
        else:
            self.buf[lo:hi] = incoming
        self.received += 1
        if step + 1 < self.steps:
            return [self.buf[lo:hi].tobytes()]
        return []


class RingOnNic:
    """`RingAllReduce` on the NIC: its messages become SENDs with data on `send_qpn`."""

    def __init__(self, spec: CollectiveSpec, rnic: Rnic, data: np.ndarray) -> None:
        if spec.send_qpn is None or spec.recv_qpn is None:
            raise ValueError(
                f"job {spec.job!r}: the ring needs send_qpn (to rank+1) and recv_qpn (from rank-1)"
            )
        if spec.send_qpn not in rnic.send_qps:
            raise ValueError(
                f"job {spec.job!r}: unknown QP send_qpn={spec.send_qpn}; "
                f"connected: {sorted(rnic.send_qps)}"
            )
        if spec.recv_qpn not in rnic.recv_qps:
            raise ValueError(
                f"job {spec.job!r}: unknown QP recv_qpn={spec.recv_qpn}; "
                f"connected: {sorted(rnic.recv_qps)}"
            )
        self.rnic = rnic
        self.send_qpn, self.recv_qpn = spec.send_qpn, spec.recv_qpn
        self.recv_qpns = (spec.recv_qpn,)
        self.tx_qpns = (spec.send_qpn,)
        self.ring = RingAllReduce(spec.rank, spec.nranks, data, spec.slice_bytes)

    @property
    def done(self) -> bool:
        return self.ring.done

    @property
    def result(self) -> np.ndarray:
        return self.ring.result

    def _post(self, messages: list[bytes], now: float) -> None:
        for m in messages:
            self.rnic.post_send(self.send_qpn, len(m), now, data=m)

    def start(self, now: float) -> None:
        self._post(self.ring.start(), now)

    def on_message(self, qpn: int, data: bytes, now: float) -> None:
        if qpn != self.recv_qpn:
            raise ValueError(f"message on QP {qpn}; the ring receives on {self.recv_qpn}")
        self._post(self.ring.on_message(data), now)
