/* The exact-match cache of one switch and the compiled action lists it holds.
 *
 * The idea is OVS dpif-netdev's EMC: a frame's key (parse.cache_key's bytes:
 * the headers that decide the pipeline's answer, none that change per
 * packet) maps to what the pipeline decided for it. Python's pipeline
 * compiles that decision (pipeline.py's "program") into fp_op lists when it
 * answers an upcall; any flow-mod, group-mod, meter-mod or port change clears
 * the whole cache (pipeline.invalidate), after Python has taken the entries'
 * counters. Entries carry the packets and bytes that hit them since Python
 * last took them, and the time of the last hit (idle timeouts).
 *
 * Memory: the table starts small and doubles up to FP_CACHE_MAX entries;
 * growth happens on insert (an upcall), never on a hit. A full cache refuses
 * new entries (those keys stay on the slow path) until Python clears it.
 */
#include "fp.h"

#include <stdlib.h>
#include <string.h>

#define FP_CACHE_START 256

static uint64_t
key_hash(const uint8_t *key)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, 64 bits */
    for (int i = 0; i < FP_KEY_BYTES; i++) {
        h ^= key[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

int
fp_cache_init(fp_cache *c)
{
    memset(c, 0, sizeof *c);
    c->slots = calloc(FP_CACHE_START, sizeof *c->slots);
    if (!c->slots)
        return -1;
    c->nslots = FP_CACHE_START;
    return 0;
}

void
fp_cache_free(fp_cache *c)
{
    free(c->slots);
    free(c->ops);
    memset(c, 0, sizeof *c);
}

void
fp_cache_clear(fp_cache *c)
{
    memset(c->slots, 0, (size_t)c->nslots * sizeof *c->slots);
    c->count = 0;
    c->nops = 0;
}

fp_entry *
fp_cache_lookup(fp_cache *c, const uint8_t *key)
{
    uint32_t mask = c->nslots - 1;
    for (uint32_t i = (uint32_t)key_hash(key) & mask;; i = (i + 1) & mask) {
        fp_entry *e = &c->slots[i];
        if (!e->used)
            return NULL;
        if (!memcmp(e->key, key, FP_KEY_BYTES))
            return e;
    }
}

static fp_entry *
place(fp_entry *slots, uint32_t nslots, const uint8_t *key)
{
    uint32_t mask = nslots - 1;
    for (uint32_t i = (uint32_t)key_hash(key) & mask;; i = (i + 1) & mask)
        if (!slots[i].used || !memcmp(slots[i].key, key, FP_KEY_BYTES))
            return &slots[i];
}

static int
grow(fp_cache *c)
{
    uint32_t n = c->nslots * 2;
    fp_entry *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -1;
    for (uint32_t i = 0; i < c->nslots; i++)
        if (c->slots[i].used)
            *place(slots, n, c->slots[i].key) = c->slots[i];
    free(c->slots);
    c->slots = slots;
    c->nslots = n;
    return 0;
}

/* Install `ops` under `key` (an existing entry for the key is replaced, its
 * counts kept). NULL when the cache is full. */
fp_entry *
fp_cache_insert(fp_cache *c, const uint8_t *key, const fp_op *ops, uint32_t n)
{
    if (c->count >= FP_CACHE_MAX)
        return NULL;
    if ((c->count + 1) * 2 > c->nslots && c->nslots < 2 * FP_CACHE_MAX && grow(c) < 0)
        return NULL;
    if (n && c->nops + n > c->ops_cap) {
        uint32_t cap = c->ops_cap ? c->ops_cap : 1024;
        while (cap < c->nops + n)
            cap *= 2;
        fp_op *grown = realloc(c->ops, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->ops = grown;
        c->ops_cap = cap;
    }
    if (n)
        memcpy(c->ops + c->nops, ops, (size_t)n * sizeof *ops);
    fp_entry *e = place(c->slots, c->nslots, key);
    if (!e->used) {
        memset(e, 0, sizeof *e);
        memcpy(e->key, key, FP_KEY_BYTES);
        e->used = 1;
        c->count++;
    }
    e->op_off = c->nops;
    e->op_len = n;
    c->nops += n;
    return e;
}

/* 1 when ops[0..n) is a list fp_exec may run: known codes, supported fields,
 * every SUB and ADAPT inside the list, each ADAPT's options well formed
 * (fp_ar_check), no ARM outside an ADAPT. An upcall installs nothing else. */
int
fp_ops_check(const fp_op *ops, uint32_t n, int depth)
{
    if (depth > 16)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        const fp_op *op = &ops[i];
        switch (op->code) {
        case FP_OP_OUT:
        case FP_OP_DEAD:
        case FP_OP_DECTTL:
        case FP_OP_METER:
            break;
        case FP_OP_SET:
            if (!fp_set_supported(op->field))
                return 0;
            break;
        case FP_OP_SUB:
            if (op->sub_len > n - i - 1 || !fp_ops_check(op + 1, op->sub_len, depth + 1))
                return 0;
            i += op->sub_len;
            break;
        case FP_OP_ADAPT:
        case FP_OP_UGAL:
            if (op->sub_len > n - i - 1 || !fp_ar_check(op, op + 1, op->sub_len, depth))
                return 0;
            i += op->sub_len;
            break;
        default:
            return 0;
        }
    }
    return 1;
}

/* Run a compiled list on a frame (pipeline._run for the ops C owns). The
 * frame is copied before the first rewrite; a SUB runs on a copy of the
 * frame as it is then, as a group bucket does. */
void
fp_exec(fp_switch *sw, uint32_t in_port, const fp_op *ops, uint32_t n, const uint8_t *f,
        size_t len, double now, int depth)
{
    uint8_t buf[FP_MAX_FRAME];
    const uint8_t *cur = f;
    if (len > FP_MAX_FRAME || depth > 16)
        return;
    for (uint32_t i = 0; i < n; i++) {
        const fp_op *op = &ops[i];
        switch (op->code) {
        case FP_OP_OUT:
            fp_switch_enqueue(sw, in_port, op->port, cur, len, op->queue, now);
            break;
        case FP_OP_DEAD: {
            sw->dropped_port_down++;
            fp_port *p = op->port ? fp_port_get(sw, op->port) : NULL;
            if (p)
                p->c.tx_dropped++;
            break;
        }
        case FP_OP_DECTTL:
            if (cur != buf) {
                memcpy(buf, cur, len);
                cur = buf;
            }
            if (!fp_dec_nw_ttl(buf, len)) {
                sw->dropped_ttl++;
                return;
            }
            break;
        case FP_OP_SET:
            if (cur != buf) {
                memcpy(buf, cur, len);
                cur = buf;
            }
            len = fp_apply_set(buf, len, op->field, op->value);
            break;
        case FP_OP_METER: {
            /* OF1.3 5.9: before the entry's actions; a drop ends the list */
            fp_meter *m = fp_meter_get(sw, op->value);
            if (!m)
                break;
            const fp_band *band = fp_meter_apply(m, len, now);
            if (!band)
                break;
            if (band->type == FP_BAND_DROP) {
                sw->dropped_meter++;
                return;
            }
            int tos = fp_tos(cur, len);
            if (tos < 0)
                break;
            if (cur != buf) {
                memcpy(buf, cur, len);
                cur = buf;
            }
            len = fp_apply_set(buf, len, FP_F_IP_DSCP,
                               (uint64_t)fp_remark_dscp(tos >> 2, band->prec_level));
            break;
        }
        case FP_OP_SUB: {
            uint32_t sub = op->sub_len;
            if (sub > n - i - 1)
                return;
            fp_exec(sw, in_port, ops + i + 1, sub, cur, len, now, depth + 1);
            i += sub;
            break;
        }
        case FP_OP_ADAPT:
        case FP_OP_UGAL: {
            /* a bucket chosen per packet; it runs on the frame as it is now, as a SUB */
            uint32_t span = op->sub_len;
            if (span > n - i - 1)
                return;
            fp_ar_exec(sw, in_port, op, ops + i + 1, span, cur, len, now, depth);
            i += span;
            break;
        }
        default:
            return;
        }
    }
}
