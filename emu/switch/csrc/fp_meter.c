/* OpenFlow 1.3 meters on the compiled path: the token buckets a cached flow's
 * meter instruction runs per frame (emu/switch/meter.py is the reference).
 *
 * Python's MeterTable keeps the meters (ids, flags, bands, OFPMP_METER
 * answers); a meter that a cached program names is given a slot here and
 * its buckets and counters are copied in (fastpath.FastDatapath pushes
 * them after the slow path ran, and pulls them back before Python reads or
 * applies a meter again). While it is here, C's copy is the one that counts.
 * A meter-mod clears the cache, and with it every slot, after the pull.
 */
#include "fp.h"

#include <stdlib.h>
#include <string.h>

/* meter.Meter.apply: refill every band, take the packet's cost from each band
 * that can pay; the highest-rate band that cannot is the one exceeded. */
const fp_band *
fp_meter_apply(fp_meter *m, size_t size, double now)
{
    m->packets_in++;
    m->bytes_in += size;
    double elapsed = now - m->last;
    if (elapsed < 0.0)
        elapsed = 0.0;
    m->last = now;
    double cost = m->pktps ? 1.0 : (double)size * 8.0;
    double scale = m->pktps ? 1.0 : 1000.0; /* kbit/s -> bit/s */
    fp_band *exceeded = NULL;
    for (int i = 0; i < m->nbands; i++) {
        fp_band *b = &m->bands[i];
        /* The same operations in the same order as Python's floats. */
        double filled = b->tokens + elapsed * b->rate * scale;
        b->tokens = b->capacity <= filled ? b->capacity : filled;
        if (b->tokens >= cost - 1e-9)
            b->tokens -= cost;
        else if (!exceeded)
            exceeded = b;
    }
    if (exceeded) {
        exceeded->packets++;
        exceeded->bytes += size;
    }
    return exceeded;
}

/* meter.remark_dscp: an AF DSCP (AFxy = 8x + 2y, RFC 2597) with its drop
 * precedence raised by `prec`, at most to 3; any other DSCP as it is. */
int
fp_remark_dscp(int dscp, int prec)
{
    int af_class = dscp >> 3, rest = dscp & 7, y = rest >> 1;
    if (af_class < 1 || af_class > 4 || (rest & 1) || y < 1 || y > 3)
        return dscp;
    y += prec;
    return (af_class << 3) | ((y > 3 ? 3 : y) << 1);
}

/* The slot for a meter, grown as needed; NULL past FP_MAX_METERS or out of memory. */
fp_meter *
fp_meter_slot(fp_switch *sw, uint32_t slot)
{
    if (slot >= FP_MAX_METERS)
        return NULL;
    if (slot >= sw->nmeters) {
        uint32_t n = sw->nmeters ? sw->nmeters : 16;
        while (n <= slot)
            n *= 2;
        fp_meter *grown = realloc(sw->meters, (size_t)n * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + sw->nmeters, 0, (size_t)(n - sw->nmeters) * sizeof *grown);
        sw->meters = grown;
        sw->nmeters = n;
    }
    return &sw->meters[slot];
}

/* A slot an installed op names, or NULL when it holds no meter. */
fp_meter *
fp_meter_get(fp_switch *sw, uint64_t slot)
{
    if (slot >= sw->nmeters || !sw->meters[slot].used)
        return NULL;
    return &sw->meters[slot];
}

void
fp_meters_clear(fp_switch *sw)
{
    if (sw->meters)
        memset(sw->meters, 0, (size_t)sw->nmeters * sizeof *sw->meters);
}

void
fp_meters_free(fp_switch *sw)
{
    free(sw->meters);
    sw->meters = NULL;
    sw->nmeters = 0;
}
