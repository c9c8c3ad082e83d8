/* Per-packet adaptive routing on the compiled path (InfiniBand AR, Spectrum-X),
 * and UGAL's non-minimal choice (Kim, Dally, Scott, Abts, ISCA 2008).
 *
 * Reference: emu/switch/adaptive.py (AdaptiveRouter.rank, choose and
 * choose_ugal) and pipeline.py's P_ADAPTIVE and P_UGAL. A SELECT group in
 * adaptive (UGAL) mode, for a packet of an enabled class, is compiled into
 * one FP_OP_ADAPT (FP_OP_UGAL) followed by an FP_OP_ARM per live bucket,
 * each with the bucket's program:
 *
 *   ADAPT  value = the flow's select hash, queue = the packet's priority,
 *          field = options, sub_len = every op below (UGAL: port = the bias)
 *   ARM    port = the bucket's egress port (0: none), value = its counter
 *          slot, queue = its weight (UGAL only: 2 x path length, + 1 off the
 *          minimal path), sub_len = its program's ops
 *   ...    the program
 *   ARM    ...
 *
 * Per packet: a port PFC-paused for the priority is passed over unless all
 * are; among the rest, the fewest bytes queued at the priority and above
 * (what strict priority sends before the packet); ties broken by the hash
 * plus the switch's adaptive decisions before, Python's and C's
 * (adaptive.py tie_index: a flow spreads over equal queues), in bucket order. UGAL weighs the bytes by the path length H and adds the
 * bias off the minimal path (odd weights; when no even weight is among the
 * options, the least H stands for minimal); the least cost wins, then a
 * minimal option, then the least H, then the hash. The chosen bucket's
 * counter (a slot Python assigned, as meters have) counts the packet;
 * fp_module.c hands the slots' counts to Python (`arm_drain`).
 *
 * fp_ar_check proves a list's shape before it is installed (an upcall);
 * fp_ar_exec checks the bounds again before it reads an option.
 */
#include "fp.h"

#include <stdlib.h>
#include <string.h>

/* 1 when `opts[0..span)` is exactly op->field ARM options, each with a valid
 * program (and, under a UGAL op, a weight of 1..65535), and the op's
 * priority is one of the eight. */
int
fp_ar_check(const fp_op *op, const fp_op *opts, uint32_t span, int depth)
{
    if (op->queue < 0 || op->queue >= FP_PRIOS || op->field == 0 ||
        op->field > FP_AR_MAX_OPTIONS || depth > 16)
        return 0;
    int ugal = op->code == FP_OP_UGAL;
    uint32_t n = 0, k = 0;
    while (k < span) {
        const fp_op *arm = &opts[k];
        if (arm->code != FP_OP_ARM || arm->sub_len > span - k - 1 ||
            (ugal && (arm->queue < 1 || arm->queue > 0xFFFF)) ||
            !fp_ops_check(arm + 1, arm->sub_len, depth + 1))
            return 0;
        n++;
        k += 1 + (uint32_t)arm->sub_len;
    }
    return n == op->field;
}

/* The slot's counter, grown into existence (an upcall installing a list). */
static fp_arm_ctr *
arm_slot(fp_switch *sw, uint64_t slot)
{
    if (slot >= FP_MAX_ARMS)
        return NULL;
    if (slot >= sw->narms) {
        uint32_t n = sw->narms ? sw->narms : 64;
        while (n <= slot)
            n *= 2;
        fp_arm_ctr *grown = realloc(sw->arms, (size_t)n * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + sw->narms, 0, (size_t)(n - sw->narms) * sizeof *grown);
        sw->arms = grown;
        sw->narms = n;
    }
    sw->arms[slot].used = 1;
    return &sw->arms[slot];
}

/* Every counter slot a checked list names, made to exist; 0 when one cannot be. */
int
fp_ar_prepare(fp_switch *sw, const fp_op *ops, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ops[i].code == FP_OP_ARM && !arm_slot(sw, ops[i].value))
            return 0;
    return 1;
}

fp_arm_ctr *
fp_arm_get(fp_switch *sw, uint64_t slot)
{
    if (slot >= sw->narms || !sw->arms[slot].used)
        return NULL;
    return &sw->arms[slot];
}

void
fp_arms_clear(fp_switch *sw)
{
    if (sw->arms)
        memset(sw->arms, 0, (size_t)sw->narms * sizeof *sw->arms);
}

void
fp_arms_free(fp_switch *sw)
{
    free(sw->arms);
    sw->arms = NULL;
    sw->narms = 0;
}

/* One decision's options as adaptive routing sees them. */
typedef struct {
    const fp_op *arm[FP_AR_MAX_OPTIONS];
    fp_port *port[FP_AR_MAX_OPTIONS];
    int64_t cost[FP_AR_MAX_OPTIONS];
    int32_t hops[FP_AR_MAX_OPTIONS];
    uint8_t off[FP_AR_MAX_OPTIONS];    /* UGAL: not on the minimal path */
    uint8_t paused[FP_AR_MAX_OPTIONS];
    uint32_t n, free_n;
} ar_view;

/* UGAL (adaptive.ugal_minimal): odd weights are off the minimal path, unless
 * none is even; then all but the shortest are. The bias is added off it. */
static void
ar_ugal_costs(ar_view *v, const fp_op *op)
{
    int any_min = 0;
    int32_t h_min = INT32_MAX;
    for (uint32_t i = 0; i < v->n; i++) {
        int32_t w = v->arm[i]->queue;
        any_min |= !(w & 1);
        v->hops[i] = w >> 1;
        if (v->hops[i] < h_min)
            h_min = v->hops[i];
    }
    for (uint32_t i = 0; i < v->n; i++) {
        int32_t w = v->arm[i]->queue;
        v->off[i] = (uint8_t)(any_min ? (w & 1) : v->hops[i] != h_min);
        v->cost[i] = v->cost[i] * v->hops[i] + (v->off[i] ? (int64_t)op->port : 0);
    }
}

/* Read the ARMs of `opts`: each one's port, cost (bytes at prio and above, or
 * UGAL's bytes x H + bias) and pause; 0 on a malformed list. */
static int
ar_read(fp_switch *sw, const fp_op *op, const fp_op *opts, uint32_t span, double now,
        ar_view *v)
{
    int prio = op->queue, ugal = op->code == FP_OP_UGAL;
    v->n = v->free_n = 0;
    for (uint32_t k = 0; k < span; k += 1 + (uint32_t)opts[k].sub_len) {
        const fp_op *o = &opts[k];
        if (o->code != FP_OP_ARM || v->n >= FP_AR_MAX_OPTIONS || o->sub_len > span - k - 1)
            return 0;
        if (ugal && (o->queue < 1 || o->queue > 0xFFFF))
            return 0;
        fp_port *p = o->port ? fp_port_get(sw, o->port) : NULL;
        int64_t bytes = 0;
        int stopped = 0;
        if (p) {
            for (int q = prio; q < FP_PRIOS; q++)
                bytes += p->sched.depth[q];
            stopped = p->sched.paused_until[prio] > now;
        }
        uint32_t i = v->n++;
        v->arm[i] = o;
        v->port[i] = p;
        v->hops[i] = 0;
        v->off[i] = 0;
        v->cost[i] = bytes;
        v->paused[i] = (uint8_t)stopped;
        v->free_n += !stopped;
    }
    if (ugal && v->n)
        ar_ugal_costs(v, op);
    return v->n > 0;
}

/* Option i's rank key (cost, off the minimal path, H) against j's: <0, 0, >0. */
static int
ar_cmp(const ar_view *v, uint32_t i, uint32_t j)
{
    if (v->cost[i] != v->cost[j])
        return v->cost[i] < v->cost[j] ? -1 : 1;
    if (v->off[i] != v->off[j])
        return v->off[i] < v->off[j] ? -1 : 1;
    if (v->hops[i] != v->hops[j])
        return v->hops[i] < v->hops[j] ? -1 : 1;
    return 0;
}

/* The option AdaptiveRouter.rank ties best and the hash picks among them. */
static uint32_t
ar_pick(const ar_view *v, uint64_t flow_hash)
{
    int every = v->free_n == 0;
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < v->n; i++)
        if ((every || !v->paused[i]) && (best == UINT32_MAX || ar_cmp(v, i, best) < 0))
            best = i;
    uint32_t ties = 0;
    for (uint32_t i = 0; i < v->n; i++)
        ties += (every || !v->paused[i]) && ar_cmp(v, i, best) == 0;
    uint64_t nth = flow_hash % ties;
    for (uint32_t i = 0; i < v->n; i++) {
        if ((every || !v->paused[i]) && ar_cmp(v, i, best) == 0) {
            if (nth == 0)
                return i;
            nth--;
        }
    }
    return 0;
}

/* AdaptiveRouter.choose (choose_ugal) for one packet, then the chosen bucket's program. */
void
fp_ar_exec(fp_switch *sw, uint32_t in_port, const fp_op *op, const fp_op *opts, uint32_t span,
           const uint8_t *f, size_t len, double now, int depth)
{
    ar_view v;
    if (op->queue < 0 || op->queue >= FP_PRIOS || depth > 16)
        return;
    if (!ar_read(sw, op, opts, span, now, &v))
        return;
    /* Adaptive ties rotate per packet (adaptive.py tie_index); UGAL's go by the hash. */
    uint32_t pick = ar_pick(&v, op->code == FP_OP_UGAL ? op->value : op->value + sw->ar_rotation++);
    int every = v.free_n == 0;
    if (op->code == FP_OP_UGAL) {
        sw->ar_ugal_decisions++;
        sw->ar_ugal_nonminimal += v.off[pick];
    } else {
        sw->ar_decisions++;
    }
    sw->ar_paused_skips += every ? 0 : v.n - v.free_n;
    sw->ar_all_paused += (uint64_t)every;
    if (v.port[pick])
        v.port[pick]->ar_picks++;
    fp_arm_ctr *c = fp_arm_get(sw, v.arm[pick]->value);
    if (c) {
        c->packets++;
        c->bytes += len;
        c->last_used = now;
    }
    fp_exec(sw, in_port, v.arm[pick] + 1, v.arm[pick]->sub_len, f, len, now, depth + 1);
}
