/* The compiled RoCE NIC engine: shared structures.
 *
 * One structure per owner, as for the switch's C path (emu/switch/csrc/fp.h):
 *   nic_wire.c    bytes of a frame: CRC-32 (the ICRC), RoCEv2 data, ACK/NAK and
 *                 CNP frames built from a queue pair's header, RoCEv2 and PFC
 *                 parsing (emu/proto/roce.py, emu/proto/pfc.py are the reference)
 *   nic_dcqcn.c   DCQCN's reaction point and notification point
 *                 (emu/host/dcqcn.py)
 *   nic_engine.c  the transport: queue pairs, segmentation, PSNs, NAKs
 *                 received, go-back-N, go-back-0 and selective retransmission,
 *                 the RTO and RNR timers, pacing at the link and DCQCN rates,
 *                 PAUSE honoured and sent, the receive buffer, the fidelity
 *                 clock (emu/host/rnic.py, emu/fidelity.PortClock)
 *   nic_responder.c  a data packet at its QP: ACK coalescing, NAK, RNR NAK,
 *                 duplicates, reassembly, out-of-order placement
 *                 (emu/host/responder.py)
 *   nic_reorder.c "selective" loss recovery: the responder's reorder window
 *                 (out-of-order placement, the gap's age, the NAKs of holes
 *                 found lost) and the requester's PSNs to resend
 *                 (emu/host/reorder.py, rnic.py)
 *   nic_credit.c  the credit link instead of PFC: IBA's per-VL link flow control
 *                 (emu/credit.py's CreditLink), its flow control frames
 *                 (emu/proto/credit.py), and the control frames that wait for
 *                 credit (rnic.py's ctrl_q)
 *   nic_module.c  the Python type (emu/host/nicpath.py drives it)
 *
 * The Python modules named above are the specification: a differential test
 * (tests/unit/test_nic_differential.py) drives both on the same scripted
 * losses, reorderings, PAUSEs and CNPs and requires the same frames and
 * counters. Times are seconds (doubles), as in Python; PSNs are unbounded
 * (int64) inside and 24-bit on the wire. Every length read from a frame is
 * checked against what was received.
 */
#ifndef EMU_NIC_H
#define EMU_NIC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "loopmon.h"
#include <stdint.h>
#include <stddef.h>
#include <poll.h>

#define NIC_PRIOS 8
#define NIC_ACK_EVERY 4              /* rnic.ACK_EVERY */
#define NIC_MAX_OUTSTANDING 512      /* rnic.MAX_OUTSTANDING_PACKETS */
#define NIC_DATA_PRIO 3              /* rnic.DATA_PRIO */
#define NIC_WIRE_CATCH_UP_S 0.001    /* rnic.WIRE_CATCH_UP_S */
#define NIC_INBOX_OVERHEAD 64        /* rnic.INBOX_MESSAGE_OVERHEAD_BYTES */
#define NIC_MIN_RNR_TIMER 12         /* rnic.MIN_RNR_TIMER */
#define NIC_MAX_PAYLOAD 9216         /* roce.MAX_PAYLOAD_BYTES */
#define NIC_MAX_FRAME (NIC_MAX_PAYLOAD + 128)
#define NIC_HDR_BYTES 42             /* Ethernet + IPv4 + UDP, up to the BTH */
#define NIC_HIST 8                   /* fidelity.EDGES + 1 */
#define NIC_FRAME_BYTES 1514         /* fidelity.FRAME_BYTES */
#define NIC_EARLY_FRAMES 0.25        /* fidelity.EARLY_FRAMES */
#define NIC_PFC_FRAME_BYTES 60
#define NIC_FC_FRAME_BYTES 60        /* credit.FC_FRAME_BYTES */
#define NIC_FC_ETHERTYPE 0x88B5      /* credit.ETH_TYPE_IB_FC */
#define NIC_BLOCK_BYTES 64           /* credit.BLOCK_BYTES */
#define NIC_COUNTER_MOD 4096         /* credit.COUNTER_MOD */
#define NIC_MAX_CREDIT_BLOCKS 2048   /* credit.MAX_CREDIT_BLOCKS */
#define NIC_NAKS_PER_ROUND 32        /* reorder.NAKS_PER_ROUND */

/* loss recovery (rnic.LOSS_RECOVERY) */
enum { NIC_GO_BACK_N = 0, NIC_GO_BACK_0 = 1, NIC_SELECTIVE = 2 };

/* BTH opcodes and AETH syndromes (roce.py) */
enum {
    OP_SEND_FIRST = 0x00, OP_SEND_MIDDLE = 0x01, OP_SEND_LAST = 0x02, OP_SEND_ONLY = 0x04,
    OP_WRITE_FIRST = 0x06, OP_WRITE_MIDDLE = 0x07, OP_WRITE_LAST = 0x08, OP_WRITE_ONLY = 0x0A,
    OP_ACK = 0x11, OP_CNP = 0x81,
};
#define AETH_ACK 0x00
#define AETH_RNR_NAK 0x20
#define AETH_NAK 0x60
#define AETH_NAK_PSN_SEQ_ERROR 0x60
#define AETH_CREDIT_INVALID 0x1F
#define AETH_KIND_MASK 0x60
#define ECN_CE 3
#define PSN_MASK 0xFFFFFFu
#define PSN_HALF (1 << 23)

/* ----- frames (nic_wire.c) ---------------------------------------------------- */

/* The constant parts of one direction's Ether/IPv4/UDP header (roce._Header). */
typedef struct {
    uint8_t hdr[NIC_HDR_BYTES];   /* lengths and checksums zero */
    uint8_t masked[28];           /* IPv4 + UDP as the ICRC sees them, lengths zero */
    uint32_t ip_sum;              /* ones' sum of the IPv4 header, length and checksum 0 */
    uint32_t becn;                /* 1 << 30 for CNPs */
} nic_hdr;

int nic_hdr_init(nic_hdr *h, const uint8_t *raw, size_t len, int becn);
uint32_t nic_crc32(uint32_t crc, const uint8_t *p, size_t n);
/* A frame into `out` (NIC_MAX_FRAME bytes); returns its length. `payload` NULL: pattern. */
size_t nic_build(const nic_hdr *h, uint8_t *out, int opcode, uint32_t dqpn, uint32_t apsn,
                 const uint8_t *ext, size_t ext_len, const uint8_t *payload, size_t payload_len);
size_t nic_build_ack(const nic_hdr *h, uint8_t *out, uint32_t dqpn, uint32_t psn, uint32_t msn,
                     int syndrome);
size_t nic_build_cnp(const nic_hdr *h, uint8_t *out, uint32_t dqpn);

typedef struct {
    int opcode;
    uint32_t dest_qp, psn;
    int ack_req, ecn;
    int syndrome;                 /* ACKNOWLEDGE only */
    uint32_t msn;
    size_t payload_offset, payload_len;
} nic_roce;

int nic_parse_roce(const uint8_t *f, size_t n, nic_roce *out);   /* 1: a RoCEv2 frame */
int nic_is_mac_control(const uint8_t *f, size_t n);
/* 1: PFC or PAUSE decoded into vector and quanta[8] (pfc.parse). */
int nic_parse_pfc(const uint8_t *f, size_t n, int *vector, uint16_t quanta[8]);
size_t nic_build_pfc(const uint8_t tmpl[NIC_PFC_FRAME_BYTES], uint8_t *out, int prio,
                     uint16_t quanta);

/* ----- DCQCN (nic_dcqcn.c) ----------------------------------------------------- */

typedef struct {
    double line_rate_bps, min_rate_bps, rate_ai_bps, rate_hai_bps;
    double alpha_period_s, increase_period_s, cnp_interval_s;
    int64_t byte_counter_bytes;
    double g, alpha_init;
    int64_t fast_recovery_steps;
} nic_dcqcn;

typedef struct {
    const nic_dcqcn *p;
    double rc, rt, alpha, now;
    int64_t timer_stage, byte_stage, bytes_since_event;
    double inc_anchor, alpha_anchor;
    int64_t inc_n, alpha_n;
    int64_t cnps_received, rate_decreases, alpha_decays, timer_events, byte_events;
    int64_t inc_fast, inc_additive, inc_hyper;
} nic_rp;

void nic_rp_init(nic_rp *rp, const nic_dcqcn *p, double now);
double nic_rp_next_event_at(const nic_rp *rp);   /* NAN: none */
void nic_rp_advance(nic_rp *rp, double now);
void nic_rp_on_bytes_sent(nic_rp *rp, int64_t size, double now);
void nic_rp_on_cnp(nic_rp *rp, double now);

/* Frames produced by one call, in order. */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
    size_t *ends;                 /* end offset of each frame */
    size_t count, ends_cap;
} nic_out;

/* ----- the credit link (nic_credit.c) ------------------------------------------ */

/* Both directions of one virtual lane at this end (credit.VlCredit). */
typedef struct {
    int64_t fctbs;                /* blocks sent (unbounded) */
    int has_limit;
    int64_t limit;                /* the peer's FCCL (12-bit) */
    int64_t waiting_blocks;
    double blocked_since;         /* NAN: no frame waits */
    double blocked_s, unblocked_at;
    int64_t blocked_count, tx_frames;
    int64_t abr;                  /* blocks received, resynced by the peer's FCTBS */
    int has_advertised;
    int64_t advertised;           /* FCCL last sent (unbounded) */
    double next_refresh;
    int64_t rx_frames, overruns, abr_resyncs, fc_tx, fc_rx;
} nic_vl;

typedef struct {
    int enabled;
    int nvls, vls[NIC_PRIOS];     /* the credit VLs, in the spec's order */
    int is_vl[NIC_PRIOS];
    nic_vl vl[NIC_PRIOS];         /* indexed by priority; used where is_vl */
    int64_t capacity_blocks, capacity_bytes, update_blocks;
    double refresh_s;
    uint8_t fc_tmpl[NIC_FC_FRAME_BYTES];
    /* ACKs and NAKs on a credit VL waiting for credit, oldest first: frames
     * [ctrl_head, ctrl.count) of ctrl */
    nic_out ctrl;
    size_t ctrl_head;
    nic_out routed;               /* nic_credit_route's copy of a receive's replies, reused */
    int64_t fc_tx, fc_rx, overruns;
} nic_credit;

/* ----- the transport (nic_engine.c) -------------------------------------------- */

typedef struct {
    uint64_t id;
    int64_t size, first_psn, end_psn;
    double posted_at, completed_at;
    int write;
    uint64_t va;
    uint32_t rkey;
    uint8_t *data;                /* a copy of the posted bytes; NULL: the pattern */
} nic_msg;

typedef struct {
    int64_t msn;
    size_t len;
    uint8_t *data;
} nic_inbox_msg;

/* The packets one responder QP holds beyond its expected PSN (reorder.ReorderWindow):
 * slot psn % window of each array; every held PSN lies in (expected, expected + window). */
#define NIC_OOO_HELD 1
#define NIC_OOO_ACK_REQ 2
#define NIC_OOO_END 4
#define NIC_OOO_DATA 8
typedef struct {
    int64_t window;
    uint8_t *flags;               /* NIC_OOO_* per slot */
    double *at;                   /* arrival time per slot */
    uint32_t *len;                /* payload bytes per slot */
    uint8_t *data;                /* window x mtu payload bytes (QPs that deliver data); NULL */
    int64_t mtu;                  /* the size of a slot in `data` */
    int64_t held, hi;             /* how many are held; one past the highest held PSN */
    int64_t data_bytes;
    double gap_since, round_at;   /* NAN: none */
} nic_ooo;

typedef struct {
    uint32_t qpn, peer_qpn;
    nic_hdr data_hdr, cnp_hdr;
    int has_rp;
    nic_rp rp;
    double max_rate_bps;          /* 0: none */
    int prio;
    /* requester */
    int64_t next_psn, una, end_psn, freed;
    double next_tx_at, ready_since, last_progress;
    nic_msg *msgs;                /* a ring of the unfinished messages, oldest first */
    size_t msg_head, msg_count, msg_cap;
    double *sent_at;              /* psn & (sa_cap - 1) -> when last sent; NAN: never */
    size_t sa_cap;
    int64_t sa_hi;                /* one past the highest PSN recorded */
    double *completed;            /* 4 doubles a completion: id, size, posted, completed */
    size_t completed_count, completed_cap;
    int64_t tx_packets, tx_bytes, tx_payload_bytes, rnr_naks, retransmitted, naks, timeouts,
        cnps;
    int64_t *resend;              /* "selective": PSNs NAKed, to resend, ascending */
    size_t resend_n;              /* at most NIC_MAX_OUTSTANDING */
    /* responder */
    int64_t expected, msg_first, msg_bytes, msn;
    int nak_sent, deliver_data;
    int64_t rx_packets, rx_bytes, out_of_order, duplicates, ce_marked, messages_received,
        rnr_naks_sent, discarded_packets, discarded_bytes, naks_sent, reorder_depth_max,
        beyond_window;
    nic_ooo ooo;                  /* "selective" only (flags NULL otherwise) */
    uint8_t *parts;               /* payload of the message being received */
    size_t parts_len, parts_cap;
    nic_inbox_msg *inbox;
    size_t inbox_head, inbox_count, inbox_cap;
    int64_t inbox_bytes;
    double last_cnp_at;           /* NAN: none (the NP's per-QP state) */
} nic_qp;

typedef struct nic_engine {
    double rate_bps, rto_s;
    double rnr_s[32];             /* the RNR timer codes in emulated seconds (rnic._rnr_s) */
    int64_t mtu_payload;
    int go_back_0, selective;
    int64_t ooo_window;           /* rnic.NicConfig.ooo_window_packets */
    double reorder_s;             /* rnic.reorder_timeout_s */
    int dcqcn;
    nic_dcqcn dcqcn_p;
    int64_t rx_buffer_bytes, rx_xoff_bytes, rx_xon_bytes, inbox_max_bytes;
    double drain_rate_bps;        /* < 0: None (the host consumes at once) */
    int pfc_quanta;
    uint8_t pfc_tmpl[NIC_PFC_FRAME_BYTES];
    nic_qp **qps;                 /* in connect order */
    int nqps, qps_cap, rr;
    double free_at;
    double paused_until[NIC_PRIOS], paused_s[NIC_PRIOS];
    int64_t pause_rx, pause_tx, cnps_sent, rx_overflow;
    double rx_buffer, rx_drained_at, next_pause_refresh;
    int xoff, stuck;
    uint64_t msg_ids;
    int64_t np_ce_received, np_cnps_sent, np_cnps_suppressed;
    /* fidelity.PortClock */
    double frame_s, edges_s[NIC_HIST - 1];
    int64_t hist[NIC_HIST], frames;
    double max_late_s, deficit_s, busy_s, last_wire_s;
    int last_bucket;
    nic_credit credit;            /* enabled: credit flow control instead of PFC */
    uint8_t scratch[NIC_MAX_FRAME];
} nic_engine;

void nic_clock_init(nic_engine *e, double rate_bps);
void nic_clock_reset(nic_engine *e);
nic_qp *nic_qp_find(nic_engine *e, uint32_t qpn);
nic_qp *nic_connect(nic_engine *e, uint32_t qpn, uint32_t peer_qpn, double now,
                    double max_rate_bps, int prio);
void nic_qp_free(nic_qp *qp);
/* 0, or -1 out of memory. */
int nic_post(nic_engine *e, nic_qp *qp, int64_t size, double now, int write, uint64_t va,
             uint32_t rkey, const uint8_t *data, uint64_t *msg_id);
/* The next data frame into out (1), or none (0); -1 out of memory. */
int nic_next_frame(nic_engine *e, double now, nic_out *out);
int nic_may_send(const nic_engine *e, double now);
void nic_use_wire(nic_engine *e, size_t size, double now, double ready_at);
double nic_next_wakeup(nic_engine *e, double now);   /* NAN: nothing to send */
int nic_receive(nic_engine *e, const uint8_t *f, size_t n, double now, nic_out *out);
int nic_tick(nic_engine *e, double now, nic_out *out);
double nic_next_tick(nic_engine *e);                 /* NAN: none */
void nic_drain(nic_engine *e, double now);
/* the wire's virtual clock (nic_engine.c): a frame of `size` bytes leaves at `now` */
void nic_wire(nic_engine *e, size_t size, double now);

/* nic_responder.c: a data packet at its QP (responder.py `_on_data`); "selective": the
 * NAKs of the holes a persisting gap shows lost (`_lost_naks`). */
int nic_on_data(nic_engine *e, const nic_roce *r, const uint8_t *f, size_t size, double now,
                nic_out *out);
int nic_lost_naks(nic_engine *e, nic_qp *qp, double now, nic_out *out);
/* nic_engine.c: PAUSE out of this NIC when the host cannot keep up (rnic._rx_pfc). */
int nic_rx_pfc(nic_engine *e, double now, nic_out *out);

/* A 24-bit PSN as the unbounded one nearest `near` (rnic._unwrap). */
static inline int64_t nic_unwrap(uint32_t psn24, int64_t near)
{
    int64_t d = (((int64_t)psn24 - (near & PSN_MASK) + PSN_HALF) & PSN_MASK) - PSN_HALF;
    return near + d;
}

/* nic_reorder.c: the responder's window (allocated at connect; its payload slots when
 * the QP starts delivering data), and the requester's resend set. 0, or -1 out of memory. */
int nic_ooo_init(nic_ooo *o, int64_t window);
int nic_ooo_alloc_data(nic_ooo *o, int64_t mtu);
void nic_ooo_drop_data(nic_ooo *o);
void nic_ooo_free(nic_ooo *o);
int nic_ooo_is_held(const nic_ooo *o, int64_t psn);
void nic_ooo_place(nic_ooo *o, int64_t psn, double now, int ack_req, int end,
                   const uint8_t *payload, size_t len, int keep);
/* 1: `psn` was held; its flags, payload length and payload (NULL: none) out; removed. */
int nic_ooo_pop(nic_ooo *o, int64_t psn, int *flags, size_t *len, const uint8_t **data);
void nic_ooo_settle(nic_ooo *o, int64_t expected);
double nic_ooo_due(const nic_ooo *o, double timeout_s);  /* NAN: no gap */
/* The holes found lost now into holes[NIC_NAKS_PER_ROUND]; how many. */
size_t nic_ooo_lost(nic_ooo *o, int64_t expected, double now, double timeout_s,
                    int64_t *holes);
int nic_resend_add(nic_qp *qp, int64_t psn);   /* 1 added, 0 already there or full */
void nic_resend_purge(nic_qp *qp);             /* drop the PSNs below una */

/* nic_credit.c: set up the credit link, and free it. */
/* The sizes are credit.CreditLink's (nicpath.py builds one for them). */
void nic_credit_init(nic_engine *e, const int *vls, int nvls, int64_t capacity_blocks,
                     int64_t update_blocks, double refresh_s,
                     const uint8_t tmpl[NIC_FC_FRAME_BYTES], double now);
void nic_credit_free(nic_engine *e);
int nic_is_flow_control(const uint8_t *f, size_t n);
int nic_prio_of(const uint8_t *f, size_t n);           /* rnic._prio_of */
int nic_credit_blocks(const nic_credit *c, int vl);
int nic_credit_blocked(const nic_credit *c, int prio);
/* credit.may_send / sent for a frame of `size` bytes on `prio` (a credit VL). */
int nic_credit_may_send(nic_credit *c, int prio, size_t size, double now);
void nic_credit_sent(nic_credit *c, int prio, size_t size);
double nic_credit_unblocked_at(const nic_credit *c, int prio);
/* rnic.credit_rx: 1 when the frame fits the credit given (or is on no credit VL). */
int nic_credit_rx(nic_engine *e, const uint8_t *f, size_t n);
/* A flow control frame received: its credit, then the control frames it lets go. */
int nic_credit_on_frame(nic_engine *e, const uint8_t *f, size_t n, double now, nic_out *out);
/* ACKs and NAKs produced by a receive: those on a credit VL queue behind the others. */
int nic_credit_route(nic_engine *e, nic_out *out, size_t first, double now);
int nic_credit_flush(nic_engine *e, double now, int charge_wire, nic_out *out);
int nic_credit_due(nic_engine *e, double now, nic_out *out);
double nic_credit_next_due(const nic_credit *c);
size_t nic_credit_waiting(const nic_credit *c);

/* ----- the agent's loop (nic_loop.c) ---------------------------------------------- */

/* One engine's part of a loop: its port and what the loop counts for it. */
typedef struct {
    int fd;                       /* the host port's AF_PACKET socket; -1: none yet */
    int takers;                   /* a collective takes non-RoCE frames */
    int64_t tx_errors, tx_frames;
    emu_loopmon mon;
} nic_loop_state;

/* The engines one loop serves (nic_loop.c), and Python's sockets. */
typedef struct {
    int n;
    nic_engine **e;
    nic_loop_state **s;
    nic_out **out;
    int ep_ports;                 /* epoll set of the n ports' sockets (data: engine index) */
    int ep_py;                    /* epoll set of Python's sockets (data: fd) */
    int npy;                      /* how many sockets Python asked the loop to watch */
    int64_t wakeups;
} nic_group;

/* Run until the callback returns < 0 (None) or raises (NULL). */
PyObject *nic_run(nic_group *g, PyObject *cb);

int nic_out_add(nic_out *o, const uint8_t *f, size_t n);
void nic_out_clear(nic_out *o);
void nic_out_free(nic_out *o);

#endif
