/* The NIC agent's event loop in C: frames never go up to Python.
 *
 * emu/host/agent.py's `run` is the specification. One pass: the engine's
 * timers (PAUSE refresh, DCQCN), Python when it asked to be called
 * (its timers: samples, collectives' wake-ups), or has something to do
 * (its management sockets are readable, whole messages wait for a collective,
 * a collective takes non-RoCE frames), the data frames the pacing allows, then
 * ppoll(2) until the earliest of the engine's and Python's deadlines (ppoll
 * takes nanoseconds; epoll_wait only whole milliseconds, the reason the
 * Python loop used select). Frames read from the port go through
 * nic_receive and its replies leave at once. The GIL is held except while
 * asleep, so that Python's management thread (a collective's set-up) and
 * this loop never touch the engine at the same time.
 *
 * The stall meter is fidelity.LoopMonitor's (`woke`), kept here per pass.
 */
#include "nic.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define NIC_RX_BATCH 64      /* agent.RX_BATCH */
#define NIC_RX_BYTES 9216    /* agent._receive's recv size */

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void nic_loopmon_reset(nic_loopmon *m, double frame_s)
{
    memset(m, 0, sizeof *m);
    m->frame_s = frame_s;
}

/* fidelity.LoopMonitor.pass_done */
static void loopmon_pass(nic_loopmon *m, double stall, int mattered, const char *work,
                         double cpu_s, double ended_at, int64_t frames)
{
    m->passes++;
    if (stall <= m->frame_s)
        return;
    if (!mattered) {
        if (stall > m->idle_longest_s)
            m->idle_longest_s = stall;
        return;
    }
    m->over_1++;
    m->stalled_s += stall;
    if (stall > 10 * m->frame_s)
        m->over_10++;
    if (stall > m->longest_s) {
        m->longest_s = stall;
        snprintf(m->longest_work, sizeof m->longest_work, "%s", work);
        m->longest_cpu_s = cpu_s;
        m->longest_frames = frames;
        m->longest_ended_at = ended_at;
    }
}

static void add_work(char *work, size_t cap, const char *what)
{
    if (strstr(work, what))
        return;
    size_t n = strlen(work);
    snprintf(work + n, cap - n, "%s%s", n ? "," : "", what);
}

static void send_out(nic_loop_state *s, nic_out *out)
{
    size_t start = 0;
    for (size_t k = 0; k < out->count; k++) {
        size_t end = out->ends[k];
        if (send(s->fd, out->buf + start, end - start, 0) < 0)
            s->tx_errors++;  /* as if lost on the wire: go-back-N recovers (agent._send) */
        else
            s->tx_frames++;
        start = end;
    }
    nic_out_clear(out);
}

/* Whether a frame is IPv4/UDP to 4791 (roce.is_rocev2). */
static int is_rocev2(const uint8_t *f, size_t n)
{
    if (n < 42 || f[12] != 0x08 || f[13] != 0x00 || f[23] != 17)
        return 0;
    size_t u = 14 + (size_t)(f[14] & 0x0F) * 4;
    return n >= u + 8 && ((uint32_t)f[u + 2] << 8 | f[u + 3]) == 4791;
}

static int messages_waiting(nic_engine *e)
{
    for (int k = 0; k < e->nqps; k++)
        if (e->qps[k]->deliver_data && e->qps[k]->inbox_count)
            return 1;
    return 0;
}

/* Read what the port holds (up to a batch); 1 if Python has frames or messages to take. */
static int read_port(nic_engine *e, nic_loop_state *s, nic_out *out, PyObject *others,
                     int64_t *frames_read, double *last_now)
{
    static uint8_t buf[NIC_RX_BYTES];
    int for_python = 0;
    for (int i = 0; i < NIC_RX_BATCH; i++) {
        ssize_t n = recv(s->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
            break;
        (*frames_read)++;
        double now = mono();
        *last_now = now;
        if (s->takers && !is_rocev2(buf, (size_t)n) && !nic_is_mac_control(buf, (size_t)n)) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)buf, n);
            if (!b || PyList_Append(others, b) < 0) {
                Py_XDECREF(b);
                return -1;
            }
            Py_DECREF(b);
            for_python = 1;
            continue;
        }
        if (nic_receive(e, buf, (size_t)n, now, out) < 0)
            return -1;
        send_out(s, out);
    }
    return for_python || messages_waiting(e);
}

/* callback(now, ready_fds, frames) -> the time Python wants to be called next, or < 0: stop. */
static int call_python(PyObject *cb, double now, PyObject *ready, PyObject *frames, double *due)
{
    PyObject *r = PyObject_CallFunction(cb, "dOO", now, ready, frames);
    if (!r)
        return -1;
    double t = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    *due = t;
    return t < 0 ? 1 : 0;
}

PyObject *nic_run(nic_engine *e, nic_loop_state *s, nic_out *out, PyObject *cb)
{
    PyObject *ready = NULL, *others = NULL;
    char work[64] = "";
    double awake_since = mono(), awake_cpu = thread_cpu(), py_due = -INFINITY;
    int64_t frames_read = 0;
    int call = 1, rc = 0;
    ready = PyList_New(0);
    others = PyList_New(0);
    if (!ready || !others)
        goto fail;
    for (;;) {
        double now = mono();
        if (nic_tick(e, now, out) < 0)
            goto nomem;
        send_out(s, out);
        if (call || now >= py_due) {
            PyObject *r = PyList_AsTuple(ready), *f = PyList_AsTuple(others);
            if (!r || !f) {
                Py_XDECREF(r);
                Py_XDECREF(f);
                goto fail;
            }
            PyList_SetSlice(ready, 0, PyList_GET_SIZE(ready), NULL);
            PyList_SetSlice(others, 0, PyList_GET_SIZE(others), NULL);
            rc = call_python(cb, now, r, f, &py_due);
            Py_DECREF(r);
            Py_DECREF(f);
            if (rc < 0)
                goto fail;
            if (rc > 0)
                break;
            call = 0;
            add_work(work, sizeof work, "python");
            now = mono();
        }
        for (;;) {
            int got = nic_next_frame(e, now, out);
            if (got < 0)
                goto nomem;
            if (!got)
                break;
            send_out(s, out);
            add_work(work, sizeof work, "tx");
        }
        double wire_due = nic_next_wakeup(e, now), tick = nic_next_tick(e);
        double deadline = py_due;
        if (!isnan(wire_due) && wire_due < deadline)
            deadline = wire_due;
        if (!isnan(tick) && tick < deadline)
            deadline = tick;
        double asleep_at = mono();
        /* CLOCK_THREAD_CPUTIME_ID is a system call, not the vDSO: read once a
         * pass (asleep, the thread's CPU clock stands still). */
        double cpu_now = thread_cpu(), cpu_s = cpu_now - awake_cpu;
        double timeout = deadline - asleep_at;
        if (timeout < 0)
            timeout = 0;
        if (timeout > 3600)
            timeout = 3600;
        struct timespec tmo;
        tmo.tv_sec = (time_t)timeout;
        tmo.tv_nsec = (long)((timeout - (double)tmo.tv_sec) * 1e9);
        /* A pass due within a frame time reads the port anyway: frames that
         * arrive meanwhile wait for it (at most a frame time, the emulator's
         * granularity, fidelity.FRAME_BYTES) instead of waking the loop once
         * each. PAUSE and ACKs are read before that pass sends. */
        int watch_port = timeout > s->mon.frame_s;
        s->fds[0].events = watch_port ? POLLIN : 0;
        int nfds = s->nfds, n, err = 0;
        Py_BEGIN_ALLOW_THREADS
        n = ppoll(s->fds, (nfds_t)nfds, &tmo, NULL);
        if (n < 0)
            err = errno;
        Py_END_ALLOW_THREADS
        double woke = mono();
        awake_cpu = cpu_now;
        s->wakeups++;
        int port_ready = n > 0 && (s->fds[0].revents & POLLIN);
        double overslept = woke - asleep_at - timeout;
        int mattered = (!isnan(wire_due) && wire_due <= woke) || port_ready;
        loopmon_pass(&s->mon, asleep_at - awake_since + (overslept > 0 ? overslept : 0.0),
                     mattered, work, cpu_s, woke, frames_read);
        awake_since = woke;
        work[0] = 0;
        frames_read = 0;
        if (n < 0) {
            if (err != EINTR) {
                errno = err;
                PyErr_SetFromErrno(PyExc_OSError);
                goto fail;
            }
            if (PyErr_CheckSignals() < 0)  /* the agent's handlers set `stopping` */
                goto fail;
            call = 1;
            continue;
        }
        if (port_ready || !watch_port) {
            double last = woke;
            int want = read_port(e, s, out, others, &frames_read, &last);
            if (want < 0)
                goto nomem_or_fail;
            if (want)
                call = 1;
            add_work(work, sizeof work, "port");
        }
        for (int i = 1; i < nfds; i++) {
            if (!s->fds[i].revents)
                continue;
            PyObject *fd = PyLong_FromLong(s->fds[i].fd);
            if (!fd || PyList_Append(ready, fd) < 0) {
                Py_XDECREF(fd);
                goto fail;
            }
            Py_DECREF(fd);
            call = 1;
            add_work(work, sizeof work, "mgmt");
        }
    }
    Py_DECREF(ready);
    Py_DECREF(others);
    Py_RETURN_NONE;
nomem_or_fail:
    if (PyErr_Occurred())
        goto fail;
nomem:
    PyErr_NoMemory();
fail:
    nic_out_clear(out);
    Py_XDECREF(ready);
    Py_XDECREF(others);
    return NULL;
}
