/* The compiled per-frame path of the emu switch: shared structures.
 *
 * One structure per owner, as in OVS's dpif-netdev:
 *   fp_frame.c   bytes of a frame: the exact-match key, PFC parsing, rewrites
 *                with incremental checksums (emu/switch/parse.py, rewrite.py,
 *                emu/proto/pfc.py are the reference)
 *   fp_buffer.c  the shared buffer: admission, PFC XOFF/XON, ECN (buffer.py)
 *   fp_sched.c   the 8 queues of a port, strict priority, pacing, PAUSE
 *                honoured, the fidelity clock (scheduler.py, fidelity.py)
 *   fp_cache.c   the exact-match cache and its compiled action lists
 *                (pipeline.py's microflow cache, in C)
 *   fp_meter.c   the token buckets of the meters cached programs name
 *                (meter.py)
 *   fp_ar.c      per-packet adaptive routing: the choice among a group's
 *                buckets by queued bytes and PFC pauses, its counters
 *                (adaptive.py)
 *   fp_switch.c  one switch: its ports' receive rings, the per-frame receive
 *                path, enqueue, batched transmit (datapath.py)
 *   fp_loop.c    the loop that serves every switch of a process without the
 *                GIL, and its stall meter (loop.py, fidelity.LoopMonitor)
 *   fp_module.c  the Python types (emu/switch/fastpath.py drives them)
 *
 * The Python modules named above are the specification: a differential test
 * (tests/unit/test_fastpath_differential.py) feeds both the same frames.
 * Every length read from a frame is checked against what was received.
 */
#ifndef EMU_FP_H
#define EMU_FP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "loopmon.h"
#include <stdint.h>
#include <stddef.h>
#include <sys/socket.h>

#define FP_PRIOS 8
#define FP_MAX_PORT_NO 4096       /* port numbers the direct index covers */
#define FP_MAX_FRAME 16384        /* longest frame the C path queues */
#define FP_TX_BATCH 32            /* frames per sendmmsg */
#define FP_RX_BATCH 64            /* frames read from one port per pass */
#define FP_CACHE_MAX 65536        /* entries, as pipeline._CACHE_MAX */
#define FP_KEY_BYTES 34           /* in_port (2) + the 32 header bytes */
#define FP_HIST 8                 /* fidelity.EDGES + 1 */
#define FP_AGG_PORT 0xFFFFFF00u   /* emu.proto.ofext.AGG_PORT */
#define FP_AR_MAX_OPTIONS 64      /* buckets an adaptive op chooses among */
#define FP_MAX_ARMS 65536         /* bucket counter slots of adaptive ops */

/* Drop causes (buffer.py DROP_*) */
enum { FP_DROP_LOSSY, FP_DROP_HEADROOM, FP_DROP_LOSSLESS_NO_PFC, FP_DROP_CAUSES };
enum { FP_SHARED = 0, FP_HEADROOM = 1 };

/* ----- MT19937, so that ECN and loss draws equal Python's random.Random ----- */
typedef struct {
    uint32_t mt[624];
    int index;
} fp_mt;

double fp_mt_random(fp_mt *r);

/* ----- a queued frame ------------------------------------------------------- */
typedef struct fp_frame {
    struct fp_frame *next;
    double queued_at;
    uint32_t len;
    uint32_t in_port;
    uint8_t prio;
    uint8_t charge;
    uint8_t cls;        /* its slot size (fp_pool) */
    uint8_t data[];
} fp_frame;

typedef struct {
    fp_frame *head, *tail;
} fp_fifo;

/* Queued frames live in slots of a few sizes (128, 256, 512, 1024 bytes and
 * the longest frame), so that a buffer full of 64-byte frames does not hold
 * a full-size slot each; each size's slots are bounded by what the shared
 * buffer's bytes allow of frames that small. */
#define FP_POOL_CLASSES 5
typedef struct {
    fp_frame *free;
    size_t slot_bytes;  /* data bytes a slot holds */
    size_t slots, max_slots;
} fp_pool_class;

typedef struct {
    fp_pool_class cls[FP_POOL_CLASSES];
    size_t slot_bytes;  /* the largest */
    size_t slots;
    void **chunks;
    size_t nchunks;
} fp_pool;

/* ----- fidelity.PortClock --------------------------------------------------- */
typedef struct {
    double rate_bps, frame_s, edges_s[FP_HIST - 1];
    uint64_t hist[FP_HIST];
    uint64_t frames;
    double max_late_s, deficit_s, busy_s;
    int last_bucket;
    double last_wire_s;
} fp_clock;

void fp_clock_init(fp_clock *c, double rate_bps);
void fp_clock_set_rate(fp_clock *c, double rate_bps);
void fp_clock_reset(fp_clock *c);
int fp_clock_departed(fp_clock *c, double now, double slot, double wire_s);
void fp_clock_undo(fp_clock *c, int bucket, double wire_s);

/* ----- scheduler.QueueCounters / PortScheduler ------------------------------ */
typedef struct {
    uint64_t enqueued_packets, enqueued_bytes, tx_packets, tx_bytes;
    uint64_t dropped_packets, dropped_bytes, watermark_bytes;
} fp_qctr;

typedef struct {
    double free_at, queued_at, lost;
    int bucket;
    double wire_s;
} fp_undo;

typedef struct {
    double rate_bps, s_per_byte, burst_s, burst_floor_s, early_s, free_at;
    uint64_t queue_limit_bytes;
    fp_fifo q[FP_PRIOS];
    int64_t depth[FP_PRIOS];
    fp_qctr c[FP_PRIOS];
    double paused_until[FP_PRIOS], paused_s[FP_PRIOS], pauses_end;
    uint32_t pending;
    uint8_t nonempty;
    fp_clock clock;
} fp_sched;

void fp_sched_init(fp_sched *s, double rate_bps);
void fp_sched_set_rate(fp_sched *s, double rate_bps);
int fp_sched_enqueue(fp_sched *s, fp_frame *f, double now);
void fp_sched_pause(fp_sched *s, int prio, double until, double now);
double fp_sched_ready_at(const fp_sched *s); /* < 0: nothing queued */
fp_frame *fp_sched_dequeue(fp_sched *s, double now, fp_undo *undo);
void fp_sched_requeue_front(fp_sched *s, fp_frame *f, const fp_undo *undo);
double fp_sched_paused_so_far(const fp_sched *s, int prio, double now);

/* ----- one port ------------------------------------------------------------- */
typedef struct {
    uint64_t rx_packets, tx_packets, rx_bytes, tx_bytes;
    uint64_t rx_dropped, tx_dropped, rx_errors, tx_errors;
} fp_pctr;
#define FP_PCTR_FIELDS 8

typedef struct fp_port {
    struct fp_switch *sw;
    uint32_t port_no;
    int fd;              /* -1: capture mode (tests): frames go to `captured` */
    uint8_t hw[6];
    double rate_bps;     /* PortState.rate_bps: PAUSE quanta convert at it */
    int recv_ok;         /* live and not OFPPC_NO_RECV */
    /* receive ring (TPACKET_V2) */
    uint8_t *ring;
    size_t ring_bytes;
    uint32_t slot_bytes, nslots, slot, per_block, block_bytes;
    int skip_outgoing;
    uint64_t truncated;
    /* counters */
    fp_pctr c;
    uint64_t pause_rx[FP_PRIOS];
    double last_pause_rx[FP_PRIOS];
    uint64_t pfc_tx_frames, lost_frames;
    /* the watchdog's isolation of a queue (datapath.wd_drop / wd_ignore_pause) */
    uint8_t wd_drop, wd_ignore_pause;
    /* a lossy link (fault) */
    double loss_p;
    uint32_t loss_every, loss_count;
    fp_sched sched;
    int busy;
    /* the shared buffer's view of this port (buffer.py, keyed by port) */
    int64_t ingress[FP_PRIOS], headroom_used[FP_PRIOS], egress[FP_PRIOS];
    int64_t headroom, kmin, kmax;
    uint8_t paused_upstream;        /* bit p: XOFF sent for (this port, p) */
    double refresh_at[FP_PRIOS];
    uint8_t pending_mask;           /* PFC frame content due on this port */
    uint16_t pending_quanta[FP_PRIOS];
    uint64_t marks[FP_PRIOS], xoff_sent[FP_PRIOS], xon_sent[FP_PRIOS];
    uint64_t drops_by_queue[FP_PRIOS], egress_watermark[FP_PRIOS];
    uint64_t ar_picks;              /* adaptive routing sent a packet here */
    /* frames captured in capture mode: a Python list of (prio, bytes) */
    PyObject *captured;
    uint8_t pfc_template[60];
} fp_port;

/* ----- compiled actions ----------------------------------------------------- */
enum {
    FP_OP_OUT,     /* port, queue (-1: none) */
    FP_OP_DEAD,    /* port (0: none): a dead port, counted */
    FP_OP_DECTTL,
    FP_OP_SET,     /* field, value */
    FP_OP_SUB,     /* sub_len ops follow: run on a copy of the frame */
    FP_OP_METER,   /* value: the meter's slot (fp_meter.c) */
    FP_OP_ADAPT,   /* adaptive routing (fp_ar.c): value the flow hash, queue the
                    * packet's priority, field the number of options; sub_len ops
                    * follow, that many FP_OP_ARMs each with its program */
    FP_OP_ARM,     /* one option of an FP_OP_ADAPT or FP_OP_UGAL: port its egress
                    * (0: none), value its bucket counter's slot, queue its bucket's
                    * weight (UGAL: 2 x path length, + 1 off the minimal path,
                    * 1..65535; ADAPT: unused, -1); sub_len ops follow */
    FP_OP_UGAL,    /* UGAL (fp_ar.c): as FP_OP_ADAPT, and port the bias in bytes
                    * a non-minimal option's cost carries */
    FP_OP_CODES
};
enum {
    FP_F_ETH_DST, FP_F_ETH_SRC, FP_F_IPV4_SRC, FP_F_IPV4_DST, FP_F_IP_DSCP,
    FP_F_IP_ECN, FP_F_TCP_SRC, FP_F_TCP_DST, FP_F_UDP_SRC, FP_F_UDP_DST,
    FP_F_NW_TTL, FP_F_COUNT
};

typedef struct {
    uint8_t code, field;
    uint16_t sub_len;
    int32_t queue;
    uint32_t port;
    uint64_t value;
} fp_op;

typedef struct {
    uint8_t key[FP_KEY_BYTES];
    uint32_t used;       /* 0: free slot */
    uint32_t id;         /* Python's handle for its counters */
    uint32_t op_off, op_len;
    uint64_t packets, bytes;
    double last_used;
} fp_entry;

typedef struct {
    fp_entry *slots;
    uint32_t nslots, count, next_id;
    fp_op *ops;
    uint32_t nops, ops_cap;
} fp_cache;

int fp_cache_init(fp_cache *c);
void fp_cache_free(fp_cache *c);
void fp_cache_clear(fp_cache *c);
fp_entry *fp_cache_lookup(fp_cache *c, const uint8_t *key);
fp_entry *fp_cache_insert(fp_cache *c, const uint8_t *key, const fp_op *ops, uint32_t n);

/* ----- adaptive routing's bucket counters (fp_ar.c, adaptive.py) -------------- */
typedef struct {
    int used;
    uint64_t packets, bytes;
    double last_used;
} fp_arm_ctr;

/* ----- meters (fp_meter.c, meter.py) ---------------------------------------- */
#define FP_MAX_BANDS 8        /* meter.MAX_BANDS */
#define FP_MAX_METERS 65536   /* slots; MeterTable holds at most 1,024 meters */
enum { FP_BAND_DROP = 1, FP_BAND_DSCP_REMARK = 2 };  /* OFPMBT_* */

typedef struct {
    uint8_t type, prec_level;
    double rate;          /* kbit/s or packets/s, as configured */
    double capacity, tokens;
    uint64_t packets, bytes;
} fp_band;

typedef struct {
    int used, pktps, nbands;
    double last;
    uint64_t packets_in, bytes_in;
    fp_band bands[FP_MAX_BANDS];   /* highest rate first (Meter.by_rate) */
} fp_meter;

/* ----- frame bytes (fp_frame.c) --------------------------------------------- */
int fp_fast_key(const uint8_t *f, size_t len, uint32_t in_port, uint8_t *key);
int fp_tos(const uint8_t *f, size_t len);  /* IPv4 TOS as _enqueue reads it, or -1 */
int fp_pfc_parse(const uint8_t *f, size_t len, uint8_t *vector, uint16_t *quanta);
int fp_is_rocev2(const uint8_t *f, size_t len);
void fp_set_ip_ecn(uint8_t *f, size_t len, int ecn);
size_t fp_apply_set(uint8_t *f, size_t len, int field, uint64_t value);
int fp_dec_nw_ttl(uint8_t *f, size_t len); /* 0: TTL was 0 or 1 (drop) */
int fp_set_supported(int field);

/* ----- one switch ----------------------------------------------------------- */
struct fp_engine;


typedef struct fp_switch {
    PyObject_HEAD
    struct fp_engine *engine;
    PyObject *name;
    PyObject *upcall;          /* callable(in_port, frame, now) -> (outputs, ops|None) */
    fp_port **ports;           /* in the order they were added */
    int nports;
    int16_t index[FP_MAX_PORT_NO + 1];
    uint8_t dscp_to_prio[64];
    /* buffer configuration (buffer.py; Python computes it, C applies it) */
    int64_t size_bytes, reserved, resume_offset;
    double alpha_lossless, alpha_lossy;
    uint8_t lossless, lossless_class, ecn_prios;
    double ecn_pmax;
    uint16_t pause_quanta;
    int64_t shared_used;
    uint64_t shared_watermark;
    uint64_t drops[FP_DROP_CAUSES];
    fp_mt ecn_rng, loss_rng;
    /* the transmit side's clock: when the earliest busy port may send */
    double tx_due;
    double early_s;            /* the least early allowance of its ports */
    fp_pool pool;
    fp_cache cache;
    int cache_enabled;
    uint64_t hits, misses, upcalls, malformed, watchdog_drops, pool_drops;
    uint64_t dropped_port_down, dropped_ttl, dropped_meter, upcall_errors;
    fp_meter *meters;          /* by slot (fp_meter.c) */
    uint32_t nmeters;
    fp_arm_ctr *arms;          /* adaptive ops' bucket counters, by slot (fp_ar.c) */
    uint32_t narms;
    uint64_t ar_decisions, ar_paused_skips, ar_all_paused;
    /* Adaptive decisions of both paths: ties rotate by it (adaptive.py tie_index);
     * Python's upcalls take from it too (`ar_rotate`). */
    uint64_t ar_rotation;
    uint64_t ar_ugal_decisions, ar_ugal_nonminimal;  /* UGAL ops: packets, non-minimal */
    emu_loopmon mon;
    int ready;                 /* a port of it was readable in this pass */
    int stopping;
    int in_engine;
    fp_port *cpu;              /* in_port 0 (a controller's PacketOut): ingress accounting */
    uint8_t scratch_tagged[FP_MAX_FRAME + 4], scratch_copied[FP_MAX_FRAME];
} fp_switch;

extern PyTypeObject fp_SwitchType;

fp_port *fp_port_get(fp_switch *sw, uint32_t port_no);
int fp_switch_receive(fp_switch *sw, fp_port *p, const uint8_t *f, size_t len, double now);
int fp_switch_enqueue(fp_switch *sw, uint32_t in_port, uint32_t out_port, const uint8_t *f,
                      size_t len, int queue_id, double now);
double fp_switch_transmit(fp_switch *sw, double now);
void fp_switch_send_pfc(fp_switch *sw, double now);
double fp_switch_next_pfc(const fp_switch *sw);
int fp_switch_poll_port(fp_switch *sw, fp_port *p, double *now);
int fp_port_open_ring(fp_port *p, uint32_t max_frame, uint32_t frames);
void fp_port_close(fp_port *p);
int64_t fp_flush(fp_switch *sw, fp_port *p, uint8_t prio_mask);
double fp_now(void);
double fp_thread_cpu(void);

/* fp_buffer.c */
int fp_admit(fp_switch *sw, uint32_t in_port, int prio, fp_port *out, int64_t size, int ect,
             double now, int *charge, int *mark);
void fp_release(fp_switch *sw, uint32_t in_port, int prio, fp_port *out, int64_t size,
                int charge);
void fp_buffer_pfc_due(fp_switch *sw, double now);
void fp_pool_init(fp_pool *pool, size_t slot_bytes, size_t budget_bytes);
fp_frame *fp_pool_get(fp_pool *pool, size_t len);
void fp_pool_put(fp_pool *pool, fp_frame *f);
void fp_pool_free(fp_pool *pool);

/* fp_cache.c: run a compiled list on a received frame; check one before it is installed */
void fp_exec(fp_switch *sw, uint32_t in_port, const fp_op *ops, uint32_t n, const uint8_t *f,
             size_t len, double now, int depth);
int fp_ops_check(const fp_op *ops, uint32_t n, int depth);

/* fp_ar.c */
int fp_ar_check(const fp_op *op, const fp_op *opts, uint32_t span, int depth);
void fp_ar_exec(fp_switch *sw, uint32_t in_port, const fp_op *op, const fp_op *opts,
                uint32_t span, const uint8_t *f, size_t len, double now, int depth);
int fp_ar_prepare(fp_switch *sw, const fp_op *ops, uint32_t n);
fp_arm_ctr *fp_arm_get(fp_switch *sw, uint64_t slot);
void fp_arms_clear(fp_switch *sw);
void fp_arms_free(fp_switch *sw);

/* fp_meter.c */
const fp_band *fp_meter_apply(fp_meter *m, size_t size, double now);
int fp_remark_dscp(int dscp, int prec);
fp_meter *fp_meter_slot(fp_switch *sw, uint32_t slot);
fp_meter *fp_meter_get(fp_switch *sw, uint64_t slot);
void fp_meters_clear(fp_switch *sw);
void fp_meters_free(fp_switch *sw);

/* fp_loop.c */
typedef struct fp_engine {
    PyObject_HEAD
    fp_switch **switches;
    int nswitches, cap;
    int epfd;
    int running;
    uint64_t passes;
} fp_engine;

extern PyTypeObject fp_EngineType;
int fp_engine_add(fp_engine *e, fp_switch *sw);
void fp_engine_remove(fp_engine *e, fp_switch *sw);

#endif
