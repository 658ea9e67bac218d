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
#include "daemon/job/rdzvd-job-world.h"

/* ---- rdzvd's world (rdzvd-job-world.h): the clocks, and each timer on libuv ---- */

static void uv_fired(uv_timer_t *h)
{
    struct rdzvd_job_timer *t = h->data;

    t->fired(t);
}

static void uv_closed(uv_handle_t *h)
{
    struct rdzvd_job_timer *t = h->data;

    t->closed(t);
}

static int uv_world_init(uv_loop_t *loop, struct rdzvd_job_timer *t)
{
    int r = uv_timer_init(loop, &t->uv);

    t->uv.data = t;
    return r;
}

static void uv_world_start(struct rdzvd_job_timer *t, uint64_t ms)
{
    uv_timer_start(&t->uv, uv_fired, ms, 0);
}

static void uv_world_stop(struct rdzvd_job_timer *t)
{
    uv_timer_stop(&t->uv);
}

static uint64_t uv_world_due_in(const struct rdzvd_job_timer *t)
{
    return uv_timer_get_due_in(&t->uv);
}

static bool uv_world_armed(const struct rdzvd_job_timer *t)
{
    return uv_is_active((const uv_handle_t *)&t->uv);
}

static void uv_world_close(struct rdzvd_job_timer *t)
{
    uv_close((uv_handle_t *)&t->uv, uv_closed);
}

static const struct rdzvd_job_world uv_world = {
    .now_ms = rdzv_now_ms,
    .wall_s = rdzv_wall_s,
    .timer_init = uv_world_init,
    .timer_start = uv_world_start,
    .timer_stop = uv_world_stop,
    .timer_due_in = uv_world_due_in,
    .timer_armed = uv_world_armed,
    .timer_close = uv_world_close,
    .refresh = uv_update_time,
};

static const struct rdzvd_job_world *world = &uv_world;

void rdzvd_job_world_set(const struct rdzvd_job_world *w)
{
    world = w ? w : &uv_world;
}

uint64_t rdzvd_job_now_ms(void)
{
    return world->now_ms();
}

double rdzvd_job_wall_s(void)
{
    return world->wall_s();
}

const char *rdzvd_job_strerror(int err)
{
    return uv_strerror(err);
}

/* ---- the job's timer ---- */

static void job_timer_fired(struct rdzvd_job_timer *t)
{
    struct rdzvd_job *j = t->data;

    j->handlers->fired(j);
}

static void job_timer_closed(struct rdzvd_job_timer *t)
{
    struct rdzvd_job *j = t->data;

    j->handlers->freed(j);
}

int rdzvd_job_timer_init(struct rdzvd_job *j, struct uv_loop_s *loop)
{
    j->timer.fired = job_timer_fired;
    j->timer.closed = job_timer_closed;
    j->timer.data = j;
    return world->timer_init(loop, &j->timer);
}

void rdzvd_job_timer_close(struct rdzvd_job *j)
{
    world->timer_close(&j->timer);
}

void rdzvd_job_timer_start(struct rdzvd_job *j, enum job_timer kind, uint64_t ms)
{
    world->timer_start(&j->timer, ms);
    j->timer_armed = true;
    j->timer_kind = kind;
}

void rdzvd_job_timer_stop(struct rdzvd_job *j)
{
    if (j->timer_armed) {
        world->timer_stop(&j->timer);
        j->timer_armed = false;
    }
}

uint64_t rdzvd_job_timer_due_in(const struct rdzvd_job *j)
{
    return world->timer_due_in(&j->timer);
}

/* ---- a member's heartbeat deadline ---- */

static void member_timer_fired(struct rdzvd_job_timer *t)
{
    struct rdzvd_member *m = t->data;

    m->job->handlers->deadline(m);
}

/* The job may be gone by now (its timer closed before this one's callback ran): m keeps what
 * frees it. */
static void member_timer_closed(struct rdzvd_job_timer *t)
{
    struct rdzvd_member *m = t->data;

    m->freed(m);
}

int rdzvd_member_timer_init(struct rdzvd_member *m, struct uv_loop_s *loop)
{
    m->hb_timer.fired = member_timer_fired;
    m->hb_timer.closed = member_timer_closed;
    m->hb_timer.data = m;
    return world->timer_init(loop, &m->hb_timer);
}

void rdzvd_member_timer_close(struct rdzvd_member *m, void (*freed)(struct rdzvd_member *m))
{
    m->freed = freed;
    world->timer_close(&m->hb_timer);
}

void rdzvd_member_deadline_set(struct rdzvd_member *m, uint64_t ms)
{
    /* From now, not from the loop's cached time: after a long turn (or from a timer callback
     * late in its pass) that time is old, and the deadline would pass early. */
    if (world->refresh)
        world->refresh(m->job->host.loop);
    world->timer_start(&m->hb_timer, ms);
}

void rdzvd_member_deadline_retry(struct rdzvd_member *m)
{
    /* 1 ms, not 0: libuv would run a 0 ms timer again in this same pass over the due timers,
     * before any poll. */
    world->timer_start(&m->hb_timer, 1);
}

bool rdzvd_member_deadline_due(const struct rdzvd_member *m)
{
    return world->timer_armed(&m->hb_timer) && world->timer_due_in(&m->hb_timer) == 0;
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
