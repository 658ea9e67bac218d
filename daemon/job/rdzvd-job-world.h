/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-world.h: the job layer's time and timers, as rdzvd-job-effects.c hands them to the
 * job machine. rdzvd's world reads the clocks (rdzv_now_ms, rdzv_wall_s) and runs each timer on
 * libuv; a test sets a world of its own, whose time moves only when the test moves it and whose
 * timers fire only when the test runs them (tests/unit/jobtest.h): the job's unit tests need no
 * clock and no loop, as etcd/raft's take time as Tick(). Everything in daemon/job/ that reads
 * the time reads it here (rdzvd_job_now_ms, rdzvd_job_wall_s). One world for the process, set
 * before the first job is made and kept while any timer of the old one lives. Loop thread only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-list.h"

/* A timer of the job layer: the job's, a member's heartbeat deadline. fired runs once each time
 * it is due after a start; closed once after close (from the loop, never within close), and the
 * timer's memory may go then. data is the owner's. */
struct rdzvd_job_timer {
    uv_timer_t uv; /* rdzvd's world */
    void (*fired)(struct rdzvd_job_timer *t);
    void (*closed)(struct rdzvd_job_timer *t);
    void *data;
    /* A test's world: when it is due on its clock (0: not armed), in what order it was started
     * (equal dues fire in that order, as libuv's do), and its place in the world's lists. */
    uint64_t due_ms, seq;
    struct rdzv_list node;
};

struct rdzvd_job_world {
    uint64_t (*now_ms)(void); /* monotonic milliseconds */
    double (*wall_s)(void);   /* unix seconds */
    /* 0 or a libuv error; loop is rdzvd's (a test's world ignores it). */
    int (*timer_init)(struct uv_loop_s *loop, struct rdzvd_job_timer *t);
    void (*timer_start)(struct rdzvd_job_timer *t, uint64_t ms); /* from now_ms's now */
    void (*timer_stop)(struct rdzvd_job_timer *t);
    uint64_t (*timer_due_in)(const struct rdzvd_job_timer *t); /* 0: due, or not armed */
    bool (*timer_armed)(const struct rdzvd_job_timer *t);
    void (*timer_close)(struct rdzvd_job_timer *t);
    /* Bring the world's "now" up to date before a deadline is set from it (libuv caches its
     * time for a loop turn); NULL: nothing to do. */
    void (*refresh)(struct uv_loop_s *loop);
};

/* The world the job layer uses from now on; NULL: rdzvd's (the clocks and libuv). */
void rdzvd_job_world_set(const struct rdzvd_job_world *w);
/* The world's clocks. */
uint64_t rdzvd_job_now_ms(void);
double rdzvd_job_wall_s(void);
