/* "Selective" loss recovery in C: emu/host/reorder.py's ReorderWindow and
 * rnic.SendQP.resend.
 *
 * The responder's window holds the packets of one QP that arrived ahead of its
 * expected PSN, each in slot psn % window (every held PSN lies in
 * (expected, expected + window), so no two share a slot): whether it asked for
 * an ACK, whether it ends a message, its payload length and, for a QP that
 * delivers data, its payload at the slot's place (window x MTU bytes,
 * allocated when the QP starts delivering data, never per frame). The gap's
 * age is the earliest arrival still held; a round of NAKs names the holes
 * below the highest PSN held for the reorder timeout (reorder.py says why).
 *
 * The requester's resend set is the PSNs the responder NAKed, ascending, at
 * most NIC_MAX_OUTSTANDING (each lies in [una, next_psn)).
 */
#include "nic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int nic_ooo_init(nic_ooo *o, int64_t window)
{
    memset(o, 0, sizeof *o);
    o->window = window;
    o->flags = calloc((size_t)window, 1);
    o->at = calloc((size_t)window, sizeof *o->at);
    o->len = calloc((size_t)window, sizeof *o->len);
    o->gap_since = o->round_at = NAN;
    if (!o->flags || !o->at || !o->len) {
        nic_ooo_free(o);
        return -1;
    }
    return 0;
}

int nic_ooo_alloc_data(nic_ooo *o, int64_t mtu)
{
    if (o->data)
        return 0;
    o->data = malloc((size_t)(o->window * mtu));
    if (!o->data)
        return -1;
    o->mtu = mtu;
    return 0;
}

void nic_ooo_drop_data(nic_ooo *o)
{
    if (!o->flags)
        return;
    for (int64_t i = 0; i < o->window; i++)
        o->flags[i] &= (uint8_t)~NIC_OOO_DATA;
    o->data_bytes = 0;
    free(o->data);
    o->data = NULL;
}

void nic_ooo_free(nic_ooo *o)
{
    free(o->flags);
    free(o->at);
    free(o->len);
    free(o->data);
    o->flags = NULL;
    o->at = NULL;
    o->len = NULL;
    o->data = NULL;
}

static size_t slot_of(const nic_ooo *o, int64_t psn) { return (size_t)(psn % o->window); }

/* The caller has checked that psn lies in (expected, expected + window). */
int nic_ooo_is_held(const nic_ooo *o, int64_t psn)
{
    return (o->flags[slot_of(o, psn)] & NIC_OOO_HELD) != 0;
}

/* `keep`: the QP delivers data; its payload (len <= the slot's MTU) is copied to its place. */
void nic_ooo_place(nic_ooo *o, int64_t psn, double now, int ack_req, int end,
                   const uint8_t *payload, size_t len, int keep)
{
    size_t s = slot_of(o, psn);
    if (!o->held)
        o->gap_since = now;   /* arrivals come in time order: the earliest held */
    uint8_t fl = NIC_OOO_HELD | (ack_req ? NIC_OOO_ACK_REQ : 0) | (end ? NIC_OOO_END : 0);
    if (keep && o->data && (int64_t)len <= o->mtu) {
        fl |= NIC_OOO_DATA;
        if (len)
            memcpy(o->data + s * (size_t)o->mtu, payload, len);
        o->data_bytes += (int64_t)len;
    }
    o->flags[s] = fl;
    o->at[s] = now;
    o->len[s] = (uint32_t)len;
    o->held++;
    if (psn + 1 > o->hi)
        o->hi = psn + 1;
}

int nic_ooo_pop(nic_ooo *o, int64_t psn, int *flags, size_t *len, const uint8_t **data)
{
    if (!o->held || psn < 0 || psn >= o->hi)
        return 0;
    size_t s = slot_of(o, psn);
    if (!(o->flags[s] & NIC_OOO_HELD))
        return 0;
    *flags = o->flags[s];
    *len = o->len[s];
    *data = NULL;
    if (o->flags[s] & NIC_OOO_DATA) {
        *data = o->data + s * (size_t)o->mtu;
        o->data_bytes -= (int64_t)o->len[s];
    }
    o->flags[s] = 0;
    o->held--;
    return 1;
}

void nic_ooo_settle(nic_ooo *o, int64_t expected)
{
    o->gap_since = NAN;
    for (int64_t p = expected; o->held && p < o->hi; p++) {
        size_t s = slot_of(o, p);
        if ((o->flags[s] & NIC_OOO_HELD) && (isnan(o->gap_since) || o->at[s] < o->gap_since))
            o->gap_since = o->at[s];
    }
}

double nic_ooo_due(const nic_ooo *o, double timeout_s)
{
    if (isnan(o->gap_since))
        return NAN;
    double t = o->gap_since + timeout_s;
    if (!isnan(o->round_at) && o->round_at + timeout_s > t)
        t = o->round_at + timeout_s;
    return t;
}

size_t nic_ooo_lost(nic_ooo *o, int64_t expected, double now, double timeout_s, int64_t *holes)
{
    double due = nic_ooo_due(o, timeout_s);
    if (isnan(due) || now < due)
        return 0;
    o->round_at = now;
    int64_t top = expected;
    for (int64_t p = o->hi - 1; p > expected; p--) {
        size_t s = slot_of(o, p);
        if ((o->flags[s] & NIC_OOO_HELD) && o->at[s] + timeout_s <= now) {
            top = p;
            break;
        }
    }
    size_t n = 0;
    for (int64_t p = expected; p < top && n < NIC_NAKS_PER_ROUND; p++)
        if (p == expected || !(o->flags[slot_of(o, p)] & NIC_OOO_HELD))
            holes[n++] = p;
    return n;
}

/* ----- the requester's resend set ------------------------------------------------ */

int nic_resend_add(nic_qp *qp, int64_t psn)
{
    size_t lo = 0, hi = qp->resend_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (qp->resend[mid] < psn)
            lo = mid + 1;
        else
            hi = mid;
    }
    if ((lo < qp->resend_n && qp->resend[lo] == psn) || qp->resend_n == NIC_MAX_OUTSTANDING)
        return 0;
    memmove(qp->resend + lo + 1, qp->resend + lo, (qp->resend_n - lo) * sizeof *qp->resend);
    qp->resend[lo] = psn;
    qp->resend_n++;
    return 1;
}

void nic_resend_purge(nic_qp *qp)
{
    size_t k = 0;
    while (k < qp->resend_n && qp->resend[k] < qp->una)
        k++;
    if (k) {
        memmove(qp->resend, qp->resend + k, (qp->resend_n - k) * sizeof *qp->resend);
        qp->resend_n -= k;
    }
}
