/* The credit link of one NIC in C: emu/credit.py's CreditLink and rnic.py's credit paths.
 *
 * On a link in credit mode (NicConfig.credit) the NIC sends no PAUSE: each
 * credit VL's frames, data and ACKs alike, go only with credit from the switch,
 * and the NIC returns credit for its receive buffer in IBA flow control
 * packets (IBA vol 1, 7.9.4; the frame is emu/proto/credit.py's). ACKs and NAKs
 * on a credit VL that find no credit wait, oldest first, ahead of data
 * (rnic.ctrl_q). Every branch follows credit.py and rnic.py in the same order
 * with the same arithmetic (Python's `%` is a floor modulo: `mod12` below);
 * tests/unit/test_nic_differential.py requires equal frames and counters.
 */
#include "nic.h"

#include <math.h>
#include <string.h>

static int64_t blocks_of(size_t size) { return (int64_t)((size + NIC_BLOCK_BYTES - 1) / NIC_BLOCK_BYTES); }

static int64_t mod12(int64_t v) { return ((v % NIC_COUNTER_MOD) + NIC_COUNTER_MOD) % NIC_COUNTER_MOD; }

void nic_credit_init(nic_engine *e, const int *vls, int nvls, int64_t capacity_blocks,
                     int64_t update_blocks, double refresh_s,
                     const uint8_t tmpl[NIC_FC_FRAME_BYTES], double now)
{
    nic_credit *c = &e->credit;
    memset(c, 0, sizeof *c);
    c->enabled = 1;
    for (int i = 0; i < nvls && i < NIC_PRIOS; i++) {
        int vl = vls[i];
        if (vl < 0 || vl >= NIC_PRIOS || c->is_vl[vl])
            continue;  /* nicpath.py passes CreditSpec's checked, distinct priorities */
        c->vls[c->nvls++] = vl;
        c->is_vl[vl] = 1;
        nic_vl *st = &c->vl[vl];
        st->blocked_since = NAN;
        st->unblocked_at = -INFINITY;
        st->next_refresh = now;
    }
    c->capacity_blocks = capacity_blocks;
    c->capacity_bytes = capacity_blocks * NIC_BLOCK_BYTES;
    c->update_blocks = update_blocks;
    c->refresh_s = refresh_s;
    memcpy(c->fc_tmpl, tmpl, NIC_FC_FRAME_BYTES);
}

void nic_credit_free(nic_engine *e)
{
    nic_out_free(&e->credit.ctrl);
    nic_out_free(&e->credit.routed);
}

int nic_is_flow_control(const uint8_t *f, size_t n)
{
    return n >= 14 && ((uint32_t)f[12] << 8 | f[13]) == NIC_FC_ETHERTYPE;
}

/* rnic._DSCP_PRIO by the IPv4 DSCP; 0 for anything else. */
int nic_prio_of(const uint8_t *f, size_t n)
{
    if (n <= 15 || f[12] != 0x08 || f[13] != 0x00)
        return 0;
    switch (f[15] >> 2) {
    case 26: return NIC_DATA_PRIO;   /* roce.DSCP_DATA */
    case 34: return 4;               /* rnic.DSCP_SECOND_CLASS -> SECOND_CLASS_PRIO */
    case 48: return 6;               /* roce.DSCP_CNP -> rnic.CNP_PRIO */
    default: return 0;
    }
}

/* ----- transmit (CreditLink's) ------------------------------------------------------ */

int nic_credit_blocks(const nic_credit *c, int vl)
{
    const nic_vl *st = &c->vl[vl];
    if (!st->has_limit)
        return 0;
    int64_t avail = mod12(st->limit - st->fctbs);
    return avail <= NIC_MAX_CREDIT_BLOCKS ? (int)avail : 0;
}

int nic_credit_blocked(const nic_credit *c, int prio)
{
    return c->enabled && prio >= 0 && prio < NIC_PRIOS && c->is_vl[prio] &&
           !isnan(c->vl[prio].blocked_since);
}

static void unblock(nic_vl *st, double now)
{
    st->blocked_s += now - st->blocked_since;
    st->blocked_since = NAN;
    st->waiting_blocks = 0;
    st->unblocked_at = now;
}

int nic_credit_may_send(nic_credit *c, int prio, size_t size, double now)
{
    nic_vl *st = &c->vl[prio];
    int64_t need = blocks_of(size);
    if (nic_credit_blocks(c, prio) >= need) {
        if (!isnan(st->blocked_since))
            unblock(st, now);
        return 1;
    }
    if (isnan(st->blocked_since)) {
        st->blocked_since = now;
        st->blocked_count++;
    }
    st->waiting_blocks = need;
    return 0;
}

void nic_credit_sent(nic_credit *c, int prio, size_t size)
{
    c->vl[prio].fctbs += blocks_of(size);
    c->vl[prio].tx_frames++;
}

double nic_credit_unblocked_at(const nic_credit *c, int prio)
{
    return c->is_vl[prio] ? c->vl[prio].unblocked_at : -INFINITY;
}

/* ----- receive ----------------------------------------------------------------------- */

int nic_credit_rx(nic_engine *e, const uint8_t *f, size_t n)
{
    nic_credit *c = &e->credit;
    if (!c->enabled)
        return 1;
    int vl = nic_prio_of(f, n);
    if (!c->is_vl[vl])
        return 1;
    /* CreditLink.received */
    nic_vl *st = &c->vl[vl];
    int64_t b = blocks_of(n);
    st->abr += b;
    st->rx_frames++;
    if (!st->has_advertised || st->abr > st->advertised) {
        st->overruns++;
        st->abr -= b;
        c->overruns++;
        return 0;
    }
    return 1;
}

/* The waiting control frames that credit now lets go, oldest first (rnic._flush_ctrl). */
int nic_credit_flush(nic_engine *e, double now, int charge_wire, nic_out *out)
{
    nic_credit *c = &e->credit;
    nic_out *q = &c->ctrl;
    while (c->ctrl_head < q->count) {
        size_t start = c->ctrl_head ? q->ends[c->ctrl_head - 1] : 0;
        size_t len = q->ends[c->ctrl_head] - start;
        const uint8_t *f = q->buf + start;
        int prio = nic_prio_of(f, len);
        if (!nic_credit_may_send(c, prio, len, now))
            break;
        nic_credit_sent(c, prio, len);
        if (charge_wire)
            nic_wire(e, len, now);
        if (nic_out_add(out, f, len) < 0)
            return -1;
        c->ctrl_head++;
    }
    if (c->ctrl_head == q->count) {
        nic_out_clear(q);
        c->ctrl_head = 0;
    }
    return 0;
}

/* A flow control frame (rnic.receive's credit branch, CreditLink.on_fc). */
int nic_credit_on_frame(nic_engine *e, const uint8_t *f, size_t n, double now, nic_out *out)
{
    nic_credit *c = &e->credit;
    /* credit.parse: 20 bytes at least, Op 0 or 1 */
    if (n >= 20 && (f[14] >> 4) <= 1) {
        int64_t fctbs = ((int64_t)(f[14] & 0x0F) << 8) | f[15];
        int vl = f[16] >> 4;
        int64_t fccl = ((int64_t)(f[16] & 0x0F) << 8) | f[17];
        if (vl < NIC_PRIOS && c->is_vl[vl]) {
            nic_vl *st = &c->vl[vl];
            st->fc_rx++;
            st->has_limit = 1;
            st->limit = fccl;
            int64_t delta = mod12(fctbs - st->abr);
            if (delta >= NIC_COUNTER_MOD / 2)
                delta -= NIC_COUNTER_MOD;
            if (delta) {
                st->abr += delta;
                st->abr_resyncs++;
            }
            if (!isnan(st->blocked_since) && nic_credit_blocks(c, vl) >= st->waiting_blocks)
                unblock(st, now);
            c->fc_rx++;
        }
    }
    return nic_credit_flush(e, now, 1, out);
}

/* Frames [first, out->count) a receive produced: those on a credit VL join the
 * waiting control frames, the others stay in order, then what credit lets go
 * follows them (rnic.receive). */
int nic_credit_route(nic_engine *e, nic_out *out, size_t first, double now)
{
    nic_credit *c = &e->credit;
    if (first == out->count)
        return 0;
    size_t base = first ? out->ends[first - 1] : 0;
    /* The produced frames are copied aside (into a buffer kept for the next
     * receive: no allocation per frame), then `out` is rebuilt from `first`. */
    nic_out *mine = &c->routed;
    nic_out_clear(mine);
    size_t start = base;
    for (size_t k = first; k < out->count; k++) {
        size_t end = out->ends[k];
        if (nic_out_add(mine, out->buf + start, end - start) < 0)
            return -1;
        start = end;
    }
    out->count = first;
    out->len = base;
    start = 0;
    for (size_t k = 0; k < mine->count; k++) {
        size_t end = mine->ends[k];
        const uint8_t *f = mine->buf + start;
        if (nic_out_add(c->is_vl[nic_prio_of(f, end - start)] ? &c->ctrl : out, f, end - start) < 0)
            return -1;
        start = end;
    }
    return nic_credit_flush(e, now, 0, out);
}

/* ----- updates ------------------------------------------------------------------------- */

/* Credit updates and refreshes due (rnic._credit_due, CreditLink.due). */
int nic_credit_due(nic_engine *e, double now, nic_out *out)
{
    nic_credit *c = &e->credit;
    nic_drain(e, now);
    double held = e->stuck ? (double)c->capacity_bytes : e->rx_buffer;
    uint8_t f[NIC_FC_FRAME_BYTES];
    for (int i = 0; i < c->nvls; i++) {
        int vl = c->vls[i];
        nic_vl *st = &c->vl[vl];
        /* CreditLink.fccl: max(0, int(capacity - held)) // 64 free blocks */
        double room = (double)c->capacity_bytes - held;
        int64_t free_blocks = room > 0 ? (int64_t)room / NIC_BLOCK_BYTES : 0;
        int64_t limit = st->abr + free_blocks;
        if (!st->has_advertised || now >= st->next_refresh ||
            limit - st->advertised >= c->update_blocks) {
            st->has_advertised = 1;
            st->advertised = limit;
            st->next_refresh = now + c->refresh_s;
            st->fc_tx++;
            /* credit.build: Op 0 | FCTBS, VL | FCCL, LPCRC 0 */
            memcpy(f, c->fc_tmpl, sizeof f);
            int64_t fctbs = mod12(st->fctbs), fccl = mod12(limit);
            f[14] = (uint8_t)(fctbs >> 8);
            f[15] = (uint8_t)fctbs;
            f[16] = (uint8_t)(vl << 4 | (int)(fccl >> 8));
            f[17] = (uint8_t)fccl;
            f[18] = f[19] = 0;
            if (nic_out_add(out, f, sizeof f) < 0)
                return -1;
            nic_wire(e, sizeof f, now);
            c->fc_tx++;
        }
    }
    return 0;
}

double nic_credit_next_due(const nic_credit *c)
{
    double best = INFINITY;
    for (int i = 0; i < c->nvls; i++)
        if (c->vl[c->vls[i]].next_refresh < best)
            best = c->vl[c->vls[i]].next_refresh;
    return best;
}

size_t nic_credit_waiting(const nic_credit *c) { return c->ctrl.count - c->ctrl_head; }
