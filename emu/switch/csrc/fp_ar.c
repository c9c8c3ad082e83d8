/* Per-packet adaptive routing on the compiled path (InfiniBand AR, Spectrum-X).
 *
 * Reference: emu/switch/adaptive.py (AdaptiveRouter.rank and choose) and
 * pipeline.py's P_ADAPTIVE. A SELECT group in adaptive mode, for a packet of
 * an enabled class, is compiled into one FP_OP_ADAPT followed by an FP_OP_ARM
 * per live bucket, each with the bucket's program:
 *
 *   ADAPT  value = the flow's select hash, queue = the packet's priority,
 *          field = options, sub_len = every op below
 *   ARM    port = the bucket's egress port (0: none), value = its counter
 *          slot, sub_len = its program's ops
 *   ...    the program
 *   ARM    ...
 *
 * Per packet: a port PFC-paused for the priority is passed over unless all
 * are; among the rest, the fewest bytes queued at the priority and above
 * (what strict priority sends before the packet); ties broken by the hash,
 * in bucket order. The chosen bucket's counter (a slot Python assigned, as
 * meters have) counts the packet; fp_module.c hands the slots' counts to
 * Python (`arm_drain`).
 *
 * fp_ar_check proves a list's shape before it is installed (an upcall);
 * fp_ar_exec checks the bounds again before it reads an option.
 */
#include "fp.h"

#include <stdlib.h>
#include <string.h>

/* 1 when `opts[0..span)` is exactly op->field ARM options, each with a valid
 * program, and the ADAPT's priority is one of the eight. */
int
fp_ar_check(const fp_op *op, const fp_op *opts, uint32_t span, int depth)
{
    if (op->queue < 0 || op->queue >= FP_PRIOS || op->field == 0 ||
        op->field > FP_AR_MAX_OPTIONS || depth > 16)
        return 0;
    uint32_t n = 0, k = 0;
    while (k < span) {
        const fp_op *arm = &opts[k];
        if (arm->code != FP_OP_ARM || arm->sub_len > span - k - 1 ||
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

/* AdaptiveRouter.choose for one packet, then the chosen bucket's program. */
void
fp_ar_exec(fp_switch *sw, uint32_t in_port, const fp_op *op, const fp_op *opts, uint32_t span,
           const uint8_t *f, size_t len, double now, int depth)
{
    const fp_op *arm[FP_AR_MAX_OPTIONS];
    fp_port *port[FP_AR_MAX_OPTIONS];
    int64_t ahead[FP_AR_MAX_OPTIONS];
    uint8_t paused[FP_AR_MAX_OPTIONS];
    int prio = op->queue;
    if (prio < 0 || prio >= FP_PRIOS || depth > 16)
        return;
    uint32_t n = 0, free_n = 0;
    for (uint32_t k = 0; k < span; k += 1 + (uint32_t)opts[k].sub_len) {
        if (opts[k].code != FP_OP_ARM || n >= FP_AR_MAX_OPTIONS || opts[k].sub_len > span - k - 1)
            return;
        const fp_op *o = &opts[k];
        fp_port *p = o->port ? fp_port_get(sw, o->port) : NULL;
        int64_t bytes = 0;
        int stopped = 0;
        if (p) {
            for (int q = prio; q < FP_PRIOS; q++)
                bytes += p->sched.depth[q];
            stopped = p->sched.paused_until[prio] > now;
        }
        arm[n] = o;
        port[n] = p;
        ahead[n] = bytes;
        paused[n] = (uint8_t)stopped;
        free_n += !stopped;
        n++;
    }
    if (n == 0)
        return;
    int every = free_n == 0;
    int64_t best = INT64_MAX;
    for (uint32_t i = 0; i < n; i++)
        if ((every || !paused[i]) && ahead[i] < best)
            best = ahead[i];
    uint32_t ties = 0;
    for (uint32_t i = 0; i < n; i++)
        ties += (every || !paused[i]) && ahead[i] == best;
    uint64_t nth = op->value % ties;
    uint32_t pick = 0;
    for (uint32_t i = 0; i < n; i++) {
        if ((every || !paused[i]) && ahead[i] == best) {
            if (nth == 0) {
                pick = i;
                break;
            }
            nth--;
        }
    }
    sw->ar_decisions++;
    sw->ar_paused_skips += every ? 0 : n - free_n;
    sw->ar_all_paused += (uint64_t)every;
    if (port[pick])
        port[pick]->ar_picks++;
    fp_arm_ctr *c = fp_arm_get(sw, arm[pick]->value);
    if (c) {
        c->packets++;
        c->bytes += len;
        c->last_used = now;
    }
    fp_exec(sw, in_port, arm[pick] + 1, arm[pick]->sub_len, f, len, now, depth + 1);
}
