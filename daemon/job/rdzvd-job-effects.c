/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-effects.c: where the job machine meets the world (rdzvd-job-impl.h, "Effects"): the
 * clocks, libuv's timers and handles, and the layer above through the host's ops (members'
 * connections, the host's flush). The machine's own files (rdzvd-job-sm.c, -join.c, -report.c,
 * -aside.c, -backoff.c, -progress.c, -straggler.c, -move.c, -ranks.c, -nccl.c, -stall.c) call no
 * uv_*, read no clock and call no op: they come here (tests/layering.py checks it, with
 * tests/layers.txt's "pure:" line). A timer that fires comes back through the job's handlers
 * (struct rdzvd_job_handlers), as a libuv callback would, so this file calls none of theirs. */
#include <uv.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"

/* ---- clocks ---- */

uint64_t rdzvd_job_now_ms(void)
{
    return rdzv_now_ms();
}

double rdzvd_job_wall_s(void)
{
    return rdzv_wall_s();
}

const char *rdzvd_job_strerror(int err)
{
    return uv_strerror(err);
}

/* ---- the job's timer ---- */

static void job_timer_cb(uv_timer_t *t)
{
    struct rdzvd_job *j = t->data;

    j->handlers->fired(j);
}

static void job_timer_close_cb(uv_handle_t *h)
{
    struct rdzvd_job *j = h->data;

    j->handlers->freed(j);
}

int rdzvd_job_timer_init(struct rdzvd_job *j, struct uv_loop_s *loop)
{
    int r = uv_timer_init(loop, &j->timer);

    j->timer.data = j;
    return r;
}

void rdzvd_job_timer_close(struct rdzvd_job *j)
{
    uv_close((uv_handle_t *)&j->timer, job_timer_close_cb);
}

void rdzvd_job_timer_start(struct rdzvd_job *j, enum job_timer kind, uint64_t ms)
{
    uv_timer_start(&j->timer, job_timer_cb, ms, 0);
    j->timer_armed = true;
    j->timer_kind = kind;
}

void rdzvd_job_timer_stop(struct rdzvd_job *j)
{
    if (j->timer_armed) {
        uv_timer_stop(&j->timer);
        j->timer_armed = false;
    }
}

uint64_t rdzvd_job_timer_due_in(const struct rdzvd_job *j)
{
    return uv_timer_get_due_in(&j->timer);
}

/* ---- a member's heartbeat deadline ---- */

static void member_timer_cb(uv_timer_t *t)
{
    struct rdzvd_member *m = t->data;

    m->job->handlers->deadline(m);
}

/* The job may be gone by now (its timer closed before this one's callback ran): m keeps what
 * frees it. */
static void member_timer_close_cb(uv_handle_t *h)
{
    struct rdzvd_member *m = h->data;

    m->freed(m);
}

int rdzvd_member_timer_init(struct rdzvd_member *m, struct uv_loop_s *loop)
{
    int r = uv_timer_init(loop, &m->hb_timer);

    m->hb_timer.data = m;
    return r;
}

void rdzvd_member_timer_close(struct rdzvd_member *m, void (*freed)(struct rdzvd_member *m))
{
    m->freed = freed;
    uv_close((uv_handle_t *)&m->hb_timer, member_timer_close_cb);
}

void rdzvd_member_deadline_set(struct rdzvd_member *m, uint64_t ms)
{
    /* From now, not from the loop's cached time: after a long turn (or from a timer callback
     * late in its pass) that time is old, and the deadline would pass early. */
    uv_update_time(m->job->host.loop);
    uv_timer_start(&m->hb_timer, member_timer_cb, ms, 0);
}

void rdzvd_member_deadline_retry(struct rdzvd_member *m)
{
    /* 1 ms, not 0: libuv would run a 0 ms timer again in this same pass over the due timers,
     * before any poll. */
    uv_timer_start(&m->hb_timer, member_timer_cb, 1, 0);
}

bool rdzvd_member_deadline_due(const struct rdzvd_member *m)
{
    return uv_is_active((const uv_handle_t *)&m->hb_timer) &&
           uv_timer_get_due_in(&m->hb_timer) == 0;
}

/* ---- to the members' connections and the host ---- */

void rdzvd_member_send_event(struct rdzvd_member *m, const struct rdzv_event *e)
{
    if (m->peer)
        m->job->host.ops->event(m->peer, e);
}

void rdzvd_member_send_joined(struct rdzvd_member *m, bool spare, bool resumed)
{
    struct rdzvd_job *j = m->job;

    if (m->peer)
        j->host.ops->joined(m->peer, j->run_id, j->nmembers, spare, resumed, j->generation,
                            j->inplace, m->secret);
}

void rdzvd_member_send_round(struct rdzvd_member *m, struct rdzv_round *rd)
{
    m->job->host.ops->round(m->peer, rd);
}

int rdzvd_member_send_nccl_request(struct rdzvd_member *m, int64_t count, bool store)
{
    struct rdzvd_job *j = m->job;

    return j->host.ops->nccl_request(m->peer, j->generation, count, store,
                                     store ? j->host.store_allow : NULL);
}

void rdzvd_job_peer_bind(const struct rdzvd_job *j, void *peer, struct rdzvd_member *m)
{
    j->host.ops->bind(peer, m);
}

void rdzvd_job_peer_close(const struct rdzvd_job *j, void *peer, const char *why)
{
    j->host.ops->close(peer, why);
}

void rdzvd_job_peer_dismiss(const struct rdzvd_job *j, void *peer, const struct rdzv_event *e)
{
    j->host.ops->dismiss(peer, e);
}

size_t rdzvd_member_unread(const struct rdzvd_member *m)
{
    return m->peer ? m->job->host.ops->unread(m->peer) : 0;
}

void rdzvd_job_flush(const struct rdzvd_job *j)
{
    j->host.ops->flush(j->host.ud);
}
