/* emu.switch._fastpath: the Python types over the C per-frame path.
 *
 * `Switch` holds one switch's ports, queues, buffer and cache; `Engine` runs
 * the loop over several switches (fp_loop.c). emu/switch/fastpath.py is the
 * only Python module that uses them: it configures a Switch from the same
 * spec objects the Python datapath uses, answers its upcalls with the
 * OpenFlow pipeline, and reads its counters in bulk for reports and
 * OpenFlow statistics. Nothing here is called per frame from Python.
 */
#include "fp.h"

#include <math.h>
#include <string.h>

/* ----- helpers ---------------------------------------------------------------------- */

static int
get_double(PyObject *d, const char *k, double *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "switch config lacks %s", k);
        return -1;
    }
    *out = PyFloat_AsDouble(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int
get_i64(PyObject *d, const char *k, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "switch config lacks %s", k);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* Python's random.Random state (getstate()[1]: 624 words and the index). */
static int
load_mt(PyObject *d, const char *k, fp_mt *r)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v || !PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 625) {
        PyErr_Format(PyExc_ValueError, "switch config %s: expected random.getstate()[1]", k);
        return -1;
    }
    for (int i = 0; i < 624; i++)
        r->mt[i] = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(v, i));
    r->index = (int)PyLong_AsLong(PyTuple_GET_ITEM(v, 624));
    return PyErr_Occurred() ? -1 : 0;
}

static fp_port *
port_arg(fp_switch *sw, unsigned int port_no)
{
    fp_port *p = fp_port_get(sw, port_no);
    if (!p)
        PyErr_Format(PyExc_KeyError, "%U: no port %u", sw->name, port_no);
    return p;
}

/* A list of one value per priority, from an array of FP_PRIOS (one body for
 * each element type: the converter is the only difference). */
#define LIST8(name, type, convert)                                  \
    static PyObject *name(const type *v)                            \
    {                                                               \
        PyObject *l = PyList_New(FP_PRIOS);                         \
        for (int i = 0; l && i < FP_PRIOS; i++)                     \
            PyList_SET_ITEM(l, i, convert(v[i]));                   \
        return l;                                                   \
    }
LIST8(list8_u64, uint64_t, PyLong_FromUnsignedLongLong)
LIST8(list8_i64, int64_t, PyLong_FromLongLong)
LIST8(list8_f, double, PyFloat_FromDouble)

static void
update_early(fp_switch *sw)
{
    double early = INFINITY;
    for (int i = 0; i < sw->nports; i++)
        if (sw->ports[i]->sched.early_s < early)
            early = sw->ports[i]->sched.early_s;
    sw->early_s = isfinite(early) ? early : 0.0;
}

/* ----- Switch ------------------------------------------------------------------------- */

static void
free_port(fp_switch *sw, fp_port *p)
{
    fp_port_close(p);
    for (int prio = 0; prio < FP_PRIOS; prio++) {
        fp_frame *f = p->sched.q[prio].head;
        while (f) {
            fp_frame *next = f->next;
            fp_pool_put(&sw->pool, f);
            f = next;
        }
        p->sched.q[prio].head = p->sched.q[prio].tail = NULL;
    }
    Py_CLEAR(p->captured);
    PyMem_Free(p);
}

static void
switch_close_all(fp_switch *sw)
{
    if (sw->engine)
        fp_engine_remove(sw->engine, sw);
    for (int i = 0; i < sw->nports; i++)
        free_port(sw, sw->ports[i]);
    PyMem_Free(sw->ports);
    sw->ports = NULL;
    sw->nports = 0;
    memset(sw->index, 0xFF, sizeof sw->index);
    if (sw->cpu) {
        PyMem_Free(sw->cpu);
        sw->cpu = NULL;
    }
    fp_pool_free(&sw->pool);
    fp_cache_free(&sw->cache);
    fp_meters_free(sw);
    fp_arms_free(sw);
}

static int
Switch_init(fp_switch *sw, PyObject *args, PyObject *kw)
{
    PyObject *name, *upcall, *cfg;
    static char *kwlist[] = {"name", "upcall", "config", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "UOO!", kwlist, &name, &upcall, &PyDict_Type,
                                     &cfg))
        return -1;
    if (!PyCallable_Check(upcall)) {
        PyErr_SetString(PyExc_TypeError, "upcall must be callable");
        return -1;
    }
    Py_INCREF(name);
    Py_XSETREF(sw->name, name);
    Py_INCREF(upcall);
    Py_XSETREF(sw->upcall, upcall);
    memset(sw->index, 0xFF, sizeof sw->index);
    PyObject *dscp = PyDict_GetItemString(cfg, "dscp_to_prio");
    if (!dscp || !PyList_Check(dscp) || PyList_GET_SIZE(dscp) != 64) {
        PyErr_SetString(PyExc_ValueError, "config dscp_to_prio: a list of 64 priorities");
        return -1;
    }
    for (int i = 0; i < 64; i++) {
        long prio = PyLong_AsLong(PyList_GET_ITEM(dscp, i));
        if (prio < 0 || prio >= FP_PRIOS) {
            PyErr_Format(PyExc_ValueError, "config dscp_to_prio[%d]=%ld: not 0..7", i, prio);
            return -1;
        }
        sw->dscp_to_prio[i] = (uint8_t)prio;
    }
    int64_t lossless, lossless_class, ecn_prios, quanta, slot_bytes;
    if (get_i64(cfg, "size_bytes", &sw->size_bytes) || get_i64(cfg, "reserved", &sw->reserved) ||
        get_i64(cfg, "resume_offset", &sw->resume_offset) ||
        get_double(cfg, "alpha_lossless", &sw->alpha_lossless) ||
        get_double(cfg, "alpha_lossy", &sw->alpha_lossy) ||
        get_i64(cfg, "lossless", &lossless) || get_i64(cfg, "lossless_class", &lossless_class) ||
        get_i64(cfg, "ecn_prios", &ecn_prios) || get_double(cfg, "ecn_pmax", &sw->ecn_pmax) ||
        get_i64(cfg, "pause_quanta", &quanta) || get_i64(cfg, "slot_bytes", &slot_bytes) ||
        load_mt(cfg, "ecn_rng", &sw->ecn_rng) ||
        load_mt(cfg, "loss_rng", &sw->loss_rng))
        return -1;
    if (slot_bytes <= 0 || slot_bytes > FP_MAX_FRAME || sw->size_bytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "config slot_bytes/size_bytes out of range");
        return -1;
    }
    sw->lossless = (uint8_t)lossless;
    sw->lossless_class = (uint8_t)lossless_class;
    sw->ecn_prios = (uint8_t)ecn_prios;
    sw->pause_quanta = (uint16_t)quanta;
    sw->tx_due = INFINITY;
    sw->cache_enabled = 1;
    fp_pool_init(&sw->pool, (size_t)slot_bytes, (size_t)sw->size_bytes);
    if (fp_cache_init(&sw->cache) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    sw->cpu = PyMem_Calloc(1, sizeof *sw->cpu);
    if (!sw->cpu) {
        PyErr_NoMemory();
        return -1;
    }
    sw->cpu->sw = sw;
    return 0;
}

static void
Switch_dealloc(fp_switch *sw)
{
    switch_close_all(sw);
    Py_CLEAR(sw->name);
    Py_CLEAR(sw->upcall);
    Py_TYPE(sw)->tp_free((PyObject *)sw);
}

static PyObject *
Switch_add_port(fp_switch *sw, PyObject *args)
{
    unsigned int port_no, ring_frames, max_frame;
    int fd, skip_outgoing;
    Py_buffer hw, tmpl;
    double rate;
    long long headroom, kmin, kmax;
    if (!PyArg_ParseTuple(args, "Iiy*dLLLy*IIp", &port_no, &fd, &hw, &rate, &headroom, &kmin,
                          &kmax, &tmpl, &ring_frames, &max_frame, &skip_outgoing))
        return NULL;
    PyObject *ret = NULL;
    if (port_no == 0 || port_no > FP_MAX_PORT_NO || sw->index[port_no] >= 0) {
        PyErr_Format(PyExc_ValueError, "port %u: not 1..%d, or added twice", port_no,
                     FP_MAX_PORT_NO);
        goto out;
    }
    if (hw.len != 6 || tmpl.len != 60 || !(rate > 0)) {
        PyErr_SetString(PyExc_ValueError, "add_port: hw is 6 bytes, template 60, rate > 0");
        goto out;
    }
    if (sw->engine && sw->engine->running) {
        PyErr_SetString(PyExc_RuntimeError, "add ports before the engine runs");
        goto out;
    }
    fp_port **ports;
    fp_port *p = PyMem_Calloc(1, sizeof *p);
    if (!p) {
        PyErr_NoMemory();
        goto out;
    }
    p->sw = sw;
    p->port_no = port_no;
    p->fd = fd;
    memcpy(p->hw, hw.buf, 6);
    memcpy(p->pfc_template, tmpl.buf, 60);
    p->rate_bps = rate;
    p->recv_ok = 1;
    p->headroom = headroom;
    p->kmin = kmin;
    p->kmax = kmax;
    p->skip_outgoing = skip_outgoing;
    fp_sched_init(&p->sched, rate);
    if (fd < 0) {
        p->captured = PyList_New(0);
        if (!p->captured) {
            PyMem_Free(p);
            goto out;
        }
    } else {
        /* Giving a socket a ring waits for an RCU grace period (synchronize_net
         * in packet_set_ring, ~10 ms): without the GIL, so that the ports of a
         * switch get their rings at once from several threads (fastpath.py). */
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fp_port_open_ring(p, max_frame, ring_frames);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            PyMem_Free(p);
            goto out;
        }
        if (sw->index[port_no] >= 0) { /* added twice meanwhile, by another thread */
            fp_port_close(p);
            PyMem_Free(p);
            PyErr_Format(PyExc_ValueError, "port %u added twice", port_no);
            goto out;
        }
    }
    /* Kept in port-number order, whatever order the ports were added in. */
    ports = PyMem_Realloc(sw->ports, (size_t)(sw->nports + 1) * sizeof *ports);
    if (!ports) {
        fp_port_close(p);
        Py_CLEAR(p->captured);
        PyMem_Free(p);
        PyErr_NoMemory();
        goto out;
    }
    sw->ports = ports;
    int at = sw->nports;
    while (at > 0 && sw->ports[at - 1]->port_no > port_no) {
        sw->ports[at] = sw->ports[at - 1];
        at--;
    }
    sw->ports[at] = p;
    sw->nports++;
    for (int i = 0; i < sw->nports; i++)
        sw->index[sw->ports[i]->port_no] = (int16_t)i;
    update_early(sw);
    ret = Py_None;
    Py_INCREF(ret);
out:
    PyBuffer_Release(&hw);
    PyBuffer_Release(&tmpl);
    return ret;
}

/* feed(in_port, frame, now): the receive path for one frame (tests, the
 * differential test); returns 1 when it went to the pipeline. */
static PyObject *
Switch_feed(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    Py_buffer b;
    double now;
    if (!PyArg_ParseTuple(args, "Iy*d", &port_no, &b, &now))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p || b.len > FP_MAX_FRAME) {
        if (p)
            PyErr_SetString(PyExc_ValueError, "frame longer than FP_MAX_FRAME");
        PyBuffer_Release(&b);
        return NULL;
    }
    if (sw->tx_due <= now)
        fp_switch_transmit(sw, now);
    int r = fp_switch_receive(sw, p, b.buf, (size_t)b.len, now);
    PyBuffer_Release(&b);
    return PyLong_FromLong(r);
}

static PyObject *
Switch_enqueue(fp_switch *sw, PyObject *args)
{
    unsigned int in_port, out_port;
    Py_buffer b;
    int queue;
    double now;
    if (!PyArg_ParseTuple(args, "IIy*id", &in_port, &out_port, &b, &queue, &now))
        return NULL;
    int r = 0;
    if (b.len <= FP_MAX_FRAME)
        r = fp_switch_enqueue(sw, in_port, out_port, b.buf, (size_t)b.len, queue, now);
    else if (fp_port_get(sw, out_port))
        fp_port_get(sw, out_port)->c.tx_dropped++;
    PyBuffer_Release(&b);
    return PyLong_FromLong(r);
}

static PyObject *
Switch_transmit(fp_switch *sw, PyObject *args)
{
    double now;
    if (!PyArg_ParseTuple(args, "d", &now))
        return NULL;
    return PyFloat_FromDouble(fp_switch_transmit(sw, now));
}

static PyObject *
Switch_send_pfc(fp_switch *sw, PyObject *args)
{
    double now;
    if (!PyArg_ParseTuple(args, "d", &now))
        return NULL;
    fp_switch_send_pfc(sw, now);
    Py_RETURN_NONE;
}

static PyObject *
Switch_captured(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    if (!p->captured)
        return PyList_New(0);
    PyObject *out = p->captured;
    p->captured = PyList_New(0);
    return out;
}

static PyObject *
Switch_port_counters(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    const fp_pctr *c = &p->c;
    return Py_BuildValue("(KKKKKKKK)", c->rx_packets, c->tx_packets, c->rx_bytes, c->tx_bytes,
                         c->rx_dropped, c->tx_dropped, c->rx_errors, c->tx_errors);
}

static PyObject *
Switch_set_port_counter(fp_switch *sw, PyObject *args)
{
    unsigned int port_no, idx;
    unsigned long long v;
    if (!PyArg_ParseTuple(args, "IIK", &port_no, &idx, &v))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    if (idx >= FP_PCTR_FIELDS)
        return PyErr_Format(PyExc_IndexError, "counter %u", idx);
    ((uint64_t *)&p->c)[idx] = v;
    Py_RETURN_NONE;
}

static PyObject *
Switch_set_recv(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    int ok;
    if (!PyArg_ParseTuple(args, "Ip", &port_no, &ok))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    p->recv_ok = ok;
    Py_RETURN_NONE;
}

/* Everything of one port that reports, telemetry and the watchdog read, at once. */
static PyObject *
Switch_port_state(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    const fp_sched *s = &p->sched;
    PyObject *q = PyList_New(FP_PRIOS);
    if (!q)
        return NULL;
    for (int i = 0; i < FP_PRIOS; i++) {
        const fp_qctr *c = &s->c[i];
        PyList_SET_ITEM(q, i,
                        Py_BuildValue("(KKKKKKK)", c->enqueued_packets, c->enqueued_bytes,
                                      c->tx_packets, c->tx_bytes, c->dropped_packets,
                                      c->dropped_bytes, c->watermark_bytes));
    }
    int64_t ing[FP_PRIOS], hr[FP_PRIOS];
    memcpy(ing, p->ingress, sizeof ing);
    memcpy(hr, p->headroom_used, sizeof hr);
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:I,s:i,s:d,s:d,s:d,s:N,s:N,s:K,s:K,s:N,s:N,s:N,s:i,s:N,s:N,s:N,s:N,"
        "s:N,s:L,s:L,s:i,s:i,s:K,s:N,s:K}",
        "depth", list8_i64(s->depth), "queues", q, "paused_until", list8_f(s->paused_until),
        "paused_s", list8_f(s->paused_s), "pending", s->pending, "busy", p->busy, "free_at",
        s->free_at, "rate_bps", s->rate_bps, "early_s", s->early_s, "pause_rx",
        list8_u64(p->pause_rx), "last_pause_rx", list8_f(p->last_pause_rx), "pfc_tx_frames",
        p->pfc_tx_frames, "lost_frames", p->lost_frames, "ingress", list8_i64(ing),
        "headroom_used", list8_i64(hr), "egress", list8_i64(p->egress), "paused_upstream",
        (int)p->paused_upstream, "marks", list8_u64(p->marks), "xoff_sent", list8_u64(p->xoff_sent),
        "xon_sent", list8_u64(p->xon_sent), "drops_by_queue", list8_u64(p->drops_by_queue),
        "egress_watermark", list8_u64(p->egress_watermark), "kmin", (long long)p->kmin, "kmax",
        (long long)p->kmax, "wd_drop", (int)p->wd_drop, "wd_ignore_pause", (int)p->wd_ignore_pause,
        "truncated", p->truncated, "refresh_at", list8_f(p->refresh_at), "ar_picks",
        p->ar_picks);
}

/* What telemetry and the watchdog read of a port every poll, as one tuple:
 * (tx_bytes, depth, paused_until, marks, queue tx_bytes, queue tx_packets,
 * last_pause_rx, pause_rx), each but the first a list per priority. */
static PyObject *
Switch_port_brief(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    uint64_t txb[FP_PRIOS], txp[FP_PRIOS];
    for (int i = 0; i < FP_PRIOS; i++) {
        txb[i] = p->sched.c[i].tx_bytes;
        txp[i] = p->sched.c[i].tx_packets;
    }
    return Py_BuildValue("(KNNNNNNN)", p->c.tx_bytes, list8_i64(p->sched.depth),
                         list8_f(p->sched.paused_until), list8_u64(p->marks), list8_u64(txb),
                         list8_u64(txp), list8_f(p->last_pause_rx), list8_u64(p->pause_rx));
}

static PyObject *
Switch_buffer_state(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue(
        "{s:L,s:K,s:K,s:K,s:K,s:N,s:N,s:N,s:i}", "shared_used", (long long)sw->shared_used,
        "shared_watermark", sw->shared_watermark, "lossy_threshold", sw->drops[FP_DROP_LOSSY],
        "headroom_overflow", sw->drops[FP_DROP_HEADROOM], "lossless_threshold_pfc_off",
        sw->drops[FP_DROP_LOSSLESS_NO_PFC], "cpu_ingress", list8_i64(sw->cpu->ingress),
        "cpu_headroom_used", list8_i64(sw->cpu->headroom_used), "cpu_egress",
        list8_i64(sw->cpu->egress), "cpu_paused", (int)sw->cpu->paused_upstream);
}

static PyObject *
Switch_stats(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:n,s:K,s:d,s:K,s:K,s:K,s:K,s:K}", "cache_hits", sw->hits,
        "cache_misses", sw->misses, "upcalls", sw->upcalls, "malformed_frames", sw->malformed,
        "watchdog_drops", sw->watchdog_drops, "pool_drops", sw->pool_drops, "upcall_errors",
        sw->upcall_errors, "cache_entries", sw->cache.count, "pool_slots",
        (Py_ssize_t)sw->pool.slots, "pool_slot_bytes", (unsigned long long)sw->pool.slot_bytes,
        "tx_due", sw->tx_due, "ar_decisions", sw->ar_decisions, "ar_paused_skips",
        sw->ar_paused_skips, "ar_all_paused", sw->ar_all_paused, "ar_ugal_decisions",
        sw->ar_ugal_decisions, "ar_ugal_nonminimal", sw->ar_ugal_nonminimal);
}

static PyObject *
Switch_pause(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    int prio;
    double until, now;
    if (!PyArg_ParseTuple(args, "Iidd", &port_no, &prio, &until, &now))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    if (prio < 0 || prio >= FP_PRIOS)
        return PyErr_Format(PyExc_ValueError, "prio %d", prio);
    fp_sched_pause(&p->sched, prio, until, now);
    p->busy = 1;
    sw->tx_due = now;
    Py_RETURN_NONE;
}

/* kick(port_no, now): look at the port's queues again (a queue was restored). */
static PyObject *
Switch_kick(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    double now;
    if (!PyArg_ParseTuple(args, "Id", &port_no, &now))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    p->busy = 1;
    if (now < sw->tx_due)
        sw->tx_due = now;
    Py_RETURN_NONE;
}

static PyObject *
Switch_set_rate(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    double rate;
    if (!PyArg_ParseTuple(args, "Id", &port_no, &rate))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    if (!(rate > 0))
        return PyErr_Format(PyExc_ValueError, "rate_bps must be positive, got %R",
                            PyTuple_GET_ITEM(args, 1));
    fp_sched_set_rate(&p->sched, rate);
    update_early(sw);
    Py_RETURN_NONE;
}

static PyObject *
Switch_flush(fp_switch *sw, PyObject *args)
{
    unsigned int port_no, mask;
    if (!PyArg_ParseTuple(args, "II", &port_no, &mask))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    return PyLong_FromLongLong(fp_flush(sw, p, (uint8_t)mask));
}

static PyObject *
Switch_set_watchdog(fp_switch *sw, PyObject *args)
{
    unsigned int port_no, drop, ignore;
    if (!PyArg_ParseTuple(args, "III", &port_no, &drop, &ignore))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    p->wd_drop = (uint8_t)drop;
    p->wd_ignore_pause = (uint8_t)ignore;
    Py_RETURN_NONE;
}

static PyObject *
Switch_set_loss(fp_switch *sw, PyObject *args)
{
    unsigned int port_no, every;
    double prob;
    if (!PyArg_ParseTuple(args, "IdI", &port_no, &prob, &every))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    p->loss_p = prob;
    if (every != p->loss_every)
        p->loss_count = 0;
    p->loss_every = every;
    Py_RETURN_NONE;
}

static PyObject *
Switch_set_ecn(fp_switch *sw, PyObject *args)
{
    unsigned int prios;
    double pmax;
    PyObject *thresholds;
    if (!PyArg_ParseTuple(args, "IdO!", &prios, &pmax, &PyDict_Type, &thresholds))
        return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(thresholds, &pos, &k, &v)) {
        long long kmin, kmax;
        fp_port *p = port_arg(sw, (unsigned)PyLong_AsUnsignedLong(k));
        if (!p || !PyArg_ParseTuple(v, "LL", &kmin, &kmax))
            return NULL;
        p->kmin = kmin;
        p->kmax = kmax;
    }
    sw->ecn_prios = (uint8_t)prios;
    sw->ecn_pmax = pmax;
    Py_RETURN_NONE;
}

static PyObject *
Switch_clock(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    const fp_clock *c = &p->sched.clock;
    PyObject *hist = PyList_New(FP_HIST);
    for (int i = 0; hist && i < FP_HIST; i++)
        PyList_SET_ITEM(hist, i, PyLong_FromUnsignedLongLong(c->hist[i]));
    return Py_BuildValue("{s:d,s:d,s:K,s:N,s:d,s:d,s:d}", "rate_bps", c->rate_bps, "frame_s",
                         c->frame_s, "frames", c->frames, "hist", hist, "max_late_s",
                         c->max_late_s, "deficit_s", c->deficit_s, "busy_s", c->busy_s);
}

static PyObject *
Switch_clock_reset(fp_switch *sw, PyObject *args)
{
    unsigned int port_no;
    if (!PyArg_ParseTuple(args, "I", &port_no))
        return NULL;
    fp_port *p = port_arg(sw, port_no);
    if (!p)
        return NULL;
    fp_clock_reset(&p->sched.clock);
    Py_RETURN_NONE;
}

static PyObject *
Switch_loop_stats(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    return emu_loopmon_stats(&sw->mon);
}

static PyObject *
Switch_loop_pass(fp_switch *sw, PyObject *args)
{
    return emu_loopmon_pass_py(&sw->mon, args);
}

static PyObject *
Switch_loop_reset(fp_switch *sw, PyObject *args)
{
    double frame_s = sw->mon.frame_s;
    if (!PyArg_ParseTuple(args, "|d", &frame_s))
        return NULL;
    emu_loopmon_reset(&sw->mon, frame_s);
    Py_RETURN_NONE;
}

/* drain(): the cache entries' counts since the last drain, taken (OVS's
 * revalidator pushing megaflow stats to rules). */
static PyObject *
Switch_drain(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    fp_cache *c = &sw->cache;
    for (uint32_t i = 0; i < c->nslots; i++) {
        fp_entry *e = &c->slots[i];
        if (!e->used || !e->packets)
            continue;
        PyObject *t = Py_BuildValue("(IKKd)", e->id, e->packets, e->bytes, e->last_used);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
        e->packets = e->bytes = 0;
    }
    PyObject *res = Py_BuildValue("(NKKK)", out, sw->dropped_port_down, sw->dropped_ttl,
                                  sw->dropped_meter);
    sw->dropped_port_down = sw->dropped_ttl = sw->dropped_meter = 0;
    return res;
}

/* meter_set(slot, pktps, last, packets_in, bytes_in, bands): a meter's state
 * into a slot; bands are (type, rate, capacity, tokens, prec_level, packets,
 * bytes), highest rate first. */
static PyObject *
Switch_meter_set(fp_switch *sw, PyObject *args)
{
    unsigned int slot;
    int pktps;
    double last;
    unsigned long long packets_in, bytes_in;
    PyObject *bands;
    if (!PyArg_ParseTuple(args, "IpdKKO!", &slot, &pktps, &last, &packets_in, &bytes_in,
                          &PyList_Type, &bands))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(bands);
    if (n < 1 || n > FP_MAX_BANDS) {
        PyErr_Format(PyExc_ValueError, "a meter has 1 to %d bands, not %zd", FP_MAX_BANDS, n);
        return NULL;
    }
    fp_meter m = {.used = 1, .pktps = pktps, .nbands = (int)n, .last = last,
                  .packets_in = packets_in, .bytes_in = bytes_in};
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned int type, prec;
        double rate, capacity, tokens;
        unsigned long long packets, bytes;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(bands, i), "IdddIKK", &type, &rate, &capacity,
                              &tokens, &prec, &packets, &bytes))
            return NULL;
        if (type != FP_BAND_DROP && type != FP_BAND_DSCP_REMARK) {
            PyErr_Format(PyExc_ValueError, "band type %u is not DROP or DSCP_REMARK", type);
            return NULL;
        }
        m.bands[i] = (fp_band){(uint8_t)type, (uint8_t)(prec > 3 ? 3 : prec), rate, capacity,
                               tokens, packets, bytes};
    }
    fp_meter *slotp = fp_meter_slot(sw, slot);
    if (!slotp) {
        PyErr_Format(PyExc_ValueError, "meter slot %u out of range", slot);
        return NULL;
    }
    *slotp = m;
    Py_RETURN_NONE;
}

/* meter_get(slot) -> (last, packets_in, bytes_in, [(tokens, packets, bytes)]) or None */
static PyObject *
Switch_meter_get(fp_switch *sw, PyObject *args)
{
    unsigned int slot;
    if (!PyArg_ParseTuple(args, "I", &slot))
        return NULL;
    fp_meter *m = fp_meter_get(sw, slot);
    if (!m)
        Py_RETURN_NONE;
    PyObject *bands = PyList_New(m->nbands);
    if (!bands)
        return NULL;
    for (int i = 0; i < m->nbands; i++) {
        PyObject *t = Py_BuildValue("(dKK)", m->bands[i].tokens, m->bands[i].packets,
                                    m->bands[i].bytes);
        if (!t) {
            Py_DECREF(bands);
            return NULL;
        }
        PyList_SET_ITEM(bands, i, t);
    }
    return Py_BuildValue("(dKKN)", m->last, m->packets_in, m->bytes_in, bands);
}

static PyObject *
Switch_meters_clear(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    fp_meters_clear(sw);
    Py_RETURN_NONE;
}

/* arm_drain(): [(slot, packets, bytes, last_used)] of the adaptive ops' bucket
 * counters that counted since the last call, taken. */
static PyObject *
Switch_arm_drain(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (uint32_t i = 0; i < sw->narms; i++) {
        fp_arm_ctr *c = &sw->arms[i];
        if (!c->used || !c->packets)
            continue;
        PyObject *t = Py_BuildValue("(IKKd)", i, c->packets, c->bytes, c->last_used);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
        c->packets = c->bytes = 0;
    }
    return out;
}

static PyObject *
Switch_arms_clear(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    fp_arms_clear(sw);
    Py_RETURN_NONE;
}

/* The adaptive tie rotation now (`peek`) or taken by an upcall's decision (`take`). */
static PyObject *
Switch_ar_rotation(fp_switch *sw, PyObject *args)
{
    int take = 0;
    if (!PyArg_ParseTuple(args, "|p", &take))
        return NULL;
    uint64_t now = sw->ar_rotation;
    sw->ar_rotation += take ? 1 : 0;
    return PyLong_FromUnsignedLongLong(now);
}

static PyObject *
Switch_clear_cache(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    fp_cache_clear(&sw->cache);
    Py_RETURN_NONE;
}

static PyObject *
Switch_set_cache(fp_switch *sw, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
    sw->cache_enabled = on;
    Py_RETURN_NONE;
}

static PyObject *
Switch_close(fp_switch *sw, PyObject *Py_UNUSED(ignored))
{
    switch_close_all(sw);
    Py_RETURN_NONE;
}

static PyMethodDef Switch_methods[] = {
    {"add_port", (PyCFunction)Switch_add_port, METH_VARARGS,
     "add_port(port_no, fd, hw, rate_bps, headroom, kmin, kmax, pfc_template, ring_frames, "
     "max_frame, skip_outgoing): fd -1 captures what the port sends (tests)"},
    {"feed", (PyCFunction)Switch_feed, METH_VARARGS, "feed(in_port, frame, now): receive one frame"},
    {"enqueue", (PyCFunction)Switch_enqueue, METH_VARARGS,
     "enqueue(in_port, out_port, frame, queue_id or -1, now): admit and queue one output"},
    {"transmit", (PyCFunction)Switch_transmit, METH_VARARGS, "transmit(now) -> next due"},
    {"send_pfc", (PyCFunction)Switch_send_pfc, METH_VARARGS, "send_pfc(now)"},
    {"captured", (PyCFunction)Switch_captured, METH_VARARGS,
     "captured(port_no) -> [(prio or -1 for PFC, frame)] sent since the last call"},
    {"port_counters", (PyCFunction)Switch_port_counters, METH_VARARGS, NULL},
    {"set_port_counter", (PyCFunction)Switch_set_port_counter, METH_VARARGS, NULL},
    {"set_recv", (PyCFunction)Switch_set_recv, METH_VARARGS,
     "set_recv(port_no, ok): the port is live and not OFPPC_NO_RECV"},
    {"port_state", (PyCFunction)Switch_port_state, METH_VARARGS, NULL},
    {"buffer_state", (PyCFunction)Switch_buffer_state, METH_NOARGS, NULL},
    {"port_brief", (PyCFunction)Switch_port_brief, METH_VARARGS,
     "port_brief(port_no) -> (tx_bytes, depth, paused_until, marks, queue tx_bytes, "
     "queue tx_packets, last_pause_rx, pause_rx)"},
    {"stats", (PyCFunction)Switch_stats, METH_NOARGS, NULL},
    {"pause", (PyCFunction)Switch_pause, METH_VARARGS, "pause(port_no, prio, until, now)"},
    {"set_rate", (PyCFunction)Switch_set_rate, METH_VARARGS, NULL},
    {"kick", (PyCFunction)Switch_kick, METH_VARARGS, "kick(port_no, now)"},
    {"flush", (PyCFunction)Switch_flush, METH_VARARGS, "flush(port_no, prio_mask) -> frames"},
    {"set_watchdog", (PyCFunction)Switch_set_watchdog, METH_VARARGS,
     "set_watchdog(port_no, drop_mask, ignore_pause_mask)"},
    {"set_loss", (PyCFunction)Switch_set_loss, METH_VARARGS,
     "set_loss(port_no, probability, every)"},
    {"set_ecn", (PyCFunction)Switch_set_ecn, METH_VARARGS,
     "set_ecn(prio_mask, pmax, {port: (kmin, kmax)})"},
    {"clock", (PyCFunction)Switch_clock, METH_VARARGS, NULL},
    {"clock_reset", (PyCFunction)Switch_clock_reset, METH_VARARGS, NULL},
    {"loop_stats", (PyCFunction)Switch_loop_stats, METH_NOARGS, NULL},
    {"loop_reset", (PyCFunction)Switch_loop_reset, METH_VARARGS, NULL},
    {"loop_pass", (PyCFunction)Switch_loop_pass, METH_VARARGS, NULL},
    {"drain", (PyCFunction)Switch_drain, METH_NOARGS, NULL},
    {"clear_cache", (PyCFunction)Switch_clear_cache, METH_NOARGS, NULL},
    {"ar_rotation", (PyCFunction)Switch_ar_rotation, METH_VARARGS,
     "ar_rotation(take=False): the adaptive tie rotation; take: count a decision"},
    {"meter_set", (PyCFunction)Switch_meter_set, METH_VARARGS,
     "meter_set(slot, pktps, last, packets_in, bytes_in, [(type, rate, capacity, tokens, "
     "prec_level, packets, bytes)]): a meter's buckets and counters into a slot"},
    {"meter_get", (PyCFunction)Switch_meter_get, METH_VARARGS,
     "meter_get(slot) -> (last, packets_in, bytes_in, [(tokens, packets, bytes)]) or None"},
    {"meters_clear", (PyCFunction)Switch_meters_clear, METH_NOARGS, "free every meter slot"},
    {"arm_drain", (PyCFunction)Switch_arm_drain, METH_NOARGS,
     "arm_drain() -> [(slot, packets, bytes, last_used)]: adaptive bucket counts, taken"},
    {"arms_clear", (PyCFunction)Switch_arms_clear, METH_NOARGS,
     "free every adaptive bucket counter slot"},
    {"set_cache", (PyCFunction)Switch_set_cache, METH_VARARGS, NULL},
    {"close", (PyCFunction)Switch_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject fp_SwitchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emu.switch._fastpath.Switch",
    .tp_basicsize = sizeof(fp_switch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One switch's ports, queues, shared buffer and exact-match cache, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Switch_init,
    .tp_dealloc = (destructor)Switch_dealloc,
    .tp_methods = Switch_methods,
};

/* ----- Engine ------------------------------------------------------------------------- */

PyObject *fp_engine_run(fp_engine *e, PyObject *args);

static int
Engine_init(fp_engine *e, PyObject *args, PyObject *kw)
{
    e->epfd = -1;
    return 0;
}

static void
Engine_dealloc(fp_engine *e)
{
    while (e->nswitches)
        fp_engine_remove(e, e->switches[0]);
    PyMem_Free(e->switches);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *
Engine_add(fp_engine *e, PyObject *args)
{
    fp_switch *sw;
    if (!PyArg_ParseTuple(args, "O!", &fp_SwitchType, &sw))
        return NULL;
    if (sw->engine)
        return PyErr_Format(PyExc_ValueError, "%U already has an engine", sw->name);
    if (fp_engine_add(e, sw) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *
Engine_remove(fp_engine *e, PyObject *args)
{
    fp_switch *sw;
    if (!PyArg_ParseTuple(args, "O!", &fp_SwitchType, &sw))
        return NULL;
    if (sw->engine == e)
        fp_engine_remove(e, sw);
    Py_RETURN_NONE;
}

static PyObject *
Engine_passes(fp_engine *e, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(e->passes);
}

static PyMethodDef Engine_methods[] = {
    {"add", (PyCFunction)Engine_add, METH_VARARGS, "add(switch)"},
    {"remove", (PyCFunction)Engine_remove, METH_VARARGS, "remove(switch)"},
    {"run", (PyCFunction)fp_engine_run, METH_VARARGS,
     "run(py_fd, callback): serve every switch; callback(now, py_ready) -> (next_due, work) "
     "or None to stop"},
    {"passes", (PyCFunction)Engine_passes, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject fp_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emu.switch._fastpath.Engine",
    .tp_basicsize = sizeof(fp_engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The loop that serves every switch of a process without the GIL.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

/* ----- the module --------------------------------------------------------------------- */

static struct PyModuleDef fp_module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The compiled per-frame path of the emu switch (see emu/switch/fastpath.py).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (PyType_Ready(&fp_SwitchType) < 0 || PyType_Ready(&fp_EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&fp_module);
    if (!m)
        return NULL;
    Py_INCREF(&fp_SwitchType);
    Py_INCREF(&fp_EngineType);
    if (PyModule_AddObject(m, "Switch", (PyObject *)&fp_SwitchType) < 0 ||
        PyModule_AddObject(m, "Engine", (PyObject *)&fp_EngineType) < 0 ||
        PyModule_AddIntConstant(m, "OP_OUT", FP_OP_OUT) < 0 ||
        PyModule_AddIntConstant(m, "OP_DEAD", FP_OP_DEAD) < 0 ||
        PyModule_AddIntConstant(m, "OP_DECTTL", FP_OP_DECTTL) < 0 ||
        PyModule_AddIntConstant(m, "OP_SET", FP_OP_SET) < 0 ||
        PyModule_AddIntConstant(m, "OP_SUB", FP_OP_SUB) < 0 ||
        PyModule_AddIntConstant(m, "OP_METER", FP_OP_METER) < 0 ||
        PyModule_AddIntConstant(m, "OP_ADAPT", FP_OP_ADAPT) < 0 ||
        PyModule_AddIntConstant(m, "OP_ARM", FP_OP_ARM) < 0 ||
        PyModule_AddIntConstant(m, "OP_UGAL", FP_OP_UGAL) < 0 ||
        PyModule_AddIntConstant(m, "AR_MAX_OPTIONS", FP_AR_MAX_OPTIONS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_FRAME", FP_MAX_FRAME) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
