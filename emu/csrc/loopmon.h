/*
 * The stall meter of a compiled event loop: emu/fidelity.py `LoopMonitor`,
 * the specification, in C for both extensions that run their own loop (the
 * switch's, emu/switch/csrc/fp_loop.c, and the NIC agent's,
 * emu/host/csrc/nic_loop.c). One header, included by both, so that the two
 * loops judge a pass by the same rule; Python reads it as `loop_stats()`
 * (emu/fidelity.py `CompiledLoopMonitor`).
 */
#ifndef EMU_LOOPMON_H
#define EMU_LOOPMON_H

#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    double frame_s; /* the fastest port's frame time: a pass longer than it is a stall */
    int64_t passes, over_1, over_10, longest_frames;
    double longest_s, stalled_s, idle_longest_s, longest_cpu_s, longest_ended_at;
    char longest_work[128]; /* comma-separated names of what the longest stall's pass did */
} emu_loopmon;

static inline void
emu_loopmon_reset(emu_loopmon *m, double frame_s)
{
    memset(m, 0, sizeof *m);
    m->frame_s = frame_s;
}

/* LoopMonitor.pass_done: one pass of `stall` seconds; `mattered`, whether a
 * frame was due or waiting when it ended. */
static inline void
emu_loopmon_pass(emu_loopmon *m, double stall, int mattered, const char *work, double cpu_s,
                 double ended_at, int64_t frames)
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
        /* a pass names at most a few kinds of work: keep what fits */
        snprintf(m->longest_work, sizeof m->longest_work, "%.*s", (int)sizeof m->longest_work - 1,
                 work);
        m->longest_cpu_s = cpu_s;
        m->longest_frames = frames;
        m->longest_ended_at = ended_at;
    }
}

/* The meter as a new dict (the keys `CompiledLoopMonitor.snapshot` reads). */
static inline PyObject *
emu_loopmon_stats(const emu_loopmon *m)
{
    return Py_BuildValue("{s:d,s:L,s:d,s:L,s:L,s:d,s:d,s:s,s:d,s:L,s:d}", "frame_s", m->frame_s,
                         "passes", (long long)m->passes, "longest_s", m->longest_s, "over_1",
                         (long long)m->over_1, "over_10", (long long)m->over_10, "stalled_s",
                         m->stalled_s, "idle_longest_s", m->idle_longest_s, "longest_work",
                         m->longest_work, "longest_cpu_s", m->longest_cpu_s, "longest_frames",
                         (long long)m->longest_frames, "longest_ended_at", m->longest_ended_at);
}

/* loop_pass(stall_s, mattered, work, cpu_s, ended_at, frames): one pass fed
 * by hand, as the loop records its own; for the test that holds this meter to
 * LoopMonitor (tests/unit/test_loop_meter.py). */
static inline PyObject *
emu_loopmon_pass_py(emu_loopmon *m, PyObject *args)
{
    double stall, cpu_s, ended_at;
    int mattered;
    const char *work;
    long long frames;
    if (!PyArg_ParseTuple(args, "dpsddL", &stall, &mattered, &work, &cpu_s, &ended_at, &frames))
        return NULL;
    emu_loopmon_pass(m, stall, mattered, work, cpu_s, ended_at, frames);
    Py_RETURN_NONE;
}

#endif
