/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-abandon.c: jobs nobody comes back to end (rdzvd-job-abandon.h). */
#include "daemon/job/rdzvd-job-world.h"
#include "daemon/job/rdzvd-job-abandon.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-status.h"

struct rdzvd_abandon {
    uv_timer_t timer;
    const struct rdzvd_job_host *h;
    void (*stepped)(void *ud, const struct rdzvd_job_ready *rd);
    void *ud;
    uint64_t after_ms;
    uint64_t due_ms; /* when the timer fires (rdzv_now_ms); 0: not armed */
};

/* A job that could not be ended now (the job table refused: a replica that lost its quorum) is
 * tried again this much later. */
#define ABANDON_RETRY_MS 60000

static void abandon_fired(uv_timer_t *t)
{
    struct rdzvd_abandon *a = t->data;
    char run_id[RDZV_ID_MAX + 1], why[RDZV_SUMMARY_MAX + 1];
    uint64_t since, now = rdzv_now_ms();
    struct rdzvd_job_input in = {.kind = RDZVD_IN_END_WAITING,
                                 .u.end = {.type = "abandoned", .exit_code = 1}};
    struct rdzvd_job_ready rd;
    int r;

    a->due_ms = 0;
    while (rdzvd_waiting_jobs_first(a->h->ended, run_id, &since) && since + a->after_ms <= now) {
        snprintf(why, sizeof(why),
                 "abandoned: none of its agents came back within --abandon-after (%.0f s) of "
                 "the last one leaving",
                 (double)a->after_ms / 1000);
        in.u.end.run_id = run_id;
        in.u.end.why = why;
        r = rdzvd_job_step(a->h, &in, (struct rdzvd_job_now){.ms = now, .wall_s = rdzv_wall_s()},
                           &rd);
        rdzvd_job_advance(&rd);
        a->stepped(a->ud, &rd);
        if (r == 0) {
            log_warn("job=%s ended as abandoned: no agent of it connected for %.0f s (its record "
                     "is gone; --abandon-after)",
                     run_id, (double)(now - since) / 1000);
            continue;
        }
        (void)rdzvd_waiting_jobs_take(a->h->ended, run_id); /* not waiting any more: -ENOENT */
        if (r != -ENOENT) {
            /* Noted again as if it had waited since then: due in ABANDON_RETRY_MS (in
             * --abandon-after when that is shorter), never a since in the future. */
            log_error("job=%s: %s: tried again later", run_id, rd.err);
            rdzvd_waiting_jobs_add(a->h->ended, run_id,
                                   a->after_ms > ABANDON_RETRY_MS
                                       ? now - (a->after_ms - ABANDON_RETRY_MS)
                                       : now,
                                   0);
        }
    }
    rdzvd_abandon_arm(a);
}

int rdzvd_abandon_new(uv_loop_t *loop, const struct rdzvd_job_host *h, uint64_t after_ms,
                      void (*stepped)(void *ud, const struct rdzvd_job_ready *rd), void *ud,
                      struct rdzvd_abandon **ret)
{
    struct rdzvd_abandon *a;

    *ret = NULL;
    if (!after_ms)
        return 0;
    if (!(a = calloc(1, sizeof(*a))))
        return -ENOMEM;
    (void)uv_timer_init(loop, &a->timer); /* cannot fail */
    a->timer.data = a;
    a->h = h;
    a->stepped = stepped;
    a->ud = ud;
    a->after_ms = after_ms;
    *ret = a;
    return 0;
}

void rdzvd_abandon_arm(struct rdzvd_abandon *a)
{
    char run_id[RDZV_ID_MAX + 1];
    uint64_t since, due, now;

    if (!a || !rdzvd_waiting_jobs_first(a->h->ended, run_id, &since))
        return;
    due = since + a->after_ms;
    if (a->due_ms && a->due_ms <= due)
        return; /* due first already */
    now = rdzv_now_ms();
    a->due_ms = due;
    (void)uv_timer_start(&a->timer, abandon_fired, due > now ? due - now : 0, 0);
}

static void abandon_closed(uv_handle_t *h)
{
    free(h->data);
}

void rdzvd_abandon_close(struct rdzvd_abandon *a)
{
    if (a)
        uv_close((uv_handle_t *)&a->timer, abandon_closed);
}
