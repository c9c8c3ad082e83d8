/* The shared buffer of one switch, in C: admission, PFC XOFF/XON, ECN marks,
 * and the pool of frame slots that queued frames live in.
 *
 * Reference: emu/switch/buffer.py (SharedBuffer.admit, release, pfc_due,
 * _ecn_mark), which Python still constructs: the thresholds it computes
 * (headroom per port, reserved bytes, Kmin/Kmax per port) are handed to C,
 * so the two cannot disagree on a configuration. The ECN draw uses the same
 * generator as Python's random.Random (MT19937, state copied from Python),
 * so both paths mark the same frames.
 *
 * Credit mode (emu/credit.py) is not here: a credit fabric runs the Python
 * datapath (emu/switch/fastpath.py says so when it picks one).
 */
#include "fp.h"

#include <stdlib.h>
#include <string.h>

/* ----- MT19937 as CPython's _randommodule.c ----------------------------------- */

#define MT_N 624
#define MT_M 397

static uint32_t
mt_next(fp_mt *r)
{
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    if (r->index >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (r->mt[kk] & 0x80000000U) | (r->mt[kk + 1] & 0x7fffffffU);
            r->mt[kk] = r->mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (r->mt[kk] & 0x80000000U) | (r->mt[kk + 1] & 0x7fffffffU);
            r->mt[kk] = r->mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (r->mt[MT_N - 1] & 0x80000000U) | (r->mt[0] & 0x7fffffffU);
        r->mt[MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        r->index = 0;
    }
    y = r->mt[r->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.random(): 53 bits, as CPython's random_random. */
double
fp_mt_random(fp_mt *r)
{
    uint32_t a = mt_next(r) >> 5, b = mt_next(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* ----- the frame pool: slots sized once, grown in chunks, never per frame ------ */

#define POOL_CHUNK 64

/* Slot sizes up to `slot_bytes`; a size class may hold as many frames as
 * `budget_bytes` (the shared buffer) holds of its shortest frames (at least
 * 60 bytes: Ethernet's minimum), plus a chunk. */
void
fp_pool_init(fp_pool *pool, size_t slot_bytes, size_t budget_bytes)
{
    static const size_t sizes[FP_POOL_CLASSES - 1] = {128, 256, 512, 1024};
    memset(pool, 0, sizeof *pool);
    pool->slot_bytes = (slot_bytes + 63) & ~(size_t)63;
    size_t shortest = 60;
    for (int c = 0; c < FP_POOL_CLASSES; c++) {
        size_t size = c < FP_POOL_CLASSES - 1 ? sizes[c] : pool->slot_bytes;
        if (size > pool->slot_bytes)
            size = pool->slot_bytes;
        pool->cls[c].slot_bytes = size;
        pool->cls[c].max_slots = budget_bytes / shortest + POOL_CHUNK;
        shortest = size + 1;
    }
}

static int
pool_grow(fp_pool *pool, int c)
{
    fp_pool_class *k = &pool->cls[c];
    if (k->slots >= k->max_slots)
        return -1;
    size_t stride = (sizeof(fp_frame) + k->slot_bytes + 15) & ~(size_t)15;
    uint8_t *chunk = malloc(stride * POOL_CHUNK);
    if (!chunk)
        return -1;
    void **chunks = realloc(pool->chunks, (pool->nchunks + 1) * sizeof *chunks);
    if (!chunks) {
        free(chunk);
        return -1;
    }
    pool->chunks = chunks;
    pool->chunks[pool->nchunks++] = chunk;
    for (int i = POOL_CHUNK - 1; i >= 0; i--) {
        fp_frame *f = (fp_frame *)(chunk + (size_t)i * stride);
        f->cls = (uint8_t)c;
        f->next = k->free;
        k->free = f;
    }
    k->slots += POOL_CHUNK;
    pool->slots += POOL_CHUNK;
    return 0;
}

fp_frame *
fp_pool_get(fp_pool *pool, size_t len)
{
    int c = 0;
    while (c < FP_POOL_CLASSES && pool->cls[c].slot_bytes < len)
        c++;
    if (c == FP_POOL_CLASSES)
        return NULL;
    fp_pool_class *k = &pool->cls[c];
    if (!k->free && pool_grow(pool, c) < 0)
        return NULL;
    fp_frame *f = k->free;
    k->free = f->next;
    f->next = NULL;
    f->len = (uint32_t)len;
    return f;
}

void
fp_pool_put(fp_pool *pool, fp_frame *f)
{
    fp_pool_class *k = &pool->cls[f->cls];
    f->next = k->free;
    k->free = f;
}

void
fp_pool_free(fp_pool *pool)
{
    for (size_t i = 0; i < pool->nchunks; i++)
        free(pool->chunks[i]);
    free(pool->chunks);
    memset(pool, 0, sizeof *pool);
}

/* ----- admission (SharedBuffer.admit) -------------------------------------------- */

/* The ingress accounting of a frame from `in_port`: port 0 (a controller's
 * PacketOut) has no port record; it is charged to the switch's CPU record,
 * which has no headroom and never sends PAUSE (rate 0). */
static fp_port *
ingress_port(fp_switch *sw, uint32_t in_port)
{
    fp_port *p = fp_port_get(sw, in_port);
    return p ? p : sw->cpu;
}

static double
xoff_threshold(const fp_switch *sw)
{
    return sw->alpha_lossless * (double)(sw->size_bytes - sw->reserved - sw->shared_used);
}

static double
refresh_s(const fp_switch *sw, const fp_port *in)
{
    /* buffer._refresh_s: half the pause time (one quantum = 512 bit times) */
    return sw->pause_quanta * 512 / in->rate_bps / 2;
}

static int
ecn_mark(fp_switch *sw, const fp_port *out, int64_t queued)
{
    if (queued <= out->kmin)
        return 0;
    if (queued >= out->kmax)
        return 1;
    return fp_mt_random(&sw->ecn_rng) <
           sw->ecn_pmax * (double)(queued - out->kmin) / (double)(out->kmax - out->kmin);
}

int
fp_admit(fp_switch *sw, uint32_t in_port, int prio, fp_port *out, int64_t size, int ect,
         double now, int *charge, int *mark)
{
    fp_port *in = ingress_port(sw, in_port);
    int64_t queued = out->egress[prio];
    if (sw->lossless >> prio & 1) {
        double xoff = xoff_threshold(sw);
        if ((double)(in->ingress[prio] + size) <= xoff &&
            sw->shared_used + size <= sw->size_bytes - sw->reserved)
            *charge = FP_SHARED;
        else if (in->headroom_used[prio] + size <= in->headroom)
            *charge = FP_HEADROOM;
        else {
            sw->drops[FP_DROP_HEADROOM]++;
            out->drops_by_queue[prio]++;
            return 0;
        }
        if (!(in->paused_upstream >> prio & 1) &&
            (*charge == FP_HEADROOM || (double)(in->ingress[prio] + size) > xoff) &&
            in->rate_bps > 0) {
            in->paused_upstream |= (uint8_t)(1 << prio);
            in->refresh_at[prio] = now + refresh_s(sw, in);
            in->pending_mask |= (uint8_t)(1 << prio);
            in->pending_quanta[prio] = sw->pause_quanta;
            in->xoff_sent[prio]++;
        }
    } else {
        if ((double)(queued + size) >
            sw->alpha_lossy * (double)(sw->size_bytes - sw->reserved - sw->shared_used)) {
            sw->drops[(sw->lossless_class >> prio & 1) ? FP_DROP_LOSSLESS_NO_PFC
                                                       : FP_DROP_LOSSY]++;
            out->drops_by_queue[prio]++;
            return 0;
        }
        *charge = FP_SHARED;
    }
    *mark = ect && (sw->ecn_prios >> prio & 1) && ecn_mark(sw, out, queued);
    if (*mark)
        out->marks[prio]++;
    if (*charge == FP_SHARED) {
        in->ingress[prio] += size;
        sw->shared_used += size;
        if ((uint64_t)sw->shared_used > sw->shared_watermark)
            sw->shared_watermark = (uint64_t)sw->shared_used;
    } else {
        in->headroom_used[prio] += size;
    }
    queued += size;
    out->egress[prio] = queued;
    if ((uint64_t)queued > out->egress_watermark[prio])
        out->egress_watermark[prio] = (uint64_t)queued;
    return 1;
}

void
fp_release(fp_switch *sw, uint32_t in_port, int prio, fp_port *out, int64_t size, int charge)
{
    fp_port *in = ingress_port(sw, in_port);
    if (charge == FP_HEADROOM) {
        in->headroom_used[prio] -= size;
    } else {
        in->ingress[prio] -= size;
        sw->shared_used -= size;
    }
    out->egress[prio] -= size;
}

/* SharedBuffer.pfc_due: XON below the resume point, refresh when due. What is
 * due collects in each port's pending mask; fp_switch_send_pfc sends it. */
void
fp_buffer_pfc_due(fp_switch *sw, double now)
{
    double resume = xoff_threshold(sw) - (double)sw->resume_offset;
    for (int i = 0; i < sw->nports; i++) {
        fp_port *p = sw->ports[i];
        uint8_t paused = p->paused_upstream;
        while (paused) {
            int prio = __builtin_ctz(paused);
            paused &= (uint8_t)(paused - 1);
            if (p->headroom_used[prio] == 0 && (double)p->ingress[prio] <= resume) {
                p->paused_upstream &= (uint8_t)~(1 << prio);
                p->pending_mask |= (uint8_t)(1 << prio);
                p->pending_quanta[prio] = 0;
                p->xon_sent[prio]++;
            } else if (now >= p->refresh_at[prio]) {
                p->refresh_at[prio] = now + refresh_s(sw, p);
                p->pending_mask |= (uint8_t)(1 << prio);
                p->pending_quanta[prio] = sw->pause_quanta;
                p->xoff_sent[prio]++;
            }
        }
    }
}

double
fp_switch_next_pfc(const fp_switch *sw)
{
    double next = -1;
    for (int i = 0; i < sw->nports; i++) {
        const fp_port *p = sw->ports[i];
        uint8_t paused = p->paused_upstream;
        while (paused) {
            int prio = __builtin_ctz(paused);
            paused &= (uint8_t)(paused - 1);
            if (next < 0 || p->refresh_at[prio] < next)
                next = p->refresh_at[prio];
        }
    }
    return next;
}
