/* The responder side of the queue pairs in C: emu/host/responder.py, per frame.
 *
 * A data packet at its QP: CE marks turned into CNPs (DCQCN's notification
 * point), the expected PSN accepted (the host receive buffer charged, its
 * PAUSE), an ACK when asked, the sequence NAK on the first gap (go-back-N;
 * go-back-0 also throws the partial message away), the RNR NAK when the inbox
 * is full, duplicates answered, whole messages reassembled into the inbox;
 * "selective": packets held out of order in the QP's window (nic_reorder.c),
 * the cumulative ACK over what became contiguous, the NAKs of holes found
 * lost. Every branch follows responder.py's in the same order, so that the
 * differential test can require equal frames and counters.
 */
#include "nic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int MESSAGE_END[256] = {
    [OP_SEND_LAST] = 1, [OP_SEND_ONLY] = 1, [OP_WRITE_LAST] = 1, [OP_WRITE_ONLY] = 1,
};

static int parts_add(nic_qp *qp, const uint8_t *p, size_t n)
{
    if (!n)
        return 0;
    if (qp->parts_len + n > qp->parts_cap) {
        size_t cap = qp->parts_cap ? qp->parts_cap : 4096;
        while (cap < qp->parts_len + n)
            cap *= 2;
        uint8_t *b = realloc(qp->parts, cap);
        if (!b)
            return -1;
        qp->parts = b;
        qp->parts_cap = cap;
    }
    memcpy(qp->parts + qp->parts_len, p, n);
    qp->parts_len += n;
    return 0;
}

static int inbox_push(nic_qp *qp)
{
    if (qp->inbox_count == qp->inbox_cap) {
        size_t cap = qp->inbox_cap ? qp->inbox_cap * 2 : 16;
        nic_inbox_msg *n = malloc(cap * sizeof *n);
        if (!n)
            return -1;
        for (size_t i = 0; i < qp->inbox_count; i++)
            n[i] = qp->inbox[(qp->inbox_head + i) % qp->inbox_cap];
        free(qp->inbox);
        qp->inbox = n;
        qp->inbox_cap = cap;
        qp->inbox_head = 0;
    }
    uint8_t *data = malloc(qp->parts_len ? qp->parts_len : 1);
    if (!data)
        return -1;
    if (qp->parts_len)
        memcpy(data, qp->parts, qp->parts_len);
    nic_inbox_msg *m = &qp->inbox[(qp->inbox_head + qp->inbox_count) % qp->inbox_cap];
    qp->inbox_count++;
    m->msn = qp->msn;
    m->len = qp->parts_len;
    m->data = data;
    qp->inbox_bytes += (int64_t)qp->parts_len + NIC_INBOX_OVERHEAD;
    qp->parts_len = 0;
    return 0;
}

/* An ACKNOWLEDGE of `psn` with `syndrome` from QP `qp`. */
static int send_ack(nic_engine *e, nic_qp *qp, int64_t psn, int syndrome, nic_out *out)
{
    size_t n = nic_build_ack(&qp->data_hdr, e->scratch, qp->peer_qpn, (uint32_t)psn & PSN_MASK,
                             (uint32_t)qp->msn & PSN_MASK, syndrome);
    return nic_out_add(out, e->scratch, n);
}

/* rnic._deliver: the expected PSN's packet is in; `end`: its message's last. */
static int deliver(nic_qp *qp, int64_t size, int end)
{
    qp->expected++;
    qp->rx_packets++;
    qp->rx_bytes += size;
    qp->msg_bytes += size;
    if (!end)
        return 0;
    qp->msg_first = qp->expected;
    qp->msg_bytes = 0;
    qp->msn++;
    qp->messages_received++;
    return qp->deliver_data ? inbox_push(qp) : 0;
}

/* rnic._advance: the held packets that follow the expected PSN; 1 if one asked for an ACK. */
static int advance(nic_qp *qp)
{
    int owed = 0, flags;
    size_t len;
    const uint8_t *data;
    while (nic_ooo_pop(&qp->ooo, qp->expected, &flags, &len, &data)) {
        if (qp->deliver_data && data && parts_add(qp, data, len) < 0)
            return -1;
        if (deliver(qp, (int64_t)len, flags & NIC_OOO_END) < 0)
            return -1;
        owed = owed || (flags & NIC_OOO_ACK_REQ);
    }
    nic_ooo_settle(&qp->ooo, qp->expected);
    return owed;
}

/* rnic._accept: the expected PSN arrived. */
static int accept(nic_engine *e, nic_qp *qp, const nic_roce *r, const uint8_t *f, size_t size,
                  double now, nic_out *out)
{
    nic_drain(e, now);
    if (e->rx_buffer + (double)size > (double)e->rx_buffer_bytes) {
        e->rx_overflow++;
        return 0;
    }
    if (qp->deliver_data) {
        if (qp->inbox_bytes + (int64_t)qp->parts_len + qp->ooo.data_bytes +
                (int64_t)r->payload_len > e->inbox_max_bytes) {
            qp->nak_sent = 1;
            qp->rnr_naks_sent++;
            return send_ack(e, qp, qp->expected, AETH_RNR_NAK | NIC_MIN_RNR_TIMER, out);
        }
        if (parts_add(qp, f + r->payload_offset, r->payload_len) < 0)
            return -1;
    }
    qp->nak_sent = 0;
    e->rx_buffer += (double)size;
    if (deliver(qp, (int64_t)r->payload_len, MESSAGE_END[r->opcode]) < 0)
        return -1;
    int ack = r->ack_req;
    if (qp->ooo.held) {
        int owed = advance(qp);
        if (owed < 0)
            return -1;
        ack = owed || ack;
    }
    if (ack && send_ack(e, qp, qp->expected - 1, AETH_ACK | AETH_CREDIT_INVALID, out) < 0)
        return -1;
    return e->credit.enabled ? 0 : nic_rx_pfc(e, now, out);
}

static int duplicate(nic_engine *e, nic_qp *qp, const nic_roce *r, nic_out *out)
{
    qp->duplicates++;
    if (!r->ack_req)
        return 0;
    return send_ack(e, qp, qp->expected - 1, AETH_ACK | AETH_CREDIT_INVALID, out);
}

static void ahead(nic_qp *qp, int64_t psn)
{
    qp->out_of_order++;
    if (psn - qp->expected > qp->reorder_depth_max)
        qp->reorder_depth_max = psn - qp->expected;
}

static int nak_base(nic_engine *e, nic_qp *qp, nic_out *out)
{
    qp->nak_sent = 1;
    qp->naks_sent++;
    return send_ack(e, qp, qp->expected, AETH_NAK_PSN_SEQ_ERROR, out);
}

/* rnic._on_psn_gap: the sequence NAK, once until the gap fills (go-back-N and -0). */
static int psn_gap(nic_engine *e, nic_qp *qp, int64_t psn, nic_out *out)
{
    ahead(qp, psn);
    if (qp->nak_sent)
        return 0;
    if (e->go_back_0 && qp->expected > qp->msg_first) {
        qp->discarded_packets += qp->expected - qp->msg_first;
        qp->discarded_bytes += qp->msg_bytes;
        qp->expected = qp->msg_first;
        qp->msg_bytes = 0;
        qp->parts_len = 0;
    }
    return nak_base(e, qp, out);
}

/* rnic._place: hold `psn` at its place in the window, no NAK. */
static int place(nic_engine *e, nic_qp *qp, int64_t psn, const nic_roce *r, const uint8_t *f,
                 size_t size, double now, nic_out *out)
{
    if ((int64_t)r->payload_len > e->mtu_payload)
        return 0;   /* longer than a packet's place: malformed, dropped */
    nic_drain(e, now);
    if (e->rx_buffer + (double)size > (double)e->rx_buffer_bytes) {
        e->rx_overflow++;
        return 0;
    }
    ahead(qp, psn);
    nic_ooo_place(&qp->ooo, psn, now, r->ack_req, MESSAGE_END[r->opcode], f + r->payload_offset,
                  r->payload_len, qp->deliver_data);
    e->rx_buffer += (double)size;
    return e->credit.enabled ? 0 : nic_rx_pfc(e, now, out);
}

/* rnic._lost_naks: the NAKs of the holes a persisting gap shows lost, if a round is due. */
int nic_lost_naks(nic_engine *e, nic_qp *qp, double now, nic_out *out)
{
    int64_t holes[NIC_NAKS_PER_ROUND];
    size_t n = nic_ooo_lost(&qp->ooo, qp->expected, now, e->reorder_s, holes);
    qp->naks_sent += (int64_t)n;
    for (size_t k = 0; k < n; k++)
        if (send_ack(e, qp, holes[k], AETH_NAK_PSN_SEQ_ERROR, out) < 0)
            return -1;
    return 0;
}

/* rnic._on_data_selective */
static int on_data_selective(nic_engine *e, nic_qp *qp, int64_t psn, const nic_roce *r,
                             const uint8_t *f, size_t size, double now, nic_out *out)
{
    int rc;
    if (psn == qp->expected) {
        rc = accept(e, qp, r, f, size, now, out);
    } else if (psn < qp->expected) {
        rc = duplicate(e, qp, r, out);
    } else if (psn - qp->expected >= qp->ooo.window) {
        ahead(qp, psn);   /* no place for it: the hole at the window's base is a loss, now */
        qp->beyond_window++;
        rc = qp->nak_sent ? 0 : nak_base(e, qp, out);
    } else if (nic_ooo_is_held(&qp->ooo, psn)) {
        rc = duplicate(e, qp, r, out);
    } else {
        rc = place(e, qp, psn, r, f, size, now, out);
    }
    return rc < 0 ? -1 : nic_lost_naks(e, qp, now, out);
}

int nic_on_data(nic_engine *e, const nic_roce *r, const uint8_t *f, size_t size, double now,
                nic_out *out)
{
    nic_qp *qp = nic_qp_find(e, r->dest_qp);
    if (!qp)
        return 0;
    uint8_t *b = e->scratch;
    if (r->ecn == ECN_CE) {
        qp->ce_marked++;
        if (e->dcqcn) {
            /* dcqcn.NotificationPoint.on_ce */
            e->np_ce_received++;
            if (!isnan(qp->last_cnp_at) && now - qp->last_cnp_at < e->dcqcn_p.cnp_interval_s) {
                e->np_cnps_suppressed++;
            } else {
                qp->last_cnp_at = now;
                e->np_cnps_sent++;
                if (nic_out_add(out, b, nic_build_cnp(&qp->cnp_hdr, b, qp->peer_qpn)) < 0)
                    return -1;
                e->cnps_sent++;
            }
        }
    }
    int64_t psn = nic_unwrap(r->psn, qp->expected);
    if (e->selective)
        return on_data_selective(e, qp, psn, r, f, size, now, out);
    if (psn == qp->expected)
        return accept(e, qp, r, f, size, now, out);
    if (psn > qp->expected)
        return psn_gap(e, qp, psn, out);
    return duplicate(e, qp, r, out);
}
