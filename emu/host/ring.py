"""The ring all-reduce and its two phases: one rank's pure algorithm, and the same on the NIC.

Owns `RingAllReduce`, the ring all-reduce of one rank as a pure state
machine (no sockets, no clock): reduce-scatter then all-gather, every chunk
cut into slices that are pipelined as NCCL does; it says what to send and
consumes what arrives. Either phase also runs alone (`PHASES`), as a job of
its own: a hierarchical all-reduce reduce-scatters inside a node, all-reduces
across nodes and all-gathers inside the node. And `RingOnNic`, the
collective algorithm a host agent runs for "ring", "reduce_scatter" and
"all_gather" (emu/host/collective.py, ALGORITHMS; `ALGO_PHASES`): the ring's
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

from emu.host.data import DTYPES, chunk_bounds, dtype_name

if TYPE_CHECKING:
    from emu.host.collective import CollectiveSpec
    from emu.host.rnic import Rnic

DEFAULT_SLICE_BYTES = 64 * 1024  # bytes per pipelined message (a few NCCL_STEPS of 8-16 KiB)
MAX_SLICE_BYTES = 16 << 20  # a message must fit in the receiver's inbox (rnic.inbox_max_bytes)

#: What a ring runs: the whole all-reduce, or one of its two phases alone.
PHASES = ("all", "reduce_scatter", "all_gather")
#: The collective algorithms (emu/host/collective.py, ALGORITHMS) that are this ring, by phase.
ALGO_PHASES = {"ring": "all", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather"}


class RingAllReduce:
    """Ring all-reduce (sum) of one rank, chunked and pipelined; pure.

    The array is cut into `nranks` near-equal chunks (chunk c holds elements
    [c*L/n, (c+1)*L/n) rounded down: `emu.host.data.chunk_bounds`); every
    chunk into the same number of near-equal slices, each at most
    `slice_bytes`. Step k = 0..n-2 is the reduce-scatter: rank r sends chunk
    (r-k) mod n and receives chunk (r-k-1) mod n, which it adds into its
    copy; steps n-1..2n-3 are the all-gather, the same pattern copying
    finished chunks. Messages from the previous rank arrive in order (one RC
    QP), so the m-th received message is step m // nslices, slice m %
    nslices: it is reduced (or copied) and, unless it was the last step, sent
    on at once as the next step's slice. That is the pipeline: a rank
    forwards slice s of step k+1 while slice s+1 of step k is still on the
    wire. Empty slices (fewer elements than ranks x slices) are sent as empty
    messages so that every rank counts the same.

    A phase alone runs the same steps, sliced and pipelined the same way.
    "reduce_scatter" is steps 0..n-2: rank r ends with chunk (r+1) mod n
    fully reduced, and `result` is that chunk alone. "all_gather" is steps
    n-1..2n-3 on the inputs: rank r owns chunk (r+1) mod n (where the
    reduce-scatter leaves it), copies it from its input and sends it first,
    and at all-gather step k receives chunk (r-k) mod n; `result` is the
    whole array, chunk c from rank (c-1) mod n's input. With one rank there
    is nothing to send: either phase's result is the input.

    Args:
        rank: this rank, 0..nranks-1; it sends to rank+1 and receives from rank-1.
        nranks: ranks in the ring (>= 1).
        data: the local input, a 1-D int32 or float32 array (not modified:
            out of place, as nccl-tests' default).
        slice_bytes: the largest message, in bytes.
        phase: "all" (the all-reduce), "reduce_scatter" or "all_gather" (`PHASES`).

    Raises:
        ValueError: a rank out of range, a bad array, slice size or phase.

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

        The phases alone, on the same inputs (chunks [0, 1), [1, 3), [3, 5)):

        >>> def run(phase):
        ...     ring = [RingAllReduce(r, 3, xs[r], 4, phase) for r in range(3)]
        ...     wires = [deque(ring[r].start()) for r in range(3)]
        ...     while any(wires):
        ...         for r in range(3):
        ...             if wires[r]:
        ...                 nxt = (r + 1) % 3
        ...                 wires[nxt].extend(ring[nxt].on_message(wires[r].popleft()))
        ...     return [ring[r].result.tolist() for r in range(3)]
        >>> run("reduce_scatter")  # rank r: chunk r+1 of the sum
        [[6, 12], [18, 24], [0]]
        >>> run("all_gather")  # chunk c from rank c-1: [0], 1 x [1, 2], 2 x [3, 4]
        [[0, 1, 2, 6, 8], [0, 1, 2, 6, 8], [0, 1, 2, 6, 8]]
    """

    def __init__(
        self,
        rank: int,
        nranks: int,
        data: np.ndarray,
        slice_bytes: int = DEFAULT_SLICE_BYTES,
        phase: str = "all",
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
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r}: allowed {list(PHASES)}")
        self.rank, self.nranks, self.phase = rank, nranks, phase
        # The chunk this rank holds reduced after the reduce-scatter, and sends
        # first in the all-gather.
        self.owned_chunk = (rank + 1) % nranks
        # The input stays as it was. The working copy is not made here: copying 16 MB
        # into fresh pages took ~17 ms of a NIC agent's loop (page faults) while the
        # other ranks sent to it. Each slice is written the first time the ring
        # touches it instead (`on_message`): a chunk received in the reduce-scatter
        # is input + incoming, the rank's own chunk is first written in the all-gather
        # (an all-gather alone copies its owned chunk from the input at `start`).
        self._input = np.asarray(data, dtype=self.dtype)
        if nranks == 1:
            self.buf = self._input.copy()
        else:
            self.buf = np.empty_like(self._input)
        chunks = [chunk_bounds(self.buf.size, nranks, c) for c in range(nranks)]
        largest = max(hi - lo for lo, hi in chunks)
        slice_elems = slice_bytes // self.dtype.itemsize
        self.nslices = max(1, -(-largest // slice_elems))
        self._slices = [
            [
                (
                    lo + s * (hi - lo) // self.nslices,
                    lo + (s + 1) * (hi - lo) // self.nslices,
                )
                for s in range(self.nslices)
            ]
            for lo, hi in chunks
        ]
        # The phase runs steps [first_step, end_step) of the all-reduce's 0..2n-3.
        self._first_step = nranks - 1 if phase == "all_gather" else 0
        self._end_step = nranks - 1 if phase == "reduce_scatter" else 2 * (nranks - 1)
        self.steps = self._end_step - self._first_step
        self.messages_expected = self.steps * self.nslices
        self.received = 0
        self.started = False

    @property
    def done(self) -> bool:
        """Every message of every step received (at once for a single rank)."""
        return self.started and self.received == self.messages_expected

    @property
    def result(self) -> np.ndarray:
        """The reduced (gathered) array; for a reduce-scatter only chunk `owned_chunk`.

        Complete once `done`.
        """
        if self.phase == "reduce_scatter":
            lo, hi = self.chunk_bounds(self.owned_chunk)
            return self.buf[lo:hi]
        return self.buf

    def chunk_bounds(self, chunk: int) -> tuple[int, int]:
        """[lo, hi) element indices of chunk `chunk`."""
        sl = self._slices[chunk]
        return sl[0][0], sl[-1][1]

    def start(self) -> list[bytes]:
        """The first step's messages, to send to rank+1 in this order.

        The slices of chunk `rank` (all-reduce, reduce-scatter), or of chunk
        `owned_chunk` (all-gather alone), from the input.

        Raises:
            ValueError: started twice.
        """
        if self.started:
            raise ValueError(f"rank {self.rank}: the ring all-reduce was started already")
        self.started = True
        if self.nranks == 1:
            return []
        chunk = self.rank
        if self.phase == "all_gather":
            chunk = self.owned_chunk
            lo, hi = self.chunk_bounds(chunk)
            self.buf[lo:hi] = self._input[lo:hi]
        return [self._input[lo:hi].tobytes() for lo, hi in self._slices[chunk]]

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
        step += self._first_step
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
        if step + 1 < self._end_step:
            return [self.buf[lo:hi].tobytes()]
        return []


class RingOnNic:
    """`RingAllReduce` on the NIC: its messages become SENDs with data on `send_qpn`.

    The phase is the job's algorithm's (`ALGO_PHASES`): "ring" is the
    all-reduce, "reduce_scatter" and "all_gather" its phases alone.
    """

    def __init__(self, spec: CollectiveSpec, rnic: Rnic, data: np.ndarray) -> None:
        if spec.algo not in ALGO_PHASES:
            raise ValueError(
                f"job {spec.job!r}: algo={spec.algo!r} is not a ring: {list(ALGO_PHASES)}"
            )
        if spec.send_qpn is None or spec.recv_qpn is None:
            raise ValueError(
                f"job {spec.job!r}: the ring needs send_qpn (to rank+1) and recv_qpn (from rank-1)"
            )
        if spec.send_qpn not in rnic.qpns:
            raise ValueError(
                f"job {spec.job!r}: unknown QP send_qpn={spec.send_qpn}; "
                f"connected: {sorted(rnic.qpns)}"
            )
        if spec.recv_qpn not in rnic.qpns:
            raise ValueError(
                f"job {spec.job!r}: unknown QP recv_qpn={spec.recv_qpn}; "
                f"connected: {sorted(rnic.qpns)}"
            )
        self.rnic = rnic
        self.send_qpn, self.recv_qpn = spec.send_qpn, spec.recv_qpn
        self.recv_qpns = (spec.recv_qpn,)
        self.tx_qpns = (spec.send_qpn,)
        self.ring = RingAllReduce(
            spec.rank, spec.nranks, data, spec.slice_bytes, ALGO_PHASES[spec.algo]
        )

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
