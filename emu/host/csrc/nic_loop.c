/* The NIC agents' event loop in C: frames never go up to Python.
 *
 * emu/host/agent.py's `_run_python` is the specification. One loop serves one
 * or several engines (the NICs of several hosts in one process, as one
 * ovs-vswitchd thread serves every bridge): one wake-up serves every engine
 * whose frame is due. One pass: each engine's timers (PAUSE refresh, DCQCN),
 * Python when it asked to be called (its timers: samples, collectives'
 * wake-ups) or has something to do (its management sockets are readable,
 * whole messages wait for a collective, a collective takes non-RoCE frames;
 * the callback is told which engines these are, so that a process of several
 * NICs runs only those agents' Python: emu/host/agent.py run_agents), the
 * data frames each engine's pacing allows, then ppoll(2) until the
 * earliest deadline of all, on two epoll sets, the ports' and Python's
 * sockets' (ppoll takes nanoseconds; epoll_wait only whole milliseconds, the
 * reason the Python loop used select). Frames read from a
 * port go through its engine's nic_receive and the replies leave at once. The
 * GIL is held except while asleep, so that Python's management threads (a
 * collective's set-up) and this loop never touch an engine at the same time.
 *
 * The stall meter is fidelity.LoopMonitor's (`woke`), kept per engine: the
 * stall is the loop's, shared by every engine in it (as fp_loop.c's).
 */
#include "nic.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <stdlib.h>
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

/* Read what engine i's port holds (up to a batch); 1 if Python has frames or
 * messages to take, -1 on error (a Python exception is set). */
static int read_port(nic_group *g, int i, PyObject *others, int64_t *frames_read)
{
    static uint8_t buf[NIC_RX_BYTES];
    nic_engine *e = g->e[i];
    nic_loop_state *s = g->s[i];
    int for_python = 0;
    for (int k = 0; k < NIC_RX_BATCH; k++) {
        ssize_t n = recv(s->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
            break;
        (*frames_read)++;
        double now = mono();
        /* agent._receive: what a collective may take is neither RoCE, PAUSE nor credit */
        if (s->takers && !is_rocev2(buf, (size_t)n) && !nic_is_mac_control(buf, (size_t)n) &&
            !nic_is_flow_control(buf, (size_t)n)) {
            PyObject *t = Py_BuildValue("(iy#)", i, (const char *)buf, (Py_ssize_t)n);
            if (!t || PyList_Append(others, t) < 0) {
                Py_XDECREF(t);
                return -1;
            }
            Py_DECREF(t);
            for_python = 1;
            continue;
        }
        if (nic_receive(e, buf, (size_t)n, now, g->out[i]) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        send_out(s, g->out[i]);
    }
    return for_python || messages_waiting(e);
}

/* callback(now, ready_fds, frames, wanting) -> the time Python wants to be called next,
 * or < 0: stop. */
static int call_python(PyObject *cb, double now, PyObject *ready, PyObject *frames,
                       PyObject *wanting, double *due)
{
    PyObject *r = PyObject_CallFunction(cb, "dOOO", now, ready, frames, wanting);
    if (!r)
        return -1;
    double t = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    *due = t;
    return t < 0 ? 1 : 0;
}

static int take_list(PyObject *list, PyObject **tuple)
{
    *tuple = PyList_AsTuple(list);
    if (!*tuple)
        return -1;
    return PyList_SetSlice(list, 0, PyList_GET_SIZE(list), NULL);
}

/* The indexes of the engines flagged in `want` (n of them), as a tuple; the flags cleared. */
static PyObject *take_wanting(unsigned char *want, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += want[i] != 0;
    PyObject *t = PyTuple_New(count);
    if (!t)
        return NULL;
    for (int i = 0, k = 0; i < n && k < count; i++) {
        if (!want[i])
            continue;
        PyObject *index = PyLong_FromLong(i);
        if (!index) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k++, index);
        want[i] = 0;
    }
    return t;
}

/* Room for `need` events (Python's socket set may grow between passes). */
static int grow_events(struct epoll_event **evs, int *cap, int need)
{
    if (need < 1)
        need = 1;
    if (need <= *cap)
        return 0;
    struct epoll_event *p = realloc(*evs, (size_t)need * sizeof *p);
    if (!p)
        return -1;
    *evs = p;
    *cap = need;
    return 0;
}

PyObject *nic_run(nic_group *g, PyObject *cb)
{
    PyObject *ready = PyList_New(0), *others = PyList_New(0);
    char work[64] = "";
    double awake_since = mono(), awake_cpu = thread_cpu(), py_due = -INFINITY;
    double min_frame_s = INFINITY;
    int64_t frames_read = 0;
    int call = 1;
    double *wire_due = malloc((size_t)(g->n ? g->n : 1) * sizeof(double));
    /* engines with frames or whole messages for Python since the last call */
    unsigned char *want = calloc((size_t)(g->n ? g->n : 1), 1);
    /* ports with frames to read after a wake-up */
    unsigned char *port_ready = calloc((size_t)(g->n ? g->n : 1), 1);
    struct epoll_event *evs = NULL;
    int evs_cap = 0;
    if (!ready || !others || !wire_due || !want || !port_ready)
        goto fail;
    for (int i = 0; i < g->n; i++)
        if (g->s[i]->mon.frame_s > 0 && g->s[i]->mon.frame_s < min_frame_s)
            min_frame_s = g->s[i]->mon.frame_s;
    if (!isfinite(min_frame_s))
        min_frame_s = 0;
    for (;;) {
        double now = mono();
        for (int i = 0; i < g->n; i++) {
            if (nic_tick(g->e[i], now, g->out[i]) < 0)
                goto nomem;
            send_out(g->s[i], g->out[i]);
        }
        if (call || now >= py_due) {
            PyObject *r, *f, *w;
            if (take_list(ready, &r) < 0)
                goto fail;
            if (take_list(others, &f) < 0) {
                Py_DECREF(r);
                goto fail;
            }
            if (!(w = take_wanting(want, g->n))) {
                Py_DECREF(r);
                Py_DECREF(f);
                goto fail;
            }
            int rc = call_python(cb, now, r, f, w, &py_due);
            Py_DECREF(r);
            Py_DECREF(f);
            Py_DECREF(w);
            if (rc < 0)
                goto fail;
            if (rc > 0)
                break;
            call = 0;
            add_work(work, sizeof work, "python");
            now = mono();
        }
        double deadline = py_due;
        for (int i = 0; i < g->n; i++) {
            for (;;) {
                int got = nic_next_frame(g->e[i], now, g->out[i]);
                if (got < 0)
                    goto nomem;
                if (!got)
                    break;
                send_out(g->s[i], g->out[i]);
                add_work(work, sizeof work, "tx");
            }
            wire_due[i] = nic_next_wakeup(g->e[i], now);
            double tick = nic_next_tick(g->e[i]);
            if (!isnan(wire_due[i]) && wire_due[i] < deadline)
                deadline = wire_due[i];
            if (!isnan(tick) && tick < deadline)
                deadline = tick;
        }
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
        /* A pass due within a frame time reads the ports anyway: frames that
         * arrive meanwhile wait for it (at most a frame time, the emulator's
         * granularity, fidelity.FRAME_BYTES) instead of waking the loop once
         * each. PAUSE and ACKs are read before that pass sends. */
        int watch_ports = timeout > min_frame_s;
        /* Two descriptors to sleep on, whatever the number of sockets: the
         * ports' epoll set and Python's (ppoll for its nanosecond timeout, as
         * fp_loop.c); then one epoll_wait each, without sleeping, names the
         * sockets that are ready. poll(2) over every socket cost 13% of a
         * shared NIC process's CPU (perf, bench/fabric_cpu.py). */
        struct pollfd sets[2] = {{.fd = g->ep_ports, .events = watch_ports ? POLLIN : 0},
                                 {.fd = g->ep_py, .events = POLLIN}};
        if (grow_events(&evs, &evs_cap, g->n > g->npy ? g->n : g->npy) < 0)
            goto nomem;
        int n, nports = 0, npy_ready = 0, err = 0;
        Py_BEGIN_ALLOW_THREADS
        n = ppoll(sets, 2, &tmo, NULL);
        if (n < 0)
            err = errno;
        else {
            /* which ports hold frames, in one call: read only those (also when
             * the ports were not watched, as a pass due within a frame time) */
            nports = epoll_wait(g->ep_ports, evs, evs_cap, 0);
            if (nports < 0)
                err = errno;
        }
        Py_END_ALLOW_THREADS
        memset(port_ready, 0, (size_t)(g->n ? g->n : 1));
        for (int k = 0; k < nports; k++)
            if (evs[k].data.u32 < (uint32_t)g->n)
                port_ready[evs[k].data.u32] = 1;
        if (n >= 0 && nports < 0)
            n = -1;
        double woke = mono();
        awake_cpu = cpu_now;
        g->wakeups++;
        double overslept = woke - asleep_at - timeout;
        double stall = asleep_at - awake_since + (overslept > 0 ? overslept : 0.0);
        for (int i = 0; i < g->n; i++) {
            int mattered = (!isnan(wire_due[i]) && wire_due[i] <= woke) || port_ready[i];
            emu_loopmon_pass(&g->s[i]->mon, stall, mattered, work, cpu_s, woke, frames_read);
        }
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
        for (int i = 0; i < g->n; i++) {
            if (!port_ready[i])
                continue;
            int wanted = read_port(g, i, others, &frames_read);
            if (wanted < 0)
                goto fail;
            if (wanted) {
                call = 1;
                want[i] = 1;
            }
            add_work(work, sizeof work, "port");
        }
        if (sets[1].revents) {
            npy_ready = epoll_wait(g->ep_py, evs, evs_cap, 0);
            for (int k = 0; k < npy_ready; k++) {
                PyObject *fd = PyLong_FromLong(evs[k].data.fd);
                if (!fd || PyList_Append(ready, fd) < 0) {
                    Py_XDECREF(fd);
                    goto fail;
                }
                Py_DECREF(fd);
            }
            /* readable a moment ago, or a set Python replaced: call it either way */
            call = 1;
            add_work(work, sizeof work, "mgmt");
        }
    }
    free(wire_due);
    free(want);
    free(port_ready);
    free(evs);
    Py_DECREF(ready);
    Py_DECREF(others);
    Py_RETURN_NONE;
nomem:
    PyErr_NoMemory();
fail:
    for (int i = 0; i < g->n; i++)
        nic_out_clear(g->out[i]);
    free(wire_due);
    free(want);
    free(port_ready);
    free(evs);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    Py_XDECREF(ready);
    Py_XDECREF(others);
    return NULL;
}
