/* One switch's per-frame path in C: receive rings, the receive path, enqueue,
 * PAUSE honoured and sent, paced and batched transmit.
 *
 * Reference: emu/switch/datapath.py (_receive, _enqueue, _receive_pause,
 * _send_pfc, _send_due, _transmit, _flush_port) and emu/switch/rxring.py.
 * A frame whose key is not in the exact-match cache goes up to Python
 * (`upcall`), which runs the OpenFlow pipeline, enqueues the outputs through
 * fp_switch_enqueue and may hand back a compiled action list to cache.
 */
#include "fp.h"

#include <errno.h>
#include <linux/if_packet.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_OUTGOING
#define PACKET_OUTGOING 4
#endif

double
fp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double
fp_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

fp_port *
fp_port_get(fp_switch *sw, uint32_t port_no)
{
    if (port_no > FP_MAX_PORT_NO)
        return NULL;
    int i = sw->index[port_no];
    return i < 0 ? NULL : sw->ports[i];
}

/* ----- the receive ring (rxring.py) ---------------------------------------------- */

int
fp_port_open_ring(fp_port *p, uint32_t max_frame, uint32_t frames)
{
    /* A slot holds the kernel's header and a frame of max_frame bytes, which
     * starts at TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14 (packet_rcv's macoff
     * for Ethernet): 66 bytes in. Slots need not be a power of two; a block
     * (64 KiB) holds as many whole slots as fit. */
    uint32_t slot = (max_frame + 66 + TPACKET_ALIGNMENT - 1) & ~(uint32_t)(TPACKET_ALIGNMENT - 1);
    uint32_t block_bytes = 65536;
    while (block_bytes < slot)
        block_bytes *= 2;
    uint32_t per_block = block_bytes / slot;
    uint32_t blocks = (frames + per_block - 1) / per_block;
    if (!blocks)
        blocks = 1;
    int version = TPACKET_V2, one = 1;
    if (setsockopt(p->fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) < 0)
        return -1;
    if (setsockopt(p->fd, SOL_PACKET, PACKET_COPY_THRESH, &one, sizeof one) < 0)
        return -1;
    struct tpacket_req req = {block_bytes, blocks, slot, blocks * per_block};
    if (setsockopt(p->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0)
        return -1;
    size_t bytes = (size_t)block_bytes * blocks;
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
    if (map == MAP_FAILED)
        return -1;
    p->ring = map;
    p->ring_bytes = bytes;
    p->slot_bytes = slot;
    p->per_block = per_block;
    p->block_bytes = block_bytes;
    p->nslots = blocks * per_block;
    p->slot = 0;
    return 0;
}

void
fp_port_close(fp_port *p)
{
    if (p->ring) {
        munmap(p->ring, p->ring_bytes);
        p->ring = NULL;
    }
}

/* ----- enqueue (datapath._enqueue for one output) ------------------------------------ */

int
fp_switch_enqueue(fp_switch *sw, uint32_t in_port, uint32_t out_port, const uint8_t *f, size_t len,
                  int queue_id, double now)
{
    fp_port *out = fp_port_get(sw, out_port);
    if (!out)
        return 0;  /* AGG_PORT and unknown ports: the Python side handles AGG */
    int tos = fp_tos(f, len);
    int prio;
    if (queue_id >= 0 && queue_id < FP_PRIOS)
        prio = queue_id;
    else
        prio = tos >= 0 ? sw->dscp_to_prio[tos >> 2] : 0;
    if (out->wd_drop >> prio & 1) {
        sw->watchdog_drops++;
        out->c.tx_dropped++;
        return 0;
    }
    int charge, mark;
    if (!fp_admit(sw, in_port, prio, out, (int64_t)len, tos >= 0 && (tos & 3) != 0, now, &charge,
                  &mark)) {
        out->c.tx_dropped++;
        return 0;
    }
    fp_frame *fr = fp_pool_get(&sw->pool, len);
    if (!fr) {
        /* No slot: the frame is longer than a slot, or the pool is at its bound
         * (more frames than the buffer's bytes allow of 64-byte frames). */
        fp_release(sw, in_port, prio, out, (int64_t)len, charge);
        out->c.tx_dropped++;
        sw->pool_drops++;
        return 0;
    }
    memcpy(fr->data, f, len);
    fr->in_port = in_port;
    fr->prio = (uint8_t)prio;
    fr->charge = (uint8_t)charge;
    if (mark)
        fp_set_ip_ecn(fr->data, len, 3); /* CE; RoCE's ICRC masks the ECN bits */
    if (fp_sched_enqueue(&out->sched, fr, now)) {
        if (!out->busy) {
            out->busy = 1;
            if (now < sw->tx_due)
                sw->tx_due = now;
        }
        return 1;
    }
    fp_release(sw, in_port, prio, out, (int64_t)len, charge);
    out->c.tx_dropped++;
    fp_pool_put(&sw->pool, fr);
    return 0;
}

/* ----- PAUSE received (datapath._receive_pause) ------------------------------------ */

static void
receive_pause(fp_switch *sw, fp_port *p, const uint8_t *f, size_t len, double now)
{
    uint8_t vector;
    uint16_t quanta[FP_PRIOS];
    if (!fp_pfc_parse(f, len, &vector, quanta)) {
        p->c.rx_errors++;
        return;
    }
    for (int prio = 0; prio < FP_PRIOS; prio++) {
        if (!(vector >> prio & 1))
            continue;
        p->pause_rx[prio]++;
        p->last_pause_rx[prio] = now;
        if (p->wd_ignore_pause >> prio & 1)
            continue;
        fp_sched_pause(&p->sched, prio, now + quanta[prio] * 512 / p->rate_bps, now);
    }
    p->busy = 1;
    sw->tx_due = now;
}

/* ----- the slow path ---------------------------------------------------------------- */

/* Hand a frame to Python (pipeline miss, or a frame class C does not own);
 * install what Python compiled. Runs with the GIL taken here. */
static void
upcall(fp_switch *sw, fp_port *p, const uint8_t *f, size_t len, double now, const uint8_t *key)
{
    sw->upcalls++;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *frame = PyBytes_FromStringAndSize((const char *)f, (Py_ssize_t)len);
    PyObject *res = NULL;
    if (frame)
        res = PyObject_CallFunction(sw->upcall, "IOdi", p->port_no, frame, now, key != NULL);
    Py_XDECREF(frame);
    if (!res) {
        /* The Python side catches what a frame can raise; anything else is a bug
         * there, reported once in its log and counted, and the switch goes on. */
        sw->upcall_errors++;
        PyErr_WriteUnraisable(sw->upcall);
        PyErr_Clear();
    } else if (res != Py_None && key) {
        /* (entry id, [(code, a, b), ...]) */
        unsigned long id;
        PyObject *ops;
        if (PyArg_ParseTuple(res, "kO!", &id, &PyList_Type, &ops)) {
            Py_ssize_t n = PyList_GET_SIZE(ops);
            fp_op buf[256];
            int ok = n <= 256;
            for (Py_ssize_t i = 0; ok && i < n; i++) {
                PyObject *t = PyList_GET_ITEM(ops, i);
                unsigned int code, field = 0, sub = 0;
                int queue = -1;
                unsigned long long value = 0, port = 0;
                if (!PyArg_ParseTuple(t, "IKKiII", &code, &port, &value, &queue, &field, &sub)) {
                    ok = 0;
                    break;
                }
                if (code >= FP_OP_CODES || field > 0xFF || sub > 0xFFFF || port > 0xFFFFFFFFull) {
                    ok = 0;
                    break;
                }
                buf[i] = (fp_op){(uint8_t)code, (uint8_t)field, (uint16_t)sub, queue,
                                 (uint32_t)port, value};
            }
            /* The shape (every SUB and ADAPT inside the list), then the slots it counts in. */
            ok = ok && fp_ops_check(buf, (uint32_t)n, 0) && fp_ar_prepare(sw, buf, (uint32_t)n);
            if (ok) {
                fp_entry *e = fp_cache_insert(&sw->cache, key, buf, (uint32_t)n);
                if (e)
                    e->id = (uint32_t)id;
            }
        }
        if (PyErr_Occurred()) {
            sw->upcall_errors++;
            PyErr_WriteUnraisable(sw->upcall);
            PyErr_Clear();
        }
    }
    Py_XDECREF(res);
    PyGILState_Release(g);
}

/* ----- one received frame (datapath._receive's loop body) ------------------------------ */

int
fp_switch_receive(fp_switch *sw, fp_port *p, const uint8_t *f, size_t len, double now)
{
    p->c.rx_packets++;
    p->c.rx_bytes += len;
    if (len < 14) {
        p->c.rx_errors++;
        sw->malformed++;
        return 0;
    }
    if (f[12] == 0x88 && f[13] == 0x08) {
        /* 802.3 MAC control belongs to the link: honoured here, never forwarded */
        receive_pause(sw, p, f, len, now);
        return 0;
    }
    if (f[12] == 0x88 && f[13] == 0xB5) {
        upcall(sw, p, f, len, now, NULL); /* a credit update: the credit link's (Python) */
        return 0;
    }
    if (!p->recv_ok) {
        p->c.rx_dropped++;
        return 0;
    }
    uint8_t key[FP_KEY_BYTES];
    if (sw->cache_enabled && fp_fast_key(f, len, p->port_no, key)) {
        fp_entry *e = fp_cache_lookup(&sw->cache, key);
        if (e) {
            sw->hits++;
            e->packets++;
            e->bytes += len;
            e->last_used = now;
            fp_exec(sw, p->port_no, sw->cache.ops + e->op_off, e->op_len, f, len, now, 0);
            return 1;
        }
        sw->misses++;
        upcall(sw, p, f, len, now, key);
        return 1;
    }
    upcall(sw, p, f, len, now, NULL);
    return 1;
}

/* ----- reading a port's ring ------------------------------------------------------------ */

/* Read up to FP_RX_BATCH frames of `p` and forward them; how many it read. */
int
fp_switch_poll_port(fp_switch *sw, fp_port *p, double *now)
{
    uint8_t *tagged = sw->scratch_tagged, *copied = sw->scratch_copied;
    int read = 0;
    while (read < FP_RX_BATCH && p->ring) {
        if (sw->tx_due <= *now)
            fp_switch_transmit(sw, *now);
        uint8_t *base = p->ring + (size_t)(p->slot / p->per_block) * p->block_bytes +
                        (size_t)(p->slot % p->per_block) * p->slot_bytes;
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)base;
        uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
        if (!(status & TP_STATUS_USER)) {
            if (read == 0) {
                /* Ready with nothing in the ring: a pending socket error (the
                 * interface went down) that would keep the socket ready. */
                int err;
                socklen_t l = sizeof err;
                getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &l);
            }
            break;
        }
        const uint8_t *frame = NULL;
        size_t len = 0;
        if (h->tp_mac + (size_t)h->tp_snaplen <= p->slot_bytes) {
            frame = base + h->tp_mac;
            len = h->tp_snaplen;
        }
        if (status & TP_STATUS_COPY) {
            /* Longer than a slot: the whole copy waits on the socket's queue. */
            ssize_t n = recv(p->fd, copied, FP_MAX_FRAME, MSG_DONTWAIT | MSG_TRUNC);
            if (n >= (ssize_t)h->tp_len && (size_t)n <= FP_MAX_FRAME) {
                frame = copied;
                len = (size_t)n;
            } else {
                p->truncated++;
            }
        }
        int outgoing = p->skip_outgoing && base[32 + 10] == PACKET_OUTGOING;
        if (frame && !outgoing && (status & TP_STATUS_VLAN_VALID) && len >= 12 &&
            len + 4 <= FP_MAX_FRAME + 4) {
            /* The kernel took the tag out into metadata: put it back. */
            unsigned tpid = (status & TP_STATUS_VLAN_TPID_VALID) && h->tp_vlan_tpid
                                ? h->tp_vlan_tpid
                                : 0x8100;
            memcpy(tagged, frame, 12);
            tagged[12] = (uint8_t)(tpid >> 8);
            tagged[13] = (uint8_t)tpid;
            tagged[14] = (uint8_t)(h->tp_vlan_tci >> 8);
            tagged[15] = (uint8_t)h->tp_vlan_tci;
            memcpy(tagged + 16, frame + 12, len - 12);
            frame = tagged;
            len += 4;
        }
        p->slot = p->slot + 1 < p->nslots ? p->slot + 1 : 0;
        if (outgoing || !frame) {
            __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
            continue;
        }
        read++;
        *now = fp_now();
        fp_switch_receive(sw, p, frame, len, *now);
        /* The slot is the kernel's again once the frame is forwarded (copied
         * into the queues, or into the upcall's bytes). */
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    }
    return read;
}

/* ----- transmit (datapath._send_due, _transmit) -------------------------------------------- */

static void
sent(fp_switch *sw, fp_port *p, fp_frame *f)
{
    fp_release(sw, f->in_port, f->prio, p, f->len, f->charge);
    p->c.tx_packets++;
    p->c.tx_bytes += f->len;
    fp_pool_put(&sw->pool, f);
}

static void
capture(fp_port *p, fp_frame *f, int prio)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *item = Py_BuildValue("(iy#)", prio, f ? (const char *)f->data : "",
                                   (Py_ssize_t)(f ? f->len : 0));
    if (item) {
        PyList_Append(p->captured, item);
        Py_DECREF(item);
    }
    PyErr_Clear();
    PyGILState_Release(g);
}

/* Send `p`'s frames while its wire is free up to `until`. */
static void
send_due(fp_switch *sw, fp_port *p, double now, double until)
{
    fp_sched *s = &p->sched;
    fp_frame *batch[FP_TX_BATCH];
    fp_undo undo[FP_TX_BATCH];
    struct mmsghdr msgs[FP_TX_BATCH];
    struct iovec iov[FP_TX_BATCH];
    /* A lossy link decides per frame, in order: one frame at a time then, so
     * that a refused frame never has a lost one behind it. */
    int max = (p->loss_p > 0 || p->loss_every) ? 1 : FP_TX_BATCH;
    while (s->pending && s->free_at <= until) {
        int n = 0;
        while (n < max && s->pending && s->free_at <= until) {
            fp_frame *f = fp_sched_dequeue(s, now, &undo[n]);
            if (!f)
                break;
            int nth = 0;
            if (p->loss_every && fp_is_rocev2(f->data, f->len)) {
                p->loss_count++;
                nth = p->loss_count % p->loss_every == 0;
            }
            if (nth || (p->loss_p > 0 && fp_mt_random(&sw->loss_rng) < p->loss_p)) {
                /* On the wire and lost: counted as sent, never arrives. */
                p->lost_frames++;
                sent(sw, p, f);
                continue;
            }
            batch[n++] = f;
        }
        if (n == 0)
            break;
        int i = 0;
        if (p->fd < 0) {
            for (; i < n; i++) {
                capture(p, batch[i], batch[i]->prio);
                sent(sw, p, batch[i]);
            }
            continue;
        }
        for (int k = 0; k < n; k++) {
            iov[k].iov_base = batch[k]->data;
            iov[k].iov_len = batch[k]->len;
            memset(&msgs[k], 0, sizeof msgs[k]);
            msgs[k].msg_hdr.msg_iov = &iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        int blocked = 0;
        while (i < n) {
            int r = sendmmsg(p->fd, msgs + i, (unsigned)(n - i), MSG_DONTWAIT);
            if (r > 0) {
                for (int k = 0; k < r; k++)
                    sent(sw, p, batch[i + k]);
                i += r;
            } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
                blocked = 1;
                break;
            } else if (r < 0 && errno == EINTR) {
                continue;
            } else {
                /* Refused for good (the interface is down): dropped, as Python's OSError. */
                fp_frame *f = batch[i++];
                p->c.tx_dropped++;
                fp_release(sw, f->in_port, f->prio, p, f->len, f->charge);
                fp_pool_put(&sw->pool, f);
            }
        }
        if (blocked) {
            /* The socket buffer is full: put back what did not go, last first. */
            for (int k = n - 1; k >= i; k--) {
                if (p->loss_every && fp_is_rocev2(batch[k]->data, batch[k]->len))
                    p->loss_count--;
                fp_sched_requeue_front(s, batch[k], &undo[k]);
            }
            return;
        }
    }
}

/* Send every frame whose time has come; returns the earliest next deadline
 * (INFINITY when nothing waits) and keeps it in sw->tx_due. */
double
fp_switch_transmit(fp_switch *sw, double now)
{
    double next = INFINITY;
    for (int i = 0; i < sw->nports; i++) {
        fp_port *p = sw->ports[i];
        if (!p->busy)
            continue;
        fp_sched *s = &p->sched;
        double until = now + s->early_s;
        if (s->pending && s->free_at <= until)
            send_due(sw, p, now, until);
        double ready = fp_sched_ready_at(s);
        if (ready < 0)
            p->busy = 0;
        else if (ready < next)
            next = ready;
    }
    sw->tx_due = next;
    return next;
}

/* datapath._send_pfc: the PAUSE frames the buffer asks for, ahead of any queued frame. */
void
fp_switch_send_pfc(fp_switch *sw, double now)
{
    fp_buffer_pfc_due(sw, now);
    for (int i = 0; i < sw->nports; i++) {
        fp_port *p = sw->ports[i];
        if (!p->pending_mask)
            continue;
        uint8_t frame[60];
        memcpy(frame, p->pfc_template, sizeof frame);
        frame[14] = 0x01;
        frame[15] = 0x01;
        frame[16] = 0;
        frame[17] = p->pending_mask;
        for (int prio = 0; prio < FP_PRIOS; prio++) {
            unsigned q = (p->pending_mask >> prio & 1) ? p->pending_quanta[prio] : 0;
            frame[18 + 2 * prio] = (uint8_t)(q >> 8);
            frame[19 + 2 * prio] = (uint8_t)q;
        }
        p->pending_mask = 0;
        if (p->fd < 0) {
            PyGILState_STATE g = PyGILState_Ensure();
            PyObject *item = Py_BuildValue("(iy#)", -1, (const char *)frame, (Py_ssize_t)60);
            if (item) {
                PyList_Append(p->captured, item);
                Py_DECREF(item);
            }
            PyErr_Clear();
            PyGILState_Release(g);
            p->pfc_tx_frames++;
            continue;
        }
        if (send(p->fd, frame, sizeof frame, MSG_DONTWAIT) < 0) {
            p->c.tx_dropped++;
            continue;
        }
        p->pfc_tx_frames++;
    }
}

/* datapath._flush_port: drop what waits on `prio_mask`'s queues; returns frames dropped. */
int64_t
fp_flush(fp_switch *sw, fp_port *p, uint8_t prio_mask)
{
    fp_sched *s = &p->sched;
    int64_t n = 0;
    for (int prio = 0; prio < FP_PRIOS; prio++) {
        if (!(prio_mask >> prio & 1))
            continue;
        fp_frame *f = s->q[prio].head;
        uint64_t count = 0;
        while (f) {
            fp_frame *next = f->next;
            fp_release(sw, f->in_port, f->prio, p, f->len, f->charge);
            fp_pool_put(&sw->pool, f);
            count++;
            f = next;
        }
        s->c[prio].dropped_packets += count;
        s->c[prio].dropped_bytes += (uint64_t)s->depth[prio];
        s->pending -= (uint32_t)count;
        s->q[prio].head = s->q[prio].tail = NULL;
        s->nonempty &= (uint8_t)~(1 << prio);
        s->depth[prio] = 0;
        n += (int64_t)count;
    }
    p->c.tx_dropped += (uint64_t)n;
    if (!s->pending)
        p->busy = 0;
    return n;
}
