/* emu.host._nicpath: the compiled NIC engine's Python type.
 *
 * `Engine` holds one NIC (nic_engine.c). emu/host/nicpath.py wraps it with
 * emu/host/rnic.py's interface and owns everything that is not per frame
 * (argument checks, the DCQCN spec, headers built once per connection).
 */
#include "nic.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    nic_engine e;
    nic_out out;
    nic_loop_state loop;
    int ready, running;         /* running: a Loop serves it now */
} Engine;

static PyObject *out_list(Engine *self)
{
    PyObject *list = PyList_New((Py_ssize_t)self->out.count);
    if (!list)
        return NULL;
    size_t start = 0;
    for (size_t k = 0; k < self->out.count; k++) {
        size_t end = self->out.ends[k];
        PyObject *b = PyBytes_FromStringAndSize((const char *)self->out.buf + start,
                                                (Py_ssize_t)(end - start));
        if (!b) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, b);
        start = end;
    }
    nic_out_clear(&self->out);
    return list;
}

static PyObject *time_or_none(double t)
{
    if (isnan(t))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(t);
}

static void Engine_dealloc(Engine *self)
{
    for (int i = 0; i < self->e.nqps; i++)
        nic_qp_free(self->e.qps[i]);
    free(self->e.qps);
    nic_credit_free(&self->e);
    nic_out_free(&self->out);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* credit: (vls, capacity_blocks, update_blocks, refresh_s, fc_template), credit.CreditLink's. */
static int credit_arg(nic_engine *e, PyObject *credit, double now)
{
    PyObject *vls;
    long long cap, upd;
    double refresh;
    Py_buffer tmpl;
    if (!PyArg_ParseTuple(credit, "OLLdy*", &vls, &cap, &upd, &refresh, &tmpl))
        return -1;
    int ok = tmpl.len == NIC_FC_FRAME_BYTES && cap >= 0 && cap <= NIC_MAX_CREDIT_BLOCKS &&
             upd >= 1 && refresh > 0;
    int v[NIC_PRIOS], n = 0;
    PyObject *seq = ok ? PySequence_Fast(vls, "credit VLs must be a sequence") : NULL;
    if (seq) {
        Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
        ok = len >= 1 && len <= NIC_PRIOS;
        for (Py_ssize_t i = 0; ok && i < len; i++) {
            long vl = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            ok = !PyErr_Occurred() && vl >= 0 && vl < NIC_PRIOS;
            for (int j = 0; ok && j < n; j++)
                ok = v[j] != vl;
            if (ok)
                v[n++] = (int)vl;
        }
        Py_DECREF(seq);
    }
    if (ok)
        nic_credit_init(e, v, n, cap, upd, refresh, tmpl.buf, now);
    PyBuffer_Release(&tmpl);
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError,
                        "Engine: credit VLs, capacity, update, refresh or template out of range");
    return ok ? 0 : -1;
}

/* Engine(rate_bps, mtu_payload, rto_s, rnr_s, recovery, ooo_window, reorder_s, dcqcn,
 *        rx_buffer_bytes, rx_xoff_bytes, rx_xon_bytes, inbox_max_bytes, drain_rate_bps,
 *        pfc_quanta, pfc_template, now[, credit])
 * recovery: NIC_GO_BACK_N, NIC_GO_BACK_0 or NIC_SELECTIVE; ooo_window: 1..NIC_MAX_OUTSTANDING;
 * dcqcn: None, or (line, min, ai, hai, alpha_period, increase_period, cnp_interval,
 *        byte_counter, g, alpha_init, fast_recovery_steps); drain_rate_bps: None or >= 0;
 * credit: None (PFC), or `credit_arg`'s tuple. */
static int Engine_init(Engine *self, PyObject *args, PyObject *kw)
{
    double rate, rto, reorder, now;
    long long mtu, window, rxb, xoff, xon, inbox_max;
    int recovery, quanta;
    PyObject *rnr, *dcqcn, *drain, *credit = Py_None;
    Py_buffer pfc;
    if (!PyArg_ParseTuple(args, "dLdOiLdOLLLLOiy*d|O", &rate, &mtu, &rto, &rnr, &recovery, &window,
                          &reorder, &dcqcn, &rxb, &xoff, &xon, &inbox_max, &drain, &quanta, &pfc,
                          &now, &credit))
        return -1;
    nic_engine *e = &self->e;
    if (self->ready) {
        PyBuffer_Release(&pfc);
        PyErr_SetString(PyExc_RuntimeError, "Engine is initialised once");
        return -1;
    }
    if (!(rate > 0) || mtu <= 0 || mtu > NIC_MAX_PAYLOAD || pfc.len != NIC_PFC_FRAME_BYTES ||
        quanta < 0 || quanta > 0xFFFF || recovery < NIC_GO_BACK_N || recovery > NIC_SELECTIVE ||
        window < 1 || window > NIC_MAX_OUTSTANDING || !(reorder >= 0)) {
        PyBuffer_Release(&pfc);
        PyErr_SetString(PyExc_ValueError,
                        "Engine: a rate, MTU, PFC template, quanta, loss recovery, reorder "
                        "window or timeout out of range");
        return -1;
    }
    memcpy(e->pfc_tmpl, pfc.buf, NIC_PFC_FRAME_BYTES);
    PyBuffer_Release(&pfc);
    PyObject *seq = PySequence_Fast(rnr, "rnr_s must be a sequence of 32 floats");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 32) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "rnr_s must have 32 entries");
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        e->rnr_s[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    if (dcqcn != Py_None) {
        nic_dcqcn *p = &e->dcqcn_p;
        long long bc, frs;
        if (!PyArg_ParseTuple(dcqcn, "dddddddLddL", &p->line_rate_bps, &p->min_rate_bps,
                              &p->rate_ai_bps, &p->rate_hai_bps, &p->alpha_period_s,
                              &p->increase_period_s, &p->cnp_interval_s, &bc, &p->g,
                              &p->alpha_init, &frs))
            return -1;
        if (bc <= 0 || !(p->increase_period_s > 0) || !(p->alpha_period_s > 0)) {
            PyErr_SetString(PyExc_ValueError, "dcqcn: byte counter and periods must be positive");
            return -1;
        }
        p->byte_counter_bytes = bc;
        p->fast_recovery_steps = frs;
        e->dcqcn = 1;
    }
    if (drain == Py_None) {
        e->drain_rate_bps = -1;
    } else {
        e->drain_rate_bps = PyFloat_AsDouble(drain);
        if (PyErr_Occurred())
            return -1;
    }
    e->rate_bps = rate;
    nic_clock_init(e, rate);
    nic_clock_reset(e);
    e->mtu_payload = mtu;
    e->rto_s = rto;
    e->go_back_0 = recovery == NIC_GO_BACK_0;
    e->selective = recovery == NIC_SELECTIVE;
    e->ooo_window = window;
    e->reorder_s = reorder;
    e->rx_buffer_bytes = rxb;
    e->rx_xoff_bytes = xoff;
    e->rx_xon_bytes = xon;
    e->inbox_max_bytes = inbox_max;
    e->pfc_quanta = quanta;
    e->free_at = now;
    e->rx_drained_at = now;
    if (credit != Py_None && credit_arg(e, credit, now) < 0)
        return -1;
    nic_crc32(0, NULL, 0);  /* the CRC table, built while the GIL is held */
    self->ready = 1;
    return 0;
}

#define READY(self)                                                                 \
    do {                                                                            \
        if (!(self)->ready) {                                                       \
            PyErr_SetString(PyExc_RuntimeError, "Engine not initialised");          \
            return NULL;                                                            \
        }                                                                           \
    } while (0)

static nic_qp *qp_arg(Engine *self, unsigned long qpn)
{
    nic_qp *qp = qpn <= PSN_MASK ? nic_qp_find(&self->e, (uint32_t)qpn) : NULL;
    if (!qp)
        PyErr_Format(PyExc_ValueError, "unknown QP %lu", qpn);
    return qp;
}

/* connect(qpn, peer_qpn, data_header, cnp_header, now, max_rate_bps, prio) */
static PyObject *Engine_connect(Engine *self, PyObject *args)
{
    unsigned long qpn, peer;
    Py_buffer dh, ch;
    double now, max_rate;
    int prio;
    READY(self);
    if (!PyArg_ParseTuple(args, "kky*y*ddi", &qpn, &peer, &dh, &ch, &now, &max_rate, &prio))
        return NULL;
    nic_hdr d, c;
    int bad = qpn > PSN_MASK || peer > PSN_MASK || prio < 0 || prio >= NIC_PRIOS ||
              nic_hdr_init(&d, dh.buf, (size_t)dh.len, 0) < 0 ||
              nic_hdr_init(&c, ch.buf, (size_t)ch.len, 1) < 0;
    PyBuffer_Release(&dh);
    PyBuffer_Release(&ch);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "connect: a QP number, priority or header out of range");
        return NULL;
    }
    if (nic_qp_find(&self->e, (uint32_t)qpn)) {
        PyErr_Format(PyExc_ValueError, "QP %lu exists", qpn);
        return NULL;
    }
    nic_qp *qp = nic_connect(&self->e, (uint32_t)qpn, (uint32_t)peer, now, max_rate, prio);
    if (!qp)
        return PyErr_NoMemory();
    qp->data_hdr = d;
    qp->cnp_hdr = c;
    Py_RETURN_NONE;
}

/* post(qpn, size, now, write, va, rkey, data) -> msg_id; data: None or bytes-like */
static PyObject *Engine_post(Engine *self, PyObject *args)
{
    unsigned long qpn;
    long long size;
    double now;
    int write;
    unsigned long long va;
    unsigned long rkey;
    PyObject *data;
    READY(self);
    if (!PyArg_ParseTuple(args, "kLdpKkO", &qpn, &size, &now, &write, &va, &rkey, &data))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    if (!qp)
        return NULL;
    if (size < 0 || size > 0xFFFFFFFFLL || rkey > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_ValueError, "post: size or rkey out of range");
        return NULL;
    }
    uint64_t id;
    int rc;
    if (data == Py_None) {
        if (size <= 0) {
            PyErr_Format(PyExc_ValueError, "size_bytes=%lld: must be positive", size);
            return NULL;
        }
        rc = nic_post(&self->e, qp, size, now, write, va, (uint32_t)rkey, NULL, &id);
    } else {
        Py_buffer b;
        if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0)
            return NULL;
        if (b.len != size) {
            PyBuffer_Release(&b);
            PyErr_Format(PyExc_ValueError, "data has %zd bytes but size_bytes=%lld", b.len, size);
            return NULL;
        }
        rc = nic_post(&self->e, qp, size, now, write, va, (uint32_t)rkey, b.buf, &id);
        PyBuffer_Release(&b);
    }
    if (rc < 0)
        return PyErr_NoMemory();
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *Engine_next_frame(Engine *self, PyObject *arg)
{
    READY(self);
    double now = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    int rc = nic_next_frame(&self->e, now, &self->out);
    if (rc < 0)
        return PyErr_NoMemory();
    if (!rc)
        Py_RETURN_NONE;
    PyObject *f = PyBytes_FromStringAndSize((const char *)self->out.buf,
                                            (Py_ssize_t)self->out.ends[0]);
    nic_out_clear(&self->out);
    return f;
}

static PyObject *Engine_receive(Engine *self, PyObject *args)
{
    Py_buffer f;
    double now;
    READY(self);
    if (!PyArg_ParseTuple(args, "y*d", &f, &now))
        return NULL;
    int rc = nic_receive(&self->e, f.buf, (size_t)f.len, now, &self->out);
    PyBuffer_Release(&f);
    if (rc < 0) {
        nic_out_clear(&self->out);
        return PyErr_NoMemory();
    }
    return out_list(self);
}

/* credit_rx(frame) -> whether it fits the credit given (rnic.credit_rx) */
static PyObject *Engine_credit_rx(Engine *self, PyObject *arg)
{
    Py_buffer f;
    READY(self);
    if (PyObject_GetBuffer(arg, &f, PyBUF_SIMPLE) < 0)
        return NULL;
    int fits = nic_credit_rx(&self->e, f.buf, (size_t)f.len);
    PyBuffer_Release(&f);
    return PyBool_FromLong(fits);
}

static PyObject *Engine_tick(Engine *self, PyObject *arg)
{
    READY(self);
    double now = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    if (nic_tick(&self->e, now, &self->out) < 0) {
        nic_out_clear(&self->out);
        return PyErr_NoMemory();
    }
    return out_list(self);
}

static PyObject *Engine_next_wakeup(Engine *self, PyObject *arg)
{
    READY(self);
    double now = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    return time_or_none(nic_next_wakeup(&self->e, now));
}

static PyObject *Engine_next_tick(Engine *self, PyObject *unused)
{
    READY(self);
    return time_or_none(nic_next_tick(&self->e));
}

static PyObject *Engine_may_send(Engine *self, PyObject *arg)
{
    READY(self);
    double now = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(nic_may_send(&self->e, now));
}

/* use_wire(size, now, ready_at) ; ready_at None: now */
static PyObject *Engine_use_wire(Engine *self, PyObject *args)
{
    Py_ssize_t size;
    double now;
    PyObject *ready;
    READY(self);
    if (!PyArg_ParseTuple(args, "ndO", &size, &now, &ready))
        return NULL;
    double r = NAN;
    if (ready != Py_None) {
        r = PyFloat_AsDouble(ready);
        if (PyErr_Occurred())
            return NULL;
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "use_wire: size must be >= 0");
        return NULL;
    }
    nic_use_wire(&self->e, (size_t)size, now, r);
    Py_RETURN_NONE;
}

static PyObject *Engine_set_deliver_data(Engine *self, PyObject *args)
{
    unsigned long qpn;
    int on;
    READY(self);
    if (!PyArg_ParseTuple(args, "kp", &qpn, &on))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    if (!qp)
        return NULL;
    /* "selective": the window's payload slots, made once here, never per frame */
    if (on && qp->ooo.flags && nic_ooo_alloc_data(&qp->ooo, self->e.mtu_payload) < 0)
        return PyErr_NoMemory();
    qp->deliver_data = on;
    if (!on) {
        nic_ooo_drop_data(&qp->ooo);
        for (size_t i = 0; i < qp->inbox_count; i++)
            free(qp->inbox[(qp->inbox_head + i) % qp->inbox_cap].data);
        qp->inbox_count = qp->inbox_head = 0;
        qp->parts_len = 0;
        qp->inbox_bytes = 0;
    }
    Py_RETURN_NONE;
}

/* take_messages(qpn, max or -1) -> [(msn, bytes)] */
static PyObject *Engine_take_messages(Engine *self, PyObject *args)
{
    unsigned long qpn;
    Py_ssize_t max;
    READY(self);
    if (!PyArg_ParseTuple(args, "kn", &qpn, &max))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    if (!qp)
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    while (qp->inbox_count && (max < 0 || PyList_GET_SIZE(list) < max)) {
        nic_inbox_msg *m = &qp->inbox[qp->inbox_head];
        PyObject *t = Py_BuildValue("(Ly#)", (long long)m->msn, (const char *)m->data,
                                    (Py_ssize_t)m->len);
        if (!t || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(t);
        qp->inbox_bytes -= (int64_t)m->len + NIC_INBOX_OVERHEAD;
        free(m->data);
        qp->inbox_head = (qp->inbox_head + 1) % qp->inbox_cap;
        qp->inbox_count--;
    }
    return list;
}

static PyObject *Engine_inbox_count(Engine *self, PyObject *args)
{
    unsigned long qpn;
    READY(self);
    if (!PyArg_ParseTuple(args, "k", &qpn))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    return qp ? PyLong_FromSize_t(qp->inbox_count) : NULL;
}

/* take_completions(qpn, max or -1) -> [(msg_id, size, posted_at, completed_at)], removed */
static PyObject *Engine_take_completions(Engine *self, PyObject *args)
{
    unsigned long qpn;
    Py_ssize_t max;
    int keep = 0;
    READY(self);
    if (!PyArg_ParseTuple(args, "kn|p", &qpn, &max, &keep))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    if (!qp)
        return NULL;
    size_t n = qp->completed_count;
    if (max >= 0 && (size_t)max < n)
        n = (size_t)max;
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        double *c = qp->completed + 4 * i;
        PyObject *t = Py_BuildValue("(LLdd)", (long long)c[0], (long long)c[1], c[2], c[3]);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    if (!keep) {
        memmove(qp->completed, qp->completed + 4 * n,
                (qp->completed_count - n) * 4 * sizeof(double));
        qp->completed_count -= n;
    }
    return list;
}

#define SET_INT(d, k, v)                                                           \
    do {                                                                           \
        PyObject *o_ = PyLong_FromLongLong((long long)(v));                        \
        if (!o_ || PyDict_SetItemString(d, k, o_) < 0) {                           \
            Py_XDECREF(o_);                                                        \
            goto fail;                                                             \
        }                                                                          \
        Py_DECREF(o_);                                                             \
    } while (0)
#define SET_FLOAT(d, k, v)                                                         \
    do {                                                                           \
        PyObject *o_ = PyFloat_FromDouble(v);                                      \
        if (!o_ || PyDict_SetItemString(d, k, o_) < 0) {                           \
            Py_XDECREF(o_);                                                        \
            goto fail;                                                             \
        }                                                                          \
        Py_DECREF(o_);                                                             \
    } while (0)

/* qp(qpn) -> dict of both sides' counters and state (rnic.stats' per-QP rows' fields). */
static PyObject *Engine_qp(Engine *self, PyObject *args)
{
    unsigned long qpn;
    READY(self);
    if (!PyArg_ParseTuple(args, "k", &qpn))
        return NULL;
    nic_qp *qp = qp_arg(self, qpn);
    if (!qp)
        return NULL;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    SET_INT(d, "tx_packets", qp->tx_packets);
    SET_INT(d, "tx_bytes", qp->tx_bytes);
    SET_INT(d, "tx_payload_bytes", qp->tx_payload_bytes);
    SET_INT(d, "rnr_naks", qp->rnr_naks);
    SET_INT(d, "retransmitted", qp->retransmitted);
    SET_INT(d, "naks", qp->naks);
    SET_INT(d, "timeouts", qp->timeouts);
    SET_INT(d, "cnps", qp->cnps);
    SET_INT(d, "una", qp->una);
    SET_INT(d, "next_psn", qp->next_psn);
    SET_INT(d, "end_psn", qp->end_psn);
    SET_FLOAT(d, "rate_bps", qp->has_rp ? qp->rp.rc : self->e.rate_bps);
    SET_INT(d, "pending_messages", qp->msg_count);
    SET_INT(d, "completed_waiting", qp->completed_count);
    SET_INT(d, "rx_packets", qp->rx_packets);
    SET_INT(d, "rx_bytes", qp->rx_bytes);
    SET_INT(d, "out_of_order", qp->out_of_order);
    SET_INT(d, "duplicates", qp->duplicates);
    SET_INT(d, "ce_marked", qp->ce_marked);
    SET_INT(d, "expected_psn", qp->expected);
    SET_INT(d, "messages_received", qp->messages_received);
    SET_INT(d, "inbox_messages", qp->inbox_count);
    SET_INT(d, "inbox_bytes", qp->inbox_bytes);
    SET_INT(d, "rnr_naks_sent", qp->rnr_naks_sent);
    SET_INT(d, "discarded_packets", qp->discarded_packets);
    SET_INT(d, "discarded_bytes", qp->discarded_bytes);
    SET_INT(d, "naks_sent", qp->naks_sent);
    SET_INT(d, "reorder_depth_max", qp->reorder_depth_max);
    SET_INT(d, "beyond_window", qp->beyond_window);
    if (qp->has_rp) {
        const nic_rp *rp = &qp->rp;
        SET_FLOAT(d, "dcqcn_target_rate_bps", rp->rt);
        SET_FLOAT(d, "dcqcn_alpha", rp->alpha);
        SET_INT(d, "dcqcn_cnps_received", rp->cnps_received);
        SET_INT(d, "dcqcn_rate_decreases", rp->rate_decreases);
        SET_INT(d, "dcqcn_alpha_decays", rp->alpha_decays);
        SET_INT(d, "dcqcn_timer_events", rp->timer_events);
        SET_INT(d, "dcqcn_byte_events", rp->byte_events);
        SET_INT(d, "dcqcn_increases_fast_recovery", rp->inc_fast);
        SET_INT(d, "dcqcn_increases_additive", rp->inc_additive);
        SET_INT(d, "dcqcn_increases_hyper", rp->inc_hyper);
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* nic() -> the NIC-wide state and counters */
static PyObject *Engine_nic(Engine *self, PyObject *unused)
{
    READY(self);
    nic_engine *e = &self->e;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    SET_INT(d, "pause_rx", e->pause_rx);
    SET_INT(d, "pause_tx", e->pause_tx);
    SET_INT(d, "cnps_sent", e->cnps_sent);
    SET_INT(d, "rx_overflow", e->rx_overflow);
    SET_FLOAT(d, "rx_buffer_bytes", e->rx_buffer);
    SET_FLOAT(d, "free_at", e->free_at);
    SET_INT(d, "xoff", e->xoff);
    SET_INT(d, "np_ce_received", e->np_ce_received);
    SET_INT(d, "np_cnps_sent", e->np_cnps_sent);
    SET_INT(d, "np_cnps_suppressed", e->np_cnps_suppressed);
    SET_INT(d, "fc_tx", e->credit.fc_tx);
    SET_INT(d, "fc_rx", e->credit.fc_rx);
    SET_INT(d, "credit_overruns", e->credit.overruns);
    SET_INT(d, "ctrl_waiting", nic_credit_waiting(&e->credit));
    PyObject *until = PyList_New(NIC_PRIOS), *paused = PyList_New(NIC_PRIOS);
    if (!until || !paused) {
        Py_XDECREF(until);
        Py_XDECREF(paused);
        goto fail;
    }
    for (int p = 0; p < NIC_PRIOS; p++) {
        PyList_SET_ITEM(until, p, PyFloat_FromDouble(e->paused_until[p]));
        PyList_SET_ITEM(paused, p, PyFloat_FromDouble(e->paused_s[p]));
    }
    int bad = PyDict_SetItemString(d, "paused_until", until) < 0 ||
              PyDict_SetItemString(d, "paused_s_total", paused) < 0;
    Py_DECREF(until);
    Py_DECREF(paused);
    if (bad)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* credit() -> None (PFC), or [(vl, {state}), ...] in the spec's order: CreditLink's raw
 * fields (nicpath.py makes `stats` of them) */
static PyObject *Engine_credit(Engine *self, PyObject *unused)
{
    READY(self);
    nic_credit *c = &self->e.credit;
    if (!c->enabled)
        Py_RETURN_NONE;
    PyObject *list = PyList_New(c->nvls);
    if (!list)
        return NULL;
    for (int i = 0; i < c->nvls; i++) {
        int vl = c->vls[i];
        nic_vl *st = &c->vl[vl];
        PyObject *d = PyDict_New();
        if (!d)
            goto fail_list;
        PyList_SET_ITEM(list, i, Py_BuildValue("(iN)", vl, d));
        if (!PyList_GET_ITEM(list, i))
            goto fail_list;
        SET_INT(d, "credit_blocks", nic_credit_blocks(c, vl));
        SET_INT(d, "fctbs", st->fctbs);
        SET_INT(d, "abr", st->abr);
        SET_FLOAT(d, "blocked_s", st->blocked_s);
        SET_FLOAT(d, "blocked_since", st->blocked_since);
        SET_INT(d, "blocked_count", st->blocked_count);
        SET_INT(d, "tx_frames", st->tx_frames);
        SET_INT(d, "rx_frames", st->rx_frames);
        SET_INT(d, "overruns", st->overruns);
        SET_INT(d, "abr_resyncs", st->abr_resyncs);
        SET_INT(d, "fc_tx", st->fc_tx);
        SET_INT(d, "fc_rx", st->fc_rx);
        if (st->has_limit)
            SET_INT(d, "fccl_rx", st->limit);
        if (st->has_advertised)
            SET_INT(d, "fccl_tx", st->advertised);
    }
    return list;
fail:
fail_list:
    Py_DECREF(list);
    return NULL;
}

/* clock() -> fidelity.PortClock's fields */
static PyObject *Engine_clock(Engine *self, PyObject *unused)
{
    READY(self);
    nic_engine *e = &self->e;
    PyObject *hist = PyList_New(NIC_HIST);
    if (!hist)
        return NULL;
    for (int i = 0; i < NIC_HIST; i++)
        PyList_SET_ITEM(hist, i, PyLong_FromLongLong(e->hist[i]));
    return Py_BuildValue("{s:d,s:L,s:N,s:d,s:d,s:d}", "frame_s", e->frame_s, "frames",
                         (long long)e->frames, "hist", hist, "max_late_s", e->max_late_s,
                         "deficit_s", e->deficit_s, "busy_s", e->busy_s);
}

static PyObject *Engine_clock_reset(Engine *self, PyObject *unused)
{
    READY(self);
    nic_clock_reset(&self->e);
    Py_RETURN_NONE;
}

/* set(rate_bps=None, drain_rate_bps=..., stuck=None): the agent's faults. drain: -1 None. */
static PyObject *Engine_configure(Engine *self, PyObject *args)
{
    double rate, drain;
    int stuck;
    READY(self);
    if (!PyArg_ParseTuple(args, "ddi", &rate, &drain, &stuck))
        return NULL;
    if (rate > 0)
        self->e.rate_bps = rate;
    if (!isnan(drain))
        self->e.drain_rate_bps = drain;
    if (stuck >= 0)
        self->e.stuck = stuck;
    Py_RETURN_NONE;
}

static PyObject *Engine_set_takers(Engine *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    self->loop.takers = on;
    Py_RETURN_NONE;
}

static PyObject *Engine_loop_reset(Engine *self, PyObject *arg)
{
    double frame_s = PyFloat_AsDouble(arg);
    if (PyErr_Occurred())
        return NULL;
    emu_loopmon_reset(&self->loop.mon, frame_s);
    Py_RETURN_NONE;
}

static PyObject *Engine_loop_pass(Engine *self, PyObject *args)
{
    return emu_loopmon_pass_py(&self->loop.mon, args);
}

static PyObject *Engine_loop_stats(Engine *self, PyObject *unused)
{
    PyObject *stats = emu_loopmon_stats(&self->loop.mon);
    if (!stats)
        return NULL;
    PyObject *tx_errors = PyLong_FromLongLong(self->loop.tx_errors);
    PyObject *tx_frames = PyLong_FromLongLong(self->loop.tx_frames);
    PyObject *in_loop = PyLong_FromLong(self->running);
    int failed = !tx_errors || !tx_frames || !in_loop ||
                 PyDict_SetItemString(stats, "tx_errors", tx_errors) < 0 ||
                 PyDict_SetItemString(stats, "tx_frames", tx_frames) < 0 ||
                 PyDict_SetItemString(stats, "in_loop", in_loop) < 0;
    Py_XDECREF(tx_errors);
    Py_XDECREF(tx_frames);
    Py_XDECREF(in_loop);
    if (failed) {
        Py_DECREF(stats);
        return NULL;
    }
    return stats;
}

static PyObject *Engine_rto_s(Engine *self, void *closure) { return PyFloat_FromDouble(self->e.rto_s); }

static PyMethodDef Engine_methods[] = {
    {"connect", (PyCFunction)Engine_connect, METH_VARARGS, NULL},
    {"post", (PyCFunction)Engine_post, METH_VARARGS, NULL},
    {"next_frame", (PyCFunction)Engine_next_frame, METH_O, NULL},
    {"receive", (PyCFunction)Engine_receive, METH_VARARGS, NULL},
    {"tick", (PyCFunction)Engine_tick, METH_O, NULL},
    {"credit_rx", (PyCFunction)Engine_credit_rx, METH_O, NULL},
    {"credit", (PyCFunction)Engine_credit, METH_NOARGS, NULL},
    {"next_wakeup", (PyCFunction)Engine_next_wakeup, METH_O, NULL},
    {"next_tick", (PyCFunction)Engine_next_tick, METH_NOARGS, NULL},
    {"may_send", (PyCFunction)Engine_may_send, METH_O, NULL},
    {"use_wire", (PyCFunction)Engine_use_wire, METH_VARARGS, NULL},
    {"set_deliver_data", (PyCFunction)Engine_set_deliver_data, METH_VARARGS, NULL},
    {"take_messages", (PyCFunction)Engine_take_messages, METH_VARARGS, NULL},
    {"inbox_count", (PyCFunction)Engine_inbox_count, METH_VARARGS, NULL},
    {"take_completions", (PyCFunction)Engine_take_completions, METH_VARARGS, NULL},
    {"qp", (PyCFunction)Engine_qp, METH_VARARGS, NULL},
    {"nic", (PyCFunction)Engine_nic, METH_NOARGS, NULL},
    {"clock", (PyCFunction)Engine_clock, METH_NOARGS, NULL},
    {"clock_reset", (PyCFunction)Engine_clock_reset, METH_NOARGS, NULL},
    {"configure", (PyCFunction)Engine_configure, METH_VARARGS, NULL},
    {"set_takers", (PyCFunction)Engine_set_takers, METH_O, NULL},
    {"loop_reset", (PyCFunction)Engine_loop_reset, METH_O, NULL},
    {"loop_stats", (PyCFunction)Engine_loop_stats, METH_NOARGS, NULL},
    {"loop_pass", (PyCFunction)Engine_loop_pass, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Engine_getset[] = {
    {"rto_s", (getter)Engine_rto_s, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emu.host._nicpath.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One RDMA NIC's transport in C (emu/host/nicpath.py wraps it).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_getset = Engine_getset,
};

/* ----- Loop: the engines one process serves (nic_loop.c) ------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *engines;          /* list of Engine */
    nic_group g;
    int running;
    int eps_open;               /* g.ep_ports and g.ep_py are open (made by init) */
} Loop;

static void Loop_dealloc(Loop *self)
{
    Py_XDECREF(self->engines);
    free(self->g.e);
    free(self->g.s);
    free(self->g.out);
    if (self->eps_open) {
        close(self->g.ep_ports);
        close(self->g.ep_py);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Loop_init(Loop *self, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ""))
        return -1;
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "Loop: running");
        return -1;
    }
    if (!self->eps_open) {
        self->g.ep_ports = epoll_create1(EPOLL_CLOEXEC);
        self->g.ep_py = epoll_create1(EPOLL_CLOEXEC);
        if (self->g.ep_ports < 0 || self->g.ep_py < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            if (self->g.ep_ports >= 0)
                close(self->g.ep_ports);
            if (self->g.ep_py >= 0)
                close(self->g.ep_py);
            return -1;
        }
        self->eps_open = 1;
    }
    Py_XSETREF(self->engines, PyList_New(0));
    return self->engines ? 0 : -1;
}

/* add(engine, port_fd): one more engine, its port socket. */
static PyObject *Loop_add(Loop *self, PyObject *args)
{
    PyObject *obj;
    int fd;
    if (!PyArg_ParseTuple(args, "O!i", &EngineType, &obj, &fd))
        return NULL;
    Engine *eng = (Engine *)obj;
    READY(eng);
    if (self->running || eng->running) {
        PyErr_SetString(PyExc_RuntimeError, "add: the loop or the engine is running");
        return NULL;
    }
    int n = self->g.n + 1;
    nic_engine **e = realloc(self->g.e, (size_t)n * sizeof *e);
    if (e)
        self->g.e = e;
    nic_loop_state **st = realloc(self->g.s, (size_t)n * sizeof *st);
    if (st)
        self->g.s = st;
    nic_out **o = realloc(self->g.out, (size_t)n * sizeof *o);
    if (o)
        self->g.out = o;
    if (!e || !st || !o)
        return PyErr_NoMemory();
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)(n - 1)};
    if (!self->eps_open) {
        PyErr_SetString(PyExc_RuntimeError, "add: the loop was not initialised");
        return NULL;
    }
    if (epoll_ctl(self->g.ep_ports, EPOLL_CTL_ADD, fd, &ev) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    eng->loop.fd = fd;
    self->g.e[n - 1] = &eng->e;
    self->g.s[n - 1] = &eng->loop;
    self->g.out[n - 1] = &eng->out;
    self->g.n = n;
    if (PyList_Append(self->engines, obj) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* watch(python_fds): Python's sockets the loop also sleeps on (replaces the last set;
 * called when the set changes, not every pass, so the set is built anew). */
static PyObject *Loop_watch(Loop *self, PyObject *fds)
{
    if (!self->eps_open) {
        PyErr_SetString(PyExc_RuntimeError, "watch: the loop was not initialised");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(fds, "watch: a sequence of file descriptors");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        Py_DECREF(seq);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (fd == -1 && PyErr_Occurred())
            goto fail;
        if (fd < 0 || fd > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "watch: %ld is not a file descriptor", fd);
            goto fail;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = (int)fd};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, (int)fd, &ev) < 0 && errno != EEXIST) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto fail;
        }
    }
    /* Python calls this between passes (from the loop's callback), and the
     * loop reads the set's descriptor every pass: the new set replaces the old. */
    close(self->g.ep_py);
    self->g.ep_py = ep;
    self->g.npy = (int)n;
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    close(ep);
    Py_DECREF(seq);
    return NULL;
}

/* run(callback): callback(now, ready_fds, frames: ((engine index, bytes), ...),
 * wanting: (engine index, ...) with frames or whole messages for Python) -> next due or < 0 */
static PyObject *Loop_run(Loop *self, PyObject *cb)
{
    if (!PyCallable_Check(cb) || self->g.n < 1) {
        PyErr_SetString(PyExc_ValueError, "run: a callable, after add()");
        return NULL;
    }
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "run: the loop is running");
        return NULL;
    }
    self->running = 1;
    for (int i = 0; i < self->g.n; i++)
        ((Engine *)PyList_GET_ITEM(self->engines, i))->running = 1;
    PyObject *r = nic_run(&self->g, cb);
    for (int i = 0; i < self->g.n; i++)
        ((Engine *)PyList_GET_ITEM(self->engines, i))->running = 0;
    self->running = 0;
    return r;
}

static PyObject *Loop_stats(Loop *self, PyObject *unused)
{
    return Py_BuildValue("{s:i,s:L}", "engines", self->g.n, "wakeups", (long long)self->g.wakeups);
}

static PyMethodDef Loop_methods[] = {
    {"add", (PyCFunction)Loop_add, METH_VARARGS, NULL},
    {"watch", (PyCFunction)Loop_watch, METH_O, NULL},
    {"run", (PyCFunction)Loop_run, METH_O, NULL},
    {"stats", (PyCFunction)Loop_stats, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emu.host._nicpath.Loop",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One process's loop over the engines it serves (nic_loop.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loop_init,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
};

static struct PyModuleDef nicpath_module = {
    PyModuleDef_HEAD_INIT, "emu.host._nicpath", "The compiled RoCE NIC engine.", -1, NULL,
};

PyMODINIT_FUNC PyInit__nicpath(void)
{
    if (PyType_Ready(&EngineType) < 0 || PyType_Ready(&LoopType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&nicpath_module);
    if (!m)
        return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&LoopType);
    if (PyModule_AddObject(m, "Loop", (PyObject *)&LoopType) < 0) {
        Py_DECREF(&LoopType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
