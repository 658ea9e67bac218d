/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-world.h: the job layer's time and the machine's timers. The machine reads no clock:
 * its host reads both (rdzvd's adapters: rdzv_now_ms, rdzv_wall_s; a unit test: a clock that
 * moves only when the test moves it, tests/unit/jobtest.h) and hands them to each step, as
 * etcd/raft's take time as Tick(). The host's steps keep the time of the last one
 * (struct rdzvd_job_steps): what the machine reads (rdzvd_job_now_ms, rdzvd_job_wall_s).
 *
 * A timer of the machine (the job's, a member's heartbeat deadline) is a due time on the step's
 * clock, kept in its host's set (struct rdzvd_job_timers), which the host owns and the machine
 * fills. The host runs the set: the Ready says when its first timer is due (next_deadline_ms),
 * and the host then steps the input TICK (rdzvd-job-sm.h), which runs each due one. Loop
 * thread only. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"

/* The time a step is taken at, as its host read it. */
struct rdzvd_job_now {
    uint64_t ms;   /* the monotonic clock, milliseconds, never 0 */
    double wall_s; /* the wall clock, unix seconds */
};

/* A place in a host's set: a binary min-heap of links, no memory of its own. */
struct rdzvd_job_heap_node {
    struct rdzvd_job_heap_node *left, *right, *parent;
};

/* A timer of the machine. Armed: due at due_ms (0: not armed), the seq-th armed in its set
 * (equal dues come back in that order, as libuv's timers fire). Closed: on its set's closing
 * list, until the host steps the input REAP, which frees what holds it. */
struct rdzvd_job_timer {
    uint64_t due_ms, seq;
    struct rdzvd_job_heap_node heap;
    struct rdzv_list closing;
    bool member; /* a member's heartbeat deadline, else a job's timer */
};

/* A host's timers: those armed, due first at the root; those closed, their memory still held. */
struct rdzvd_job_timers {
    struct rdzvd_job_heap_node *min;
    size_t n;
    uint64_t seq;
    struct rdzv_list closing;
};

void rdzvd_job_timers_init(struct rdzvd_job_timers *ts);

struct rdzvd_job_host;
/* The time of h's step under way, or of its last one (before the first: 0): the only time the
 * machine reads. */
uint64_t rdzvd_job_now_ms(const struct rdzvd_job_host *h);
double rdzvd_job_wall_s(const struct rdzvd_job_host *h);
