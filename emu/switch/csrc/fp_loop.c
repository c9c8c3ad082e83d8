/* The loop that serves every switch of a worker process, as ovs-vswitchd's
 * PMD-less main loop serves every bridge's AF_PACKET ports from one thread.
 *
 * One epoll set holds every port's socket and, nested, the Python
 * selector's epoll descriptor (OpenFlow channels, management sockets). The
 * loop runs without the GIL: it reads rings, forwards, sends what is due and
 * sends PAUSE; it takes the GIL only to call Python: for an upcall (a cache
 * miss), when a Python socket is ready, when a Python timer is due (carrier,
 * telemetry, watchdog, expiry), and when a signal arrived. The sleep is a
 * ppoll(2) on the epoll descriptor (microsecond timeouts; epoll_wait's are
 * whole milliseconds), then epoll_wait(0) for what is ready: the reason is
 * loop.PreciseEpollSelector's.
 *
 * Stalls are measured as fidelity.LoopMonitor measures them (loop.py's
 * _record_pass), per switch, in frame times of the switch's fastest port.
 */
#include "fp.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Put a switch's port sockets into the running loop's epoll set. */
static void
watch_ports(fp_engine *e, fp_switch *sw)
{
    for (int i = 0; i < sw->nports; i++) {
        fp_port *p = sw->ports[i];
        if (p->fd < 0)
            continue; /* capture mode: no socket */
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = p};
        epoll_ctl(e->epfd, EPOLL_CTL_ADD, p->fd, &ev);
    }
}

int
fp_engine_add(fp_engine *e, fp_switch *sw)
{
    if (e->nswitches == e->cap) {
        int cap = e->cap ? e->cap * 2 : 8;
        fp_switch **grown = PyMem_Realloc(e->switches, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        e->switches = grown;
        e->cap = cap;
    }
    Py_INCREF(sw);
    e->switches[e->nswitches++] = sw;
    sw->engine = e;
    sw->in_engine = 1;
    if (e->epfd >= 0)
        watch_ports(e, sw);
    return 0;
}

/* Forget a switch (it crashed or stopped): its sockets leave the epoll set
 * before Python closes them. */
void
fp_engine_remove(fp_engine *e, fp_switch *sw)
{
    for (int i = 0; i < e->nswitches; i++) {
        if (e->switches[i] != sw)
            continue;
        if (e->epfd >= 0)
            for (int k = 0; k < sw->nports; k++)
                if (sw->ports[k]->fd >= 0)
                    epoll_ctl(e->epfd, EPOLL_CTL_DEL, sw->ports[k]->fd, NULL);
        memmove(&e->switches[i], &e->switches[i + 1],
                (size_t)(e->nswitches - i - 1) * sizeof *e->switches);
        e->nswitches--;
        sw->in_engine = 0;
        sw->engine = NULL;
        Py_DECREF(sw);
        return;
    }
}

/* Call Python: callback(now, py_ready) -> (next_due, work) or None (stop).
 * Runs with the GIL (taken by the caller). Returns -1 to stop, -2 on error. */
static int
call_python(PyObject *cb, double now, int py_ready, double *due, char *work, size_t work_len)
{
    if (PyErr_CheckSignals() < 0)
        return -2;
    PyObject *res = PyObject_CallFunction(cb, "di", now, py_ready);
    if (!res)
        return -2;
    if (res == Py_None) {
        Py_DECREF(res);
        return -1;
    }
    const char *w = "";
    if (!PyArg_ParseTuple(res, "ds", due, &w)) {
        Py_DECREF(res);
        return -2;
    }
    if (*w) {
        size_t have = strlen(work);
        snprintf(work + have, work_len - have, "%s%s", have ? "," : "", w);
    }
    Py_DECREF(res);
    return 0;
}

static void
add_work(char *work, size_t len, const char *what)
{
    if (strstr(work, what))
        return;
    size_t have = strlen(work);
    snprintf(work + have, len - have, "%s%s", have ? "," : "", what);
}

/* Engine.run(py_fd, callback): serve every switch until the callback says stop. */
PyObject *
fp_engine_run(fp_engine *e, PyObject *args)
{
    int py_fd;
    PyObject *cb;
    if (!PyArg_ParseTuple(args, "iO", &py_fd, &cb))
        return NULL;
    if (e->running) {
        PyErr_SetString(PyExc_RuntimeError, "the engine is already running");
        return NULL;
    }
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    struct epoll_event pev = {.events = EPOLLIN, .data.ptr = NULL};
    if (py_fd >= 0 && epoll_ctl(e->epfd, EPOLL_CTL_ADD, py_fd, &pev) < 0) {
        close(e->epfd);
        e->epfd = -1;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (int s = 0; s < e->nswitches; s++)
        watch_ports(e, e->switches[s]);
    e->running = 1;
    char work[256] = "";
    double py_due = 0.0;
    int rc = call_python(cb, fp_now(), 0, &py_due, work, sizeof work);
    struct epoll_event events[256];
    double awake_since = fp_now(), awake_cpu = fp_thread_cpu();
    uint64_t frames_read = 0;
    int nready = 0;
    PyThreadState *ts = PyEval_SaveThread();
    while (rc == 0) {
        double now = fp_now();
        /* Send what is due (within each switch's early allowance) and PAUSE. */
        double deadline = py_due;
        for (int s = 0; s < e->nswitches; s++) {
            fp_switch *sw = e->switches[s];
            if (sw->tx_due <= now + sw->early_s) {
                fp_switch_transmit(sw, now);
                add_work(work, sizeof work, "tx");
            }
            fp_switch_send_pfc(sw, now);
            if (sw->tx_due < deadline)
                deadline = sw->tx_due;
            double pfc = fp_switch_next_pfc(sw);
            if (pfc >= 0 && pfc < deadline)
                deadline = pfc;
        }
        if (now >= py_due) {
            PyEval_RestoreThread(ts);
            rc = call_python(cb, now, 0, &py_due, work, sizeof work);
            ts = PyEval_SaveThread();
            if (rc)
                break;
            continue; /* the callback may have removed switches: start over */
        }
        double asleep_at = fp_now();
        double cpu_s = fp_thread_cpu() - awake_cpu;
        double timeout = deadline - asleep_at;
        int interrupted = 0;
        if (timeout > 0) {
            struct pollfd pfd = {.fd = e->epfd, .events = POLLIN};
            struct timespec tmo;
            if (timeout > 3600)
                timeout = 3600;
            tmo.tv_sec = (time_t)timeout;
            tmo.tv_nsec = (long)((timeout - (double)tmo.tv_sec) * 1e9);
            if (ppoll(&pfd, 1, &tmo, NULL) < 0 && errno == EINTR)
                interrupted = 1;
        }
        nready = interrupted ? 0 : epoll_wait(e->epfd, events, 256, 0);
        double woke = fp_now();
        awake_cpu = fp_thread_cpu();
        e->passes++;
        /* loop._record_pass: the pass that just ended, for every switch */
        double t = timeout > 0 ? timeout : 0.0;
        double overslept = woke - asleep_at - t;
        double stall = asleep_at - awake_since + (overslept > 0 ? overslept : 0.0);
        for (int s = 0; s < e->nswitches; s++)
            e->switches[s]->ready = 0;
        int py_ready = 0;
        for (int k = 0; k < nready; k++) {
            fp_port *p = events[k].data.ptr;
            if (p)
                p->sw->ready = 1;
            else
                py_ready = 1;
        }
        for (int s = 0; s < e->nswitches; s++) {
            fp_switch *sw = e->switches[s];
            emu_loopmon *m = &sw->mon;
            if (stall <= m->frame_s) {
                m->passes++;
                continue;
            }
            int mattered = (isfinite(sw->tx_due) && sw->tx_due <= woke) || sw->ready;
            emu_loopmon_pass(m, stall, mattered, work, cpu_s, woke, frames_read);
        }
        awake_since = woke;
        work[0] = 0;
        frames_read = 0;
        if (interrupted) {
            PyEval_RestoreThread(ts);
            rc = call_python(cb, woke, 0, &py_due, work, sizeof work);
            ts = PyEval_SaveThread();
            continue;
        }
        /* Ports first (the frames), then Python's sockets. */
        for (int k = 0; k < nready; k++) {
            fp_port *p = events[k].data.ptr;
            if (!p)
                continue;
            fp_switch *sw = p->sw;
            double t_rx = fp_now();
            frames_read += (uint64_t)fp_switch_poll_port(sw, p, &t_rx);
            add_work(work, sizeof work, "port");
        }
        for (int s = 0; s < e->nswitches; s++) {
            fp_switch *sw = e->switches[s];
            if (!sw->ready)
                continue;
            double t_tx = fp_now();
            fp_switch_send_pfc(sw, t_tx); /* XOFF as soon as a threshold is crossed */
            if (isfinite(sw->tx_due))
                fp_switch_transmit(sw, fp_now());
        }
        if (py_ready) {
            PyEval_RestoreThread(ts);
            rc = call_python(cb, fp_now(), 1, &py_due, work, sizeof work);
            ts = PyEval_SaveThread();
        }
    }
    PyEval_RestoreThread(ts);
    e->running = 0;
    close(e->epfd);
    e->epfd = -1;
    if (rc == -2)
        return NULL;
    Py_RETURN_NONE;
}
