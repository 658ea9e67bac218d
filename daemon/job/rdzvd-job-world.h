/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-world.h: the job layer's clocks and the machine's timers. rdzvd's world reads the
 * clocks (rdzv_now_ms, rdzv_wall_s); a test sets a world of its own, whose time moves only when
 * the test moves it (tests/unit/jobtest.h), as etcd/raft's take time as Tick(). Everything in
 * daemon/job/ that reads the time reads it here (rdzvd_job_now_ms, rdzvd_job_wall_s). One world
 * for the process, set before the first job is made.
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

struct rdzvd_job_world {
    uint64_t (*now_ms)(void); /* monotonic milliseconds */
    double (*wall_s)(void);   /* unix seconds */
};

/* The world the job layer uses from now on; NULL: rdzvd's (the clocks). */
void rdzvd_job_world_set(const struct rdzvd_job_world *w);
/* The world's clocks. */
uint64_t rdzvd_job_now_ms(void);
double rdzvd_job_wall_s(void);
