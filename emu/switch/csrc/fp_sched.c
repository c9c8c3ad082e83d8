/* The egress side of one port in C: 8 priority queues, strict priority,
 * pacing on the wire's virtual clock, PAUSE honoured per priority, and the
 * fidelity clock that measures each frame's lateness against its slot.
 *
 * Reference: emu/switch/scheduler.py (PortScheduler) and emu/fidelity.py
 * (PortClock, EDGES, EARLY_FRAMES); the comments there say why each rule is
 * what it is. Credit links are not here (see fp_buffer.c).
 */
#include "fp.h"

#include <string.h>

/* fidelity.EDGES, in frame times; fidelity.FRAME_BYTES; EARLY_FRAMES */
static const double EDGES[FP_HIST - 1] = {0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0};
#define FRAME_BYTES 1514
#define EARLY_FRAMES 0.25
#define MIN_BURST_S 0.001

void
fp_clock_set_rate(fp_clock *c, double rate_bps)
{
    c->rate_bps = rate_bps;
    c->frame_s = FRAME_BYTES * 8 / rate_bps;
    for (int i = 0; i < FP_HIST - 1; i++)
        c->edges_s[i] = EDGES[i] * c->frame_s;
}

void
fp_clock_reset(fp_clock *c)
{
    memset(c->hist, 0, sizeof c->hist);
    c->frames = 0;
    c->max_late_s = c->deficit_s = c->busy_s = 0.0;
    c->last_bucket = -1;
    c->last_wire_s = 0.0;
}

void
fp_clock_init(fp_clock *c, double rate_bps)
{
    fp_clock_set_rate(c, rate_bps);
    fp_clock_reset(c);
}

/* PortClock.departed; returns the bucket (bisect_right of the edges). */
int
fp_clock_departed(fp_clock *c, double now, double slot, double wire_s)
{
    double late = now - slot;
    int bucket = 0;
    c->busy_s += wire_s;
    c->last_wire_s = wire_s;
    while (bucket < FP_HIST - 1 && c->edges_s[bucket] <= late)
        bucket++;
    c->hist[bucket]++;
    c->frames++;
    c->last_bucket = bucket;
    if (late > c->max_late_s)
        c->max_late_s = late;
    return bucket;
}

void
fp_clock_undo(fp_clock *c, int bucket, double wire_s)
{
    if (bucket >= 0) {
        c->hist[bucket]--;
        c->frames--;
        c->busy_s -= wire_s;
        c->last_bucket = -1;
    }
}

void
fp_sched_set_rate(fp_sched *s, double rate_bps)
{
    s->rate_bps = rate_bps;
    s->s_per_byte = 8.0 / rate_bps;
    fp_clock_set_rate(&s->clock, rate_bps);
    double burst = 2 * 1514 * s->s_per_byte;
    if (burst < MIN_BURST_S)
        burst = MIN_BURST_S;
    if (burst < s->burst_floor_s)
        burst = s->burst_floor_s;
    s->burst_s = burst;
    s->early_s = EARLY_FRAMES * (FRAME_BYTES * 8 / rate_bps);
}

void
fp_sched_init(fp_sched *s, double rate_bps)
{
    memset(s, 0, sizeof *s);
    s->queue_limit_bytes = 16 * 1024 * 1024; /* scheduler.DEFAULT_QUEUE_LIMIT_BYTES */
    fp_clock_init(&s->clock, rate_bps > 0 ? rate_bps : 1.0);
    fp_sched_set_rate(s, rate_bps);
}

int
fp_sched_enqueue(fp_sched *s, fp_frame *f, double now)
{
    int prio = f->prio;
    fp_qctr *c = &s->c[prio];
    if ((uint64_t)(s->depth[prio] + f->len) > s->queue_limit_bytes) {
        c->dropped_packets++;
        c->dropped_bytes += f->len;
        return 0;
    }
    f->queued_at = now;
    f->next = NULL;
    if (s->q[prio].tail)
        s->q[prio].tail->next = f;
    else
        s->q[prio].head = f;
    s->q[prio].tail = f;
    s->nonempty |= (uint8_t)(1 << prio);
    s->depth[prio] += f->len;
    if ((uint64_t)s->depth[prio] > c->watermark_bytes)
        c->watermark_bytes = (uint64_t)s->depth[prio];
    c->enqueued_packets++;
    c->enqueued_bytes += f->len;
    s->pending++;
    return 1;
}

void
fp_sched_pause(fp_sched *s, int prio, double until, double now)
{
    double old = s->paused_until[prio];
    if (old > now)
        s->paused_s[prio] += (until > now ? until : now) - old;
    else if (until > now)
        s->paused_s[prio] += until - now;
    s->paused_until[prio] = until;
    double end = s->paused_until[0];
    for (int p = 1; p < FP_PRIOS; p++)
        if (s->paused_until[p] > end)
            end = s->paused_until[p];
    s->pauses_end = end;
}

double
fp_sched_paused_so_far(const fp_sched *s, int prio, double now)
{
    double rest = s->paused_until[prio] - now;
    return s->paused_s[prio] - (rest > 0 ? rest : 0.0);
}

double
fp_sched_ready_at(const fp_sched *s)
{
    if (!s->pending)
        return -1.0;
    if (s->pauses_end <= s->free_at)
        return s->free_at;
    double m = -1.0;
    for (int p = 0; p < FP_PRIOS; p++)
        if (s->q[p].head && (m < 0 || s->paused_until[p] < m))
            m = s->paused_until[p];
    return m > s->free_at ? m : s->free_at;
}

fp_frame *
fp_sched_dequeue(fp_sched *s, double now, fp_undo *undo)
{
    if (!s->pending || s->free_at > now + s->early_s)
        return NULL;
    uint8_t left = s->nonempty;
    while (left) {
        int prio = 31 - __builtin_clz(left);
        left ^= (uint8_t)(1 << prio);
        if (s->paused_until[prio] > now)
            continue;
        fp_fifo *q = &s->q[prio];
        fp_frame *f = q->head;
        q->head = f->next;
        if (!q->head) {
            q->tail = NULL;
            s->nonempty ^= (uint8_t)(1 << prio);
        }
        f->next = NULL;
        uint32_t size = f->len;
        s->depth[prio] -= size;
        s->pending--;
        s->c[prio].tx_packets++;
        s->c[prio].tx_bytes += size;
        double slot = s->free_at;
        if (f->queued_at > slot)
            slot = f->queued_at;
        if (s->paused_until[prio] > slot)
            slot = s->paused_until[prio];
        double wire = size * s->s_per_byte;
        undo->bucket = fp_clock_departed(&s->clock, now, slot, wire);
        undo->wire_s = wire;
        double earliest = now - s->burst_s, start, lost = 0.0;
        if (s->free_at > earliest) {
            start = s->free_at;
        } else {
            start = earliest;
            if (slot < earliest && slot == s->free_at) {
                lost = earliest - slot;
                s->clock.deficit_s += lost;
            }
        }
        undo->free_at = s->free_at;
        undo->queued_at = f->queued_at;
        undo->lost = lost;
        s->free_at = start + wire;
        return f;
    }
    return NULL;
}

void
fp_sched_requeue_front(fp_sched *s, fp_frame *f, const fp_undo *undo)
{
    int prio = f->prio;
    fp_fifo *q = &s->q[prio];
    f->queued_at = undo->queued_at;
    f->next = q->head;
    q->head = f;
    if (!q->tail)
        q->tail = f;
    s->nonempty |= (uint8_t)(1 << prio);
    s->depth[prio] += f->len;
    s->pending++;
    s->c[prio].tx_packets--;
    s->c[prio].tx_bytes -= f->len;
    s->free_at = undo->free_at;
    fp_clock_undo(&s->clock, undo->bucket, undo->wire_s);
    s->clock.deficit_s -= undo->lost;
}
