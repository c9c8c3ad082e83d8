/* The RoCE transport of one NIC in C: emu/host/rnic.py's Rnic, per frame.
 *
 * Requester: a posted message is a range of PSNs; each packet's opcode, length,
 * AckReq bit, RETH and payload slice are derived from its message when it is
 * sent (rnic.post_send keeps them per PSN; the frames are the same). Pacing at
 * the link rate (the wire's virtual clock) and at the QP's DCQCN rate, the
 * go-back-N window, the RTO from the oldest unacknowledged packet's send time,
 * NAK / RNR NAK / ACK handling, go-back-0 and "selective" (a NAKed PSN resent
 * alone, nic_reorder.c) as rnic.py has them. The responder's side of a data
 * packet is nic_responder.c's; here, the host receive buffer and its PAUSE. On a
 * credit link the lanes' credit (nic_credit.c) gates data and ACKs instead of
 * PAUSE, and the NIC returns credit instead of sending PAUSE.
 *
 * Every branch follows rnic.py's in the same order with the same float
 * operations, so that the differential test can require equal frames and
 * counters; where rnic.py changes, this file changes with it.
 */
#include "nic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline double dmax(double a, double b) { return a >= b ? a : b; }
static inline double dmin(double a, double b) { return a <= b ? a : b; }

/* ----- output frames ------------------------------------------------------------ */

int nic_out_add(nic_out *o, const uint8_t *f, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        uint8_t *b = realloc(o->buf, cap);
        if (!b)
            return -1;
        o->buf = b;
        o->cap = cap;
    }
    if (o->count == o->ends_cap) {
        size_t cap = o->ends_cap ? o->ends_cap * 2 : 16;
        size_t *e = realloc(o->ends, cap * sizeof *e);
        if (!e)
            return -1;
        o->ends = e;
        o->ends_cap = cap;
    }
    memcpy(o->buf + o->len, f, n);
    o->len += n;
    o->ends[o->count++] = o->len;
    return 0;
}

void nic_out_clear(nic_out *o) { o->len = o->count = 0; }

void nic_out_free(nic_out *o)
{
    free(o->buf);
    free(o->ends);
    memset(o, 0, sizeof *o);
}

/* ----- the wire and its fidelity clock (fidelity.PortClock) --------------------- */

static const double EDGES[NIC_HIST - 1] = {0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0};

/* The fidelity clock's frame time, from the rate the NIC started at (as PortClock). */
void nic_clock_init(nic_engine *e, double rate_bps)
{
    e->frame_s = NIC_FRAME_BYTES * 8 / rate_bps;
    for (int i = 0; i < NIC_HIST - 1; i++)
        e->edges_s[i] = EDGES[i] * e->frame_s;
}

void nic_clock_reset(nic_engine *e)
{
    memset(e->hist, 0, sizeof e->hist);
    e->frames = 0;
    e->max_late_s = e->deficit_s = e->busy_s = e->last_wire_s = 0.0;
    e->last_bucket = -1;
}

static double early_s(const nic_engine *e)
{
    return NIC_EARLY_FRAMES * (NIC_FRAME_BYTES * 8 / e->rate_bps);
}

void nic_wire(nic_engine *e, size_t size, double now)
{
    e->free_at = dmax(e->free_at, now - NIC_WIRE_CATCH_UP_S) + (double)(size * 8) / e->rate_bps;
}

static void on_clock(nic_engine *e, double now, double slot, size_t size, int clocked)
{
    if (clocked && slot < now - NIC_WIRE_CATCH_UP_S)
        e->deficit_s += now - NIC_WIRE_CATCH_UP_S - slot;
    double late = now - slot, wire_s = (double)(size * 8) / e->rate_bps;
    e->busy_s += wire_s;
    e->last_wire_s = wire_s;
    int b = 0;
    while (b < NIC_HIST - 1 && e->edges_s[b] <= late)
        b++;
    e->hist[b]++;
    e->frames++;
    e->last_bucket = b;
    if (late > e->max_late_s)
        e->max_late_s = late;
}

int nic_may_send(const nic_engine *e, double now)
{
    if (e->credit.enabled &&
        (nic_credit_waiting(&e->credit) || nic_credit_blocked(&e->credit, NIC_DATA_PRIO)))
        return 0;
    return e->free_at <= now + early_s(e) && e->paused_until[NIC_DATA_PRIO] <= now;
}

void nic_use_wire(nic_engine *e, size_t size, double now, double ready_at)
{
    double slot = dmax(dmax(e->free_at, isnan(ready_at) ? now : ready_at),
                       e->paused_until[NIC_DATA_PRIO]);
    on_clock(e, now, slot, size, slot == e->free_at);
    nic_wire(e, size, now);
}

/* ----- queue pairs ---------------------------------------------------------------- */

nic_qp *nic_qp_find(nic_engine *e, uint32_t qpn)
{
    for (int i = 0; i < e->nqps; i++)
        if (e->qps[i]->qpn == qpn)
            return e->qps[i];
    return NULL;
}

nic_qp *nic_connect(nic_engine *e, uint32_t qpn, uint32_t peer_qpn, double now,
                    double max_rate_bps, int prio)
{
    if (e->nqps == e->qps_cap) {
        int cap = e->qps_cap ? e->qps_cap * 2 : 8;
        nic_qp **q = realloc(e->qps, (size_t)cap * sizeof *q);
        if (!q)
            return NULL;
        e->qps = q;
        e->qps_cap = cap;
    }
    nic_qp *qp = calloc(1, sizeof *qp);
    if (!qp)
        return NULL;
    qp->qpn = qpn;
    qp->peer_qpn = peer_qpn;
    qp->max_rate_bps = max_rate_bps;
    qp->prio = prio;
    qp->last_progress = now;
    qp->last_cnp_at = NAN;
    if (e->dcqcn) {
        qp->has_rp = 1;
        nic_rp_init(&qp->rp, &e->dcqcn_p, now);
    }
    if (e->selective) {
        qp->resend = malloc(NIC_MAX_OUTSTANDING * sizeof *qp->resend);
        if (!qp->resend || nic_ooo_init(&qp->ooo, e->ooo_window) < 0) {
            nic_qp_free(qp);
            return NULL;
        }
    }
    e->qps[e->nqps++] = qp;
    return qp;
}

void nic_qp_free(nic_qp *qp)
{
    if (!qp)
        return;
    for (size_t i = 0; i < qp->msg_count; i++)
        free(qp->msgs[(qp->msg_head + i) % qp->msg_cap].data);
    free(qp->msgs);
    free(qp->sent_at);
    free(qp->completed);
    free(qp->parts);
    for (size_t i = 0; i < qp->inbox_count; i++)
        free(qp->inbox[(qp->inbox_head + i) % qp->inbox_cap].data);
    free(qp->inbox);
    free(qp->resend);
    nic_ooo_free(&qp->ooo);
    free(qp);
}

static nic_msg *msg_at(nic_qp *qp, size_t i) { return &qp->msgs[(qp->msg_head + i) % qp->msg_cap]; }

/* The message holding `psn`, or NULL (binary search: messages are in PSN order). */
static nic_msg *msg_of(nic_qp *qp, int64_t psn)
{
    size_t lo = 0, hi = qp->msg_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        nic_msg *m = msg_at(qp, mid);
        if (m->end_psn <= psn)
            lo = mid + 1;
        else if (m->first_psn > psn)
            hi = mid;
        else
            return m;
    }
    return NULL;
}

/* rnic._message_start */
static int64_t message_start(nic_qp *qp, int64_t psn)
{
    for (size_t i = 0; i < qp->msg_count; i++) {
        nic_msg *m = msg_at(qp, i);
        if (m->first_psn <= psn && psn < m->end_psn)
            return m->first_psn;
        if (m->first_psn > psn)
            break;
    }
    return psn;
}

static double sent_at_get(const nic_qp *qp, int64_t psn, double dflt)
{
    if (psn < qp->freed || psn >= qp->sa_hi)
        return dflt;
    double t = qp->sent_at[(size_t)psn & (qp->sa_cap - 1)];
    return isnan(t) ? dflt : t;
}

static int sent_at_set(nic_qp *qp, int64_t psn, double t)
{
    if (!qp->sa_cap || (uint64_t)(psn - qp->freed) >= qp->sa_cap) {
        size_t cap = qp->sa_cap ? qp->sa_cap : 1024;
        while ((uint64_t)(psn - qp->freed) >= cap)
            cap *= 2;
        double *n = malloc(cap * sizeof *n);
        if (!n)
            return -1;
        for (size_t i = 0; i < cap; i++)
            n[i] = NAN;
        for (int64_t p = qp->freed; p < qp->sa_hi; p++)
            n[(size_t)p & (cap - 1)] = qp->sent_at[(size_t)p & (qp->sa_cap - 1)];
        free(qp->sent_at);
        qp->sent_at = n;
        qp->sa_cap = cap;
    }
    qp->sent_at[(size_t)psn & (qp->sa_cap - 1)] = t;
    if (psn >= qp->sa_hi)
        qp->sa_hi = psn + 1;
    return 0;
}

int nic_post(nic_engine *e, nic_qp *qp, int64_t size, double now, int write, uint64_t va,
             uint32_t rkey, const uint8_t *data, uint64_t *msg_id)
{
    if (qp->msg_count == qp->msg_cap) {
        size_t cap = qp->msg_cap ? qp->msg_cap * 2 : 16;
        nic_msg *n = malloc(cap * sizeof *n);
        if (!n)
            return -1;
        for (size_t i = 0; i < qp->msg_count; i++)
            n[i] = *msg_at(qp, i);
        free(qp->msgs);
        qp->msgs = n;
        qp->msg_cap = cap;
        qp->msg_head = 0;
    }
    uint8_t *copy = NULL;
    if (data) {
        copy = malloc(size ? (size_t)size : 1);
        if (!copy)
            return -1;
        memcpy(copy, data, (size_t)size);
    }
    int64_t mtu = e->mtu_payload;
    int64_t n = (size + mtu - 1) / mtu;
    if (n < 1)
        n = 1;
    int64_t first = qp->end_psn;
    if (qp->next_psn >= qp->end_psn)
        qp->ready_since = now;
    qp->end_psn = first + n;
    nic_msg *m = &qp->msgs[(qp->msg_head + qp->msg_count) % qp->msg_cap];
    qp->msg_count++;
    memset(m, 0, sizeof *m);
    m->id = ++e->msg_ids;
    m->size = size;
    m->first_psn = first;
    m->end_psn = first + n;
    m->posted_at = now;
    m->completed_at = NAN;
    m->write = write;
    m->va = va;
    m->rkey = rkey;
    m->data = copy;
    *msg_id = m->id;
    return 0;
}

static void check_timeout(nic_engine *e, nic_qp *qp, double now)
{
    if (qp->una < qp->next_psn &&
        now - sent_at_get(qp, qp->una, qp->last_progress) >= e->rto_s) {
        qp->timeouts++;
        int64_t start = e->go_back_0 ? message_start(qp, qp->una) : qp->una;
        qp->retransmitted += qp->next_psn - start;
        qp->resend_n = 0;
        qp->una = qp->next_psn = start;
        qp->last_progress = now;
        qp->ready_since = now;
    }
}

/* rnic._has_new: a PSN never sent that the window lets go */
static int has_new(const nic_qp *qp)
{
    return qp->next_psn < qp->end_psn && qp->next_psn - qp->una < NIC_MAX_OUTSTANDING;
}

/* The frame of PSN `psn` (rnic.post_send's per-packet fields, then DataTemplate.frame);
 * `force_ack`: AckReq whatever the PSN (a "selective" retransmission). */
static size_t data_frame(nic_engine *e, nic_qp *qp, int64_t psn, size_t *payload_out,
                         int force_ack)
{
    nic_msg *m = msg_of(qp, psn);
    if (!m)
        return 0;
    int64_t mtu = e->mtu_payload, n = m->end_psn - m->first_psn, i = psn - m->first_psn;
    int64_t payload = i < n - 1 ? mtu : m->size - mtu * (n - 1);
    int op;
    if (n == 1)
        op = m->write ? OP_WRITE_ONLY : OP_SEND_ONLY;
    else if (i == 0)
        op = m->write ? OP_WRITE_FIRST : OP_SEND_FIRST;
    else if (i == n - 1)
        op = m->write ? OP_WRITE_LAST : OP_SEND_LAST;
    else
        op = m->write ? OP_WRITE_MIDDLE : OP_SEND_MIDDLE;
    int ack_req = force_ack || i == n - 1 || psn % NIC_ACK_EVERY == NIC_ACK_EVERY - 1;
    uint8_t reth[16];
    size_t ext = 0;
    if (m->write && i == 0) {
        for (int k = 0; k < 8; k++)
            reth[k] = (uint8_t)(m->va >> (56 - 8 * k));
        reth[8] = (uint8_t)(m->rkey >> 24);
        reth[9] = (uint8_t)(m->rkey >> 16);
        reth[10] = (uint8_t)(m->rkey >> 8);
        reth[11] = (uint8_t)m->rkey;
        uint32_t len = (uint32_t)m->size;
        reth[12] = (uint8_t)(len >> 24);
        reth[13] = (uint8_t)(len >> 16);
        reth[14] = (uint8_t)(len >> 8);
        reth[15] = (uint8_t)len;
        ext = 16;
    }
    *payload_out = (size_t)payload;
    uint32_t apsn = ((uint32_t)psn & PSN_MASK) | (ack_req ? 0x80000000u : 0);
    return nic_build(&qp->data_hdr, e->scratch, op, qp->peer_qpn, apsn, reth, ext,
                     m->data ? m->data + i * mtu : NULL, (size_t)payload);
}

int nic_next_frame(nic_engine *e, double now, nic_out *out)
{
    double soon = now + early_s(e);
    nic_credit *credit = e->credit.enabled ? &e->credit : NULL;
    if (e->free_at > soon || (credit && nic_credit_waiting(credit)))
        return 0;  /* the wire is busy, or ACKs wait for credit ahead of data */
    for (int k = 0; k < e->nqps; k++) {
        nic_qp *qp = e->qps[e->rr];
        e->rr = (e->rr + 1) % e->nqps;
        int prio = qp->prio;
        if (e->paused_until[prio] > now || (credit && nic_credit_blocked(credit, prio)))
            continue;  /* its lane is paused, or waits for a flow control frame */
        check_timeout(e, qp, now);
        /* "selective": a PSN the responder NAKed goes first, alone, asking for an ACK. */
        int resend = qp->resend_n > 0;
        if (qp->next_tx_at > soon || !(resend || has_new(qp)))
            continue;
        int64_t psn = resend ? qp->resend[0] : qp->next_psn;
        double slot = dmax(dmax(dmax(e->free_at, qp->next_tx_at), qp->ready_since),
                           e->paused_until[prio]);
        size_t payload = 0;
        size_t len = data_frame(e, qp, psn, &payload, resend);
        if (!len)
            continue;  /* cannot happen: every PSN below end_psn has its message */
        if (credit && credit->is_vl[prio]) {
            if (!nic_credit_may_send(credit, prio, len, now))
                continue;  /* the lane waits for credit; a flow control frame wakes it */
            nic_credit_sent(credit, prio, len);
            slot = dmax(slot, nic_credit_unblocked_at(credit, prio));
        }
        on_clock(e, now, slot, len, slot == e->free_at || slot == qp->next_tx_at);
        if (sent_at_set(qp, psn, now) < 0)
            return -1;
        if (resend) {
            memmove(qp->resend, qp->resend + 1, (qp->resend_n - 1) * sizeof *qp->resend);
            qp->resend_n--;
            qp->retransmitted++;
        } else {
            qp->next_psn++;
        }
        qp->tx_packets++;
        qp->tx_bytes += (int64_t)len;
        qp->tx_payload_bytes += (int64_t)payload;
        nic_wire(e, len, now);
        double rate = qp->max_rate_bps > 0 ? qp->max_rate_bps : e->rate_bps;
        rate = dmin(e->rate_bps, rate);
        if (qp->has_rp) {
            nic_rp_on_bytes_sent(&qp->rp, (int64_t)len, now);
            nic_rp_advance(&qp->rp, now);
            rate = dmin(rate, qp->rp.rc);
        }
        qp->next_tx_at = dmax(qp->next_tx_at, now - 0.001) + (double)(len * 8) / rate;
        return nic_out_add(out, e->scratch, len) < 0 ? -1 : 1;
    }
    return 0;
}

double nic_next_wakeup(nic_engine *e, double now)
{
    double best = NAN;
    for (int k = 0; k < e->nqps; k++) {
        nic_qp *qp = e->qps[k];
        double t;
        if (nic_credit_blocked(&e->credit, qp->prio))
            continue;  /* waits for a flow control frame, which wakes the agent */
        if (qp->resend_n || has_new(qp))
            t = dmax(qp->next_tx_at, e->paused_until[qp->prio]);
        else if (qp->una < qp->next_psn)
            t = dmax(sent_at_get(qp, qp->una, qp->last_progress) + e->rto_s,
                     e->paused_until[qp->prio]);
        else
            continue;
        if (isnan(best) || t < best)
            best = t;
    }
    return isnan(best) ? NAN : dmax(best, e->free_at);
}

/* ----- receive -------------------------------------------------------------------- */

static void on_pause(nic_engine *e, const uint8_t *f, size_t n, double now)
{
    int vector;
    uint16_t quanta[8];
    if (!nic_parse_pfc(f, n, &vector, quanta))
        return;
    e->pause_rx++;
    for (int prio = 0; prio < 8; prio++) {
        if (!(vector >> prio & 1))
            continue;
        double until = now + (double)(quanta[prio] * 512) / e->rate_bps;
        double old = e->paused_until[prio];
        e->paused_s[prio] += old > now ? until - old : dmax(0.0, until - now);
        e->paused_until[prio] = until;
    }
}

static int completed_add(nic_qp *qp, const nic_msg *m)
{
    if (qp->completed_count == qp->completed_cap) {
        size_t cap = qp->completed_cap ? qp->completed_cap * 2 : 16;
        double *c = realloc(qp->completed, cap * 4 * sizeof *c);
        if (!c)
            return -1;
        qp->completed = c;
        qp->completed_cap = cap;
    }
    double *c = qp->completed + 4 * qp->completed_count++;
    c[0] = (double)m->id;
    c[1] = (double)m->size;
    c[2] = m->posted_at;
    c[3] = m->completed_at;
    return 0;
}

/* rnic._on_nak: go back N, go back to the message's start, or resend the PSN alone. */
static void on_nak(nic_engine *e, nic_qp *qp, int64_t psn, double now)
{
    qp->naks++;
    if (e->go_back_0) {
        int64_t start = message_start(qp, psn);
        int64_t oldest = qp->msg_count ? msg_at(qp, 0)->first_psn : qp->una;
        if (oldest <= start && start <= qp->next_psn) {
            qp->retransmitted += qp->next_psn - start;
            qp->una = qp->next_psn = start;
            qp->last_progress = now;
            qp->ready_since = now;
        }
    } else if (e->selective) {
        if (qp->una <= psn && psn < qp->next_psn) {
            int idle = !qp->resend_n && !has_new(qp);
            if (nic_resend_add(qp, psn) && idle)
                qp->ready_since = now;
        }
    } else if (qp->una <= psn && psn <= qp->next_psn) {
        qp->retransmitted += qp->next_psn - psn;
        if (psn > qp->una)
            qp->una = psn;
        qp->next_psn = psn;
        qp->last_progress = now;
        qp->ready_since = now;
    }
}

static int on_ack(nic_engine *e, const nic_roce *r, double now)
{
    nic_qp *qp = nic_qp_find(e, r->dest_qp);
    if (!qp)
        return 0;
    int kind = r->syndrome & AETH_KIND_MASK;
    int64_t psn = nic_unwrap(r->psn, qp->una);
    if (kind == AETH_NAK) {
        on_nak(e, qp, psn, now);    } else if (kind == AETH_RNR_NAK) {
        qp->rnr_naks++;
        if (qp->una <= psn && psn <= qp->next_psn) {
            qp->retransmitted += qp->next_psn - psn;
            if (psn > qp->una)
                qp->una = psn;
            qp->next_psn = psn;
            qp->resend_n = 0;
            qp->last_progress = now;
            qp->next_tx_at = dmax(qp->next_tx_at, now + e->rnr_s[r->syndrome & 0x1F]);
        }
    } else if (kind == AETH_ACK && qp->una <= psn && psn < qp->next_psn) {
        if (qp->next_psn - qp->una >= NIC_MAX_OUTSTANDING)
            qp->ready_since = now;
        qp->una = psn + 1;
        qp->last_progress = now;
    }
    nic_resend_purge(qp);   /* acknowledged before they were resent */
    while (qp->msg_count && msg_at(qp, 0)->end_psn <= qp->una) {
        nic_msg *m = msg_at(qp, 0);
        m->completed_at = now;
        if (completed_add(qp, m) < 0)
            return -1;
        free(m->data);
        m->data = NULL;
        qp->msg_head = (qp->msg_head + 1) % qp->msg_cap;
        qp->msg_count--;
    }
    int64_t keep = qp->una;
    if (e->go_back_0 && qp->msg_count && msg_at(qp, 0)->first_psn < keep)
        keep = msg_at(qp, 0)->first_psn;
    if (qp->freed < keep)
        qp->freed = keep;
    return 0;
}

void nic_drain(nic_engine *e, double now)
{
    if (!e->stuck && e->drain_rate_bps < 0) {
        e->rx_buffer = 0.0;
    } else {
        double rate = e->stuck ? 0.0 : e->drain_rate_bps;
        e->rx_buffer = dmax(0.0, e->rx_buffer - (now - e->rx_drained_at) * rate / 8);
    }
    e->rx_drained_at = now;
}

int nic_rx_pfc(nic_engine *e, double now, nic_out *out)
{
    nic_drain(e, now);
    double refresh = (double)((int64_t)e->pfc_quanta * 512) / e->rate_bps / 2;
    uint8_t f[NIC_PFC_FRAME_BYTES];
    if (e->stuck || e->rx_buffer >= (double)e->rx_xoff_bytes) {
        if (!e->xoff || now >= e->next_pause_refresh) {
            e->xoff = 1;
            e->next_pause_refresh = now + refresh;
            e->pause_tx++;
            nic_build_pfc(e->pfc_tmpl, f, NIC_DATA_PRIO, (uint16_t)e->pfc_quanta);
            return nic_out_add(out, f, sizeof f);
        }
    } else if (e->xoff && e->rx_buffer <= (double)e->rx_xon_bytes) {
        e->xoff = 0;
        e->pause_tx++;
        nic_build_pfc(e->pfc_tmpl, f, NIC_DATA_PRIO, 0);
        return nic_out_add(out, f, sizeof f);
    }
    return 0;
}

/* rnic._replies: the control frames produced since `first`, as they leave now. */
static int replies(nic_engine *e, nic_out *out, size_t first, double now)
{
    /* ACKs and NAKs ride the data lane: on a credit link they too need credit, in order. */
    if (e->credit.enabled && nic_credit_route(e, out, first, now) < 0)
        return -1;
    /* ACKs, NAKs, CNPs and PAUSEs take the wire's time like data (rnic.receive). */
    for (size_t k = first; k < out->count; k++)
        nic_wire(e, out->ends[k] - (k ? out->ends[k - 1] : 0), now);
    return 0;
}

int nic_receive(nic_engine *e, const uint8_t *f, size_t n, double now, nic_out *out)
{
    if (nic_is_mac_control(f, n)) {
        on_pause(e, f, n, now);
        return 0;
    }
    if (e->credit.enabled) {
        if (nic_is_flow_control(f, n))
            return nic_credit_on_frame(e, f, n, now, out);
        if (!nic_credit_rx(e, f, n))
            return 0;  /* beyond the credit given: dropped */
    }
    nic_roce r;
    if (!nic_parse_roce(f, n, &r))
        return 0;
    if (r.opcode == OP_ACK)
        return on_ack(e, &r, now);
    if (r.opcode == OP_CNP) {
        nic_qp *qp = nic_qp_find(e, r.dest_qp);
        if (qp && qp->has_rp) {
            qp->cnps++;
            nic_rp_on_cnp(&qp->rp, now);
        }
        return 0;
    }
    size_t first = out->count;
    if (nic_on_data(e, &r, f, n, now, out) < 0)
        return -1;
    return replies(e, out, first, now);
}

int nic_tick(nic_engine *e, double now, nic_out *out)
{
    for (int k = 0; k < e->nqps; k++)
        if (e->qps[k]->has_rp)
            nic_rp_advance(&e->qps[k]->rp, now);
    if (e->selective) {
        /* the NAKs of gaps that persisted (rnic.tick) */
        size_t first = out->count;
        for (int k = 0; k < e->nqps; k++)
            if (nic_lost_naks(e, e->qps[k], now, out) < 0)
                return -1;
        if (replies(e, out, first, now) < 0)
            return -1;
    }
    if (e->credit.enabled) {
        if (nic_credit_flush(e, now, 1, out) < 0)
            return -1;
        return nic_credit_due(e, now, out);
    }
    if (e->xoff || e->stuck) {
        size_t first = out->count;
        if (nic_rx_pfc(e, now, out) < 0)
            return -1;
        for (size_t k = first; k < out->count; k++)
            nic_wire(e, out->ends[k] - (k ? out->ends[k - 1] : 0), now);
    }
    return 0;
}

double nic_next_tick(nic_engine *e)
{
    double best = NAN;
    for (int k = 0; k < e->nqps; k++) {
        if (!e->qps[k]->has_rp)
            continue;
        double t = nic_rp_next_event_at(&e->qps[k]->rp);
        if (!isnan(t) && (isnan(best) || t < best))
            best = t;
    }
    for (int k = 0; e->selective && k < e->nqps; k++) {
        double t = nic_ooo_due(&e->qps[k]->ooo, e->reorder_s);
        if (!isnan(t) && (isnan(best) || t < best))
            best = t;
    }
    if (e->credit.enabled) {
        double t = nic_credit_next_due(&e->credit);
        if (isnan(best) || t < best)
            best = t;
        if (e->drain_rate_bps > 0 && e->rx_buffer > 0 && !e->stuck) {
            /* when the drain has freed one update's worth of buffer */
            double freed = dmin(e->rx_buffer, (double)(e->credit.update_blocks * NIC_BLOCK_BYTES));
            t = e->rx_drained_at + freed * 8 / e->drain_rate_bps;
            if (t < best)
                best = t;
        }
        return best;
    }
    if (e->xoff || e->stuck) {
        double t = e->next_pause_refresh;
        if (isnan(best) || t < best)
            best = t;
        if (e->drain_rate_bps > 0 && !e->stuck) {
            double excess = e->rx_buffer - (double)e->rx_xon_bytes;
            t = e->rx_drained_at + dmax(0.0, excess) * 8 / e->drain_rate_bps;
            if (t < best)
                best = t;
        }
    }
    return best;
}
