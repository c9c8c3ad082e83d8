/* DCQCN's reaction point in C: emu/host/dcqcn.py's ReactionPoint, the same
 * float operations in the same order (Zhu et al., SIGCOMM 2015, section 3.1:
 * eq. 1 on a CNP, eq. 2 alpha decay, fast recovery / additive / hyper
 * increase on the timer and the byte counter). The notification point is a
 * time per queue pair, kept in nic_qp (nic_engine.c).
 */
#include "nic.h"

#include <math.h>
#include <string.h>

#define SNAP_FRACTION 1e-9  /* dcqcn._SNAP_FRACTION */

void nic_rp_init(nic_rp *rp, const nic_dcqcn *p, double now)
{
    memset(rp, 0, sizeof *rp);
    rp->p = p;
    rp->rc = rp->rt = p->line_rate_bps;
    rp->alpha = p->alpha_init;
    rp->now = now;
    rp->inc_anchor = rp->alpha_anchor = now;
    rp->inc_n = rp->alpha_n = 1;
}

static int at_line_rate(const nic_rp *rp)
{
    return rp->rc >= rp->p->line_rate_bps && rp->rt >= rp->p->line_rate_bps;
}

static double next_increase_at(const nic_rp *rp)
{
    return rp->inc_anchor + (double)rp->inc_n * rp->p->increase_period_s;
}

double nic_rp_next_event_at(const nic_rp *rp)
{
    return at_line_rate(rp) ? NAN : next_increase_at(rp);
}

/* ReactionPoint._expiries: how many of anchor + k period, k >= n, are <= now. */
static int64_t expiries(double now, double anchor, int64_t n, double period)
{
    int64_t last = (int64_t)floor((now - anchor) / period);
    while (anchor + (double)(last + 1) * period <= now)
        last++;
    while (last >= n && anchor + (double)last * period > now)
        last--;
    return last - n + 1 > 0 ? last - n + 1 : 0;
}

static void decay_alpha(nic_rp *rp, double now)
{
    int64_t n = expiries(now, rp->alpha_anchor, rp->alpha_n, rp->p->alpha_period_s);
    if (n) {
        rp->alpha *= pow(1 - rp->p->g, (double)n);
        rp->alpha_decays += n;
        rp->alpha_n += n;
    }
}

static void increase(nic_rp *rp)
{
    int64_t f = rp->p->fast_recovery_steps;
    double line = rp->p->line_rate_bps;
    int64_t hi = rp->timer_stage > rp->byte_stage ? rp->timer_stage : rp->byte_stage;
    int64_t lo = rp->timer_stage < rp->byte_stage ? rp->timer_stage : rp->byte_stage;
    if (hi <= f) {
        rp->inc_fast++;
    } else if (lo <= f) {
        rp->inc_additive++;
        double rt = rp->rt + rp->p->rate_ai_bps;
        rp->rt = rt < line ? rt : line;
    } else {
        rp->inc_hyper++;
        double rt = rp->rt + (double)(lo - f) * rp->p->rate_hai_bps;
        rp->rt = rt < line ? rt : line;
    }
    double rc = (rp->rt + rp->rc) / 2;
    if (rp->rt - rc < line * SNAP_FRACTION)
        rc = rp->rt;
    if (rc < rp->p->min_rate_bps)
        rc = rp->p->min_rate_bps;
    rp->rc = rc < line ? rc : line;
}

void nic_rp_advance(nic_rp *rp, double now)
{
    if (now < rp->now)
        return;
    rp->now = now;
    decay_alpha(rp, now);
    while (next_increase_at(rp) <= now) {
        if (at_line_rate(rp)) {
            int64_t missed =
                expiries(now, rp->inc_anchor, rp->inc_n, rp->p->increase_period_s);
            rp->timer_stage += missed;
            rp->timer_events += missed;
            rp->inc_n += missed;
            break;
        }
        rp->inc_n++;
        rp->timer_stage++;
        rp->timer_events++;
        increase(rp);
    }
}

void nic_rp_on_bytes_sent(nic_rp *rp, int64_t size, double now)
{
    nic_rp_advance(rp, now);
    rp->bytes_since_event += size;
    while (rp->bytes_since_event >= rp->p->byte_counter_bytes) {
        rp->bytes_since_event -= rp->p->byte_counter_bytes;
        rp->byte_stage++;
        rp->byte_events++;
        increase(rp);
    }
}

void nic_rp_on_cnp(nic_rp *rp, double now)
{
    nic_rp_advance(rp, now);
    rp->cnps_received++;
    rp->rate_decreases++;
    rp->rt = rp->rc;
    double rc = rp->rc * (1 - rp->alpha / 2);
    rp->rc = rc > rp->p->min_rate_bps ? rc : rp->p->min_rate_bps;
    rp->alpha = (1 - rp->p->g) * rp->alpha + rp->p->g;
    rp->alpha_anchor = rp->inc_anchor = now;
    rp->alpha_n = rp->inc_n = 1;
    rp->timer_stage = rp->byte_stage = 0;
    rp->bytes_since_event = 0;
}
