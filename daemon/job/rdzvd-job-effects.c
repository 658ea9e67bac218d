/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-effects.c: where the job machine meets the world (rdzvd-job-impl.h, "Effects"): the
 * clocks, libuv's timers and handles, and the outbox (rdzvd-job-sm.h): what the machine sends to
 * members' connections and the host's flush, queued during a step and carried out through the
 * host's ops when the step is done; a job's status events and timeline marks, dated by the wall
 * clock (rdzvd_job_note, rdzvd_job_mark). The machine's own files (rdzvd-job-sm.c, -join.c,
 * -report.c, -aside.c, -backoff.c, -progress.c, -straggler.c, -move.c, -ranks.c, -nccl.c,
 * -stall.c) call no uv_*, read no clock and call no op: they come here (tests/layering.py checks
 * it, with tests/layers.txt's "pure:" line). A timer that fires comes back through the job's
 * handlers (struct rdzvd_job_handlers), as a libuv callback would, so this file calls none of
 * theirs. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The time of the step under way, as rdzvd_job_step's caller gave it or a timer's step read it
 * once as it fired; 0: none (what a step queued being carried out, or an entry called outside
 * a step: the world's clock). */
static uint64_t step_now_ms;

uint64_t rdzvd_job_time_enter(uint64_t now_ms)
{
    uint64_t prev = step_now_ms;

    step_now_ms = now_ms;
    return prev;
}

void rdzvd_job_time_leave(uint64_t prev)
{
    step_now_ms = prev;
}

uint64_t rdzvd_job_now_ms(void)
{
    return step_now_ms ? step_now_ms : world->now_ms();
}

double rdzvd_job_wall_s(void)
{
    return world->wall_s();
}

const char *rdzvd_job_strerror(int err)
{
    return uv_strerror(err);
}

/* ---- a job's status events and timeline marks ---- */

/* Record a status event of job j, and log it at info (warn when warn) with the job's context. */
void rdzvd_job_note(struct rdzvd_job *j, bool warn, const char *fmt, ...)
{
    unsigned i = j->nevents++ % RDZVD_JOB_EVENTS;
    char text[RDZV_SUMMARY_MAX + 256]; /* the log gets it whole; status a cut between words */
    va_list ap;

    j->events[i].time = rdzvd_job_wall_s();
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    rdzv_utf8_trim(text);
    rdzv_cut_words(j->events[i].text, sizeof(j->events[i].text), text);
    if (warn)
        log_warn("job=%s gen=%" PRIu64 " %s", j->run_id, j->generation, text);
    else
        rdzv_log(j->host.quiet ? RDZV_LOG_DEBUG : RDZV_LOG_INFO, "job=%s gen=%" PRIu64 " %s",
                 j->run_id, j->generation, text);
}

void rdzvd_job_mark(struct rdzvd_job *j, enum rdzv_mark_kind kind, const char *fmt, ...)
{
    char text[RDZV_STATUS_TEXT_MAX + 1];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    rdzvd_timeline_mark(&j->timeline, rdzvd_job_wall_s(), j->generation, kind, text);
}

/* ---- the job's timer ---- */

static void job_timer_fired(struct rdzvd_job_timer *t)
{
    struct rdzvd_job *j = t->data;

    j->handlers->fired(j, world->now_ms()); /* a step of its own, at the time read here */
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
    /* What waits unread on its connection (read for the machine, which asks no host). */
    size_t unread = m->peer ? m->job->host.ops->unread(m->peer) : 0;

    m->job->handlers->deadline(m, unread, world->now_ms());
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

/* ---- the outbox: what the machine sends, carried out once its step is done ---- */

/* One thing to do to a member's connection or to the host, in the order the machine decided
 * them (struct rdzvd_job_send's kinds). An event or a round that many members get is held once
 * (struct rdzvd_job_shared) and counted. */
enum effect_kind {
    EFF_JOINED = RDZVD_SEND_JOINED,
    EFF_ROUND = RDZVD_SEND_ROUND,
    EFF_EVENT = RDZVD_SEND_EVENT,
    EFF_NCCL = RDZVD_SEND_NCCL,
    EFF_CLOSE = RDZVD_SEND_CLOSE,
    EFF_DISMISS = RDZVD_SEND_DISMISS,
    EFF_FLUSH = RDZVD_SEND_FLUSH
};

struct rdzvd_job_shared {
    unsigned refs;
    union {
        struct rdzv_event event;
        struct rdzv_round round;
    } u;
};

struct joined {
    char run_id[RDZV_ID_MAX + 1], secret[RDZV_SECRET_HEX + 1];
    char *warning; /* NULL: none */
    int64_t waiting;
    uint64_t generation;
    bool spare, resumed, inplace;
};

/* Small (a round to 10,000 members is 10,000 of them at once): what is large is held apart. */
struct rdzvd_job_effect {
    struct rdzvd_job_effect *next;
    enum effect_kind kind;
    const struct rdzvd_job_ops *ops;
    void *peer; /* the host's; ud for EFF_FLUSH */
    union {
        struct joined *joined;
        struct {
            struct rdzvd_job_shared *body;
            int64_t node_rank, rank_offset;
        } round;
        struct rdzvd_job_shared *event; /* EVENT, DISMISS */
        struct {
            struct rdzvd_member *m; /* its memory outlives the step (freed from the loop) */
            uint64_t generation;
            int64_t count;
            bool store;
            const char *allow; /* the host's, lives as long as it */
        } nccl;
        char *why;                 /* CLOSE */
    } u;
};

static void shared_put(struct rdzvd_job_outbox *o, struct rdzvd_job_shared *s)
{
    if (s && --s->refs == 0) {
        if (o->last_event == s)
            o->last_event = NULL;
        if (o->last_round == s)
            o->last_round = NULL;
        free(s);
    }
}

static void effect_free(struct rdzvd_job_outbox *o, struct rdzvd_job_effect *e)
{
    switch (e->kind) {
    case EFF_ROUND:
        shared_put(o, e->u.round.body);
        break;
    case EFF_EVENT:
    case EFF_DISMISS:
        shared_put(o, e->u.event);
        break;
    case EFF_CLOSE:
        free(e->u.why);
        break;
    case EFF_JOINED:
        free(e->u.joined->warning);
        free(e->u.joined);
        break;
    default:
        break;
    }
    free(e);
}
/* Carry out e on its connection or host. */
static void carry(struct rdzvd_job_effect *e)
{
    switch (e->kind) {
    case EFF_JOINED:
        e->ops->joined(e->peer, e->u.joined->run_id, e->u.joined->waiting, e->u.joined->spare,
                       e->u.joined->resumed, e->u.joined->generation, e->u.joined->inplace,
                       e->u.joined->secret, e->u.joined->warning);
        break;
    case EFF_ROUND: {
        struct rdzv_round *rd = &e->u.round.body->u.round;
        char addr[sizeof(rd->master_addr)];

        /* The op fills an empty address in with its own connection's: put it back after. */
        memcpy(addr, rd->master_addr, sizeof(addr));
        rd->node_rank = e->u.round.node_rank;
        rd->rank_offset = e->u.round.rank_offset;
        e->ops->round(e->peer, rd);
        memcpy(rd->master_addr, addr, sizeof(addr));
        break;
    }
    case EFF_EVENT:
        e->ops->event(e->peer, &e->u.event->u.event);
        break;
    case EFF_DISMISS:
        e->ops->dismiss(e->peer, &e->u.event->u.event);
        break;
    case EFF_NCCL:
        /* Not queued on the connection (it is closing, or out of memory): the job is told, in a
         * step of its own (this pass carries out what it decides). */
        if (e->ops->nccl_request(e->peer, e->u.nccl.generation, e->u.nccl.count, e->u.nccl.store,
                                 e->u.nccl.store ? e->u.nccl.allow : NULL) < 0) {
            struct rdzvd_member *m = e->u.nccl.m;

            m->job->handlers->nccl_unsent(m, e->u.nccl.generation, e->peer, world->now_ms());
        }
        break;
    case EFF_CLOSE:
        e->ops->close(e->peer, e->u.why ? e->u.why : "closed");
        break;
    case EFF_FLUSH:
        e->ops->flush(e->peer);
        break;
    }
}

/* Carry out everything queued in s's outbox, in order, including what steps begun meanwhile add
 * (a connection that closes tells its member's job at once: that step's effects join this
 * pass). */
static void drain(struct rdzvd_job_steps *s)
{
    struct rdzvd_job_outbox *o = s->out;
    struct rdzvd_job_effect *e;

    s->draining = true;
    while ((e = o->head)) {
        o->head = e->next;
        if (!o->head)
            o->last = NULL;
        carry(e);
        effect_free(o, e);
    }
    if (o->flush_ops) { /* one that found no memory for its place in the queue */
        const struct rdzvd_job_ops *ops = o->flush_ops;

        o->flush_ops = NULL;
        ops->flush(o->flush_ud);
    }
    s->draining = false;
    o->last_event = o->last_round = NULL;
    s->out = NULL;
}

/* A step of s opens. out becomes the steps' outbox when none is open or carried out; a step
 * within it adds to that one. Only the outermost one's end carries the outbox out. */
static void step_open(struct rdzvd_job_steps *s, struct rdzvd_job_outbox *out)
{
    if (!s->out)
        s->out = out;
    s->depth++;
}

static void step_close(struct rdzvd_job_steps *s)
{
    if (--s->depth == 0 && !s->draining)
        drain(s);
}

static void enqueue(struct rdzvd_job_outbox *o, struct rdzvd_job_effect *e)
{
    e->next = NULL;
    if (o->last)
        o->last->next = e;
    else
        o->head = e;
    o->last = e;
}

/* A new effect, or NULL: out of memory. No op runs in a step even then: a message is dropped
 * and logged (as an op drops a frame it has no memory for), a close is done at once (its
 * connection is untied already: nothing comes back into the machine), a flush noted. */
static struct rdzvd_job_effect *effect_new(enum effect_kind kind, const struct rdzvd_job_ops *ops,
                                           void *peer)
{
    struct rdzvd_job_effect *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->kind = kind;
    e->ops = ops;
    e->peer = peer;
    return e;
}

static void dropped(const char *what)
{
    log_error("out of memory queueing %s to an agent: dropped", what);
}

/* Steps (rdzvd-job-sm-int.h). */
struct rdzvd_job_frame rdzvd_job_step_begin(const struct rdzvd_job_host *h,
                                            struct rdzvd_job_frame *f)
{
    struct rdzvd_job_steps *s = h ? h->steps : NULL;

    if (s)
        step_open(s, &f->out);
    return (struct rdzvd_job_frame){.steps = s};
}

void rdzvd_job_step_end(struct rdzvd_job_frame *f)
{
    if (f->steps)
        step_close(f->steps);
}

bool rdzvd_job_deciding(const struct rdzvd_job_steps *s)
{
    return s->depth > 0;
}

/* The Ready's step (rdzvd-job-step.c): it holds the outbox unless a step is under way. */
void rdzvd_job_ready_open(const struct rdzvd_job_host *h, struct rdzvd_job_ready *rd)
{
    rd->out = (struct rdzvd_job_outbox){0};
    rd->steps_ = h->steps;
    step_open(rd->steps_, &rd->out);
}

void rdzvd_job_ready_close(struct rdzvd_job_ready *rd)
{
    step_close(rd->steps_);
}

bool rdzvd_job_ready_next(const struct rdzvd_job_ready *rd, const void **cursor,
                          struct rdzvd_job_send *send)
{
    const struct rdzvd_job_effect *e = *cursor;

    e = e ? e->next : rd->out.head;
    if (!e)
        return false;
    *cursor = e;
    *send = (struct rdzvd_job_send){.kind = (enum rdzvd_job_send_kind)e->kind, .peer = e->peer};
    switch (e->kind) {
    case EFF_JOINED:
        send->run_id = e->u.joined->run_id;
        send->warning = e->u.joined->warning;
        send->generation = e->u.joined->generation;
        send->count = e->u.joined->waiting;
        send->spare = e->u.joined->spare;
        send->resumed = e->u.joined->resumed;
        break;
    case EFF_ROUND:
        send->round = &e->u.round.body->u.round;
        send->node_rank = e->u.round.node_rank;
        send->rank_offset = e->u.round.rank_offset;
        break;
    case EFF_EVENT:
    case EFF_DISMISS:
        send->event = &e->u.event->u.event;
        break;
    case EFF_NCCL:
        send->generation = e->u.nccl.generation;
        send->count = e->u.nccl.count;
        send->store = e->u.nccl.store;
        break;
    case EFF_CLOSE:
        send->why = e->u.why;
        break;
    case EFF_FLUSH:
        break;
    }
    return true;
}

static bool event_equal(const struct rdzv_event *a, const struct rdzv_event *b)
{
    return a->generation == b->generation && a->exit_code == b->exit_code &&
           strcmp(a->type, b->type) == 0 && strcmp(a->summary, b->summary) == 0 &&
           strcmp(a->cost, b->cost) == 0 && a->startup_grace_ms == b->startup_grace_ms;
}

/* A copy of src (len bytes) held once for every member that gets it in a row: *last, the
 * newest, again when same says it is equal. NULL: out of memory. */
static struct rdzvd_job_shared *share(struct rdzvd_job_shared **last, bool same, const void *src,
                                      size_t len)
{
    struct rdzvd_job_shared *s = *last;

    if (s && same) {
        s->refs++;
        return s;
    }
    if (!(s = malloc(sizeof(*s))))
        return NULL;
    s->refs = 1;
    memcpy(&s->u, src, len);
    *last = s;
    return s;
}

static struct rdzvd_job_shared *event_body(struct rdzvd_job_outbox *o, const struct rdzv_event *ev)
{
    const struct rdzvd_job_shared *l = o->last_event;

    return share(&o->last_event, l && event_equal(&l->u.event, ev), ev, sizeof(*ev));
}

static bool round_equal(const struct rdzv_round *a, const struct rdzv_round *b)
{
    return a->generation == b->generation && a->nnodes == b->nnodes &&
           a->world_size == b->world_size && a->master_port == b->master_port &&
           a->restart_count == b->restart_count && a->max_restarts == b->max_restarts &&
           a->n_ids == b->n_ids && strcmp(a->master_addr, b->master_addr) == 0 &&
           memcmp(a->ids, b->ids, a->n_ids * sizeof(a->ids[0])) == 0;
}

static struct rdzvd_job_shared *round_body(struct rdzvd_job_outbox *o, const struct rdzv_round *rd)
{
    const struct rdzvd_job_shared *l = o->last_round;

    return share(&o->last_round, l && round_equal(&l->u.round, rd), rd, sizeof(*rd));
}

/* Queueing is a step of its own: e goes in the outbox of the step under way, and outside any
 * step is carried out now. Between sending_begin and sending_end, s->out is the outbox. */
static void sending_begin(struct rdzvd_job_steps *s, struct rdzvd_job_outbox *own)
{
    *own = (struct rdzvd_job_outbox){0};
    step_open(s, own);
}

static void post_event(struct rdzvd_job_steps *s, enum effect_kind kind,
                       const struct rdzvd_job_ops *ops, void *peer, const struct rdzv_event *ev)
{
    struct rdzvd_job_outbox own;
    struct rdzvd_job_effect *e;
    struct rdzvd_job_shared *b;

    sending_begin(s, &own);
    e = effect_new(kind, ops, peer);
    if ((b = e ? event_body(s->out, ev) : NULL)) {
        e->u.event = b;
        enqueue(s->out, e);
    } else {
        free(e);
        dropped(kind == EFF_DISMISS ? "a dismissal" : "an EVENT");
        if (kind == EFF_DISMISS)
            ops->close(peer, ev->summary);
    }
    step_close(s);
}

static void post(struct rdzvd_job_steps *s, struct rdzvd_job_effect *e)
{
    struct rdzvd_job_outbox own;

    sending_begin(s, &own);
    enqueue(s->out, e);
    step_close(s);
}

void rdzvd_member_send_event(struct rdzvd_member *m, const struct rdzv_event *ev)
{
    if (m->peer)
        post_event(m->job->host.steps, EFF_EVENT, m->job->host.ops, m->peer, ev);
}

void rdzvd_member_send_joined(struct rdzvd_member *m, bool spare, bool resumed)
{
    rdzvd_member_send_joined_warn(m, spare, resumed, NULL);
}

void rdzvd_member_send_joined_warn(struct rdzvd_member *m, bool spare, bool resumed,
                                   const char *warning)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_effect *e;
    struct joined *d;

    if (!m->peer)
        return;
    if (!(e = effect_new(EFF_JOINED, j->host.ops, m->peer)) || !(d = malloc(sizeof(*d)))) {
        free(e);
        dropped("JOINED");
        return;
    }
    snprintf(d->run_id, sizeof(d->run_id), "%s", j->run_id);
    snprintf(d->secret, sizeof(d->secret), "%s", m->secret);
    d->waiting = j->nmembers;
    d->generation = j->generation;
    d->spare = spare;
    d->resumed = resumed;
    d->inplace = j->inplace;
    d->warning = warning ? strdup(warning) : NULL; /* out of memory: sent without it */
    e->u.joined = d;
    post(j->host.steps, e);
}

void rdzvd_member_send_round(struct rdzvd_member *m, struct rdzv_round *rd)
{
    struct rdzvd_job_steps *s = m->job->host.steps;
    struct rdzvd_job_outbox own;
    struct rdzvd_job_effect *e;

    sending_begin(s, &own);
    e = effect_new(EFF_ROUND, m->job->host.ops, m->peer);
    if (e && !(e->u.round.body = round_body(s->out, rd))) {
        free(e);
        e = NULL;
    }
    if (e) {
        e->u.round.node_rank = rd->node_rank;
        e->u.round.rank_offset = rd->rank_offset;
        enqueue(s->out, e);
    } else {
        dropped("ROUND");
    }
    step_close(s);
}

int rdzvd_member_send_nccl_request(struct rdzvd_member *m, int64_t count, bool store)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_effect *e = effect_new(EFF_NCCL, j->host.ops, m->peer);

    if (!e)
        return -ENOMEM;
    e->u.nccl.m = m;
    e->u.nccl.generation = j->generation;
    e->u.nccl.count = count;
    e->u.nccl.store = store;
    e->u.nccl.allow = j->host.store_allow;
    post(j->host.steps, e);
    return 0;
}

/* At once, not queued: a pointer (no I/O), and a connection that closes before the outbox is
 * carried out (a write that fails in the same message) must find its member as decided. */
void rdzvd_job_peer_bind(const struct rdzvd_job *j, void *peer, struct rdzvd_member *m)
{
    j->host.ops->bind(peer, m);
}

void rdzvd_job_peer_close(const struct rdzvd_job *j, void *peer, const char *why)
{
    struct rdzvd_job_effect *e = effect_new(EFF_CLOSE, j->host.ops, peer);

    if (!e) {
        j->host.ops->close(peer, why); /* untied already: nothing comes back */
        return;
    }
    e->u.why = strdup(why); /* NULL (out of memory): a plainer reason */
    post(j->host.steps, e);
}

void rdzvd_job_peer_dismiss(const struct rdzvd_job *j, void *peer, const struct rdzv_event *ev)
{
    post_event(j->host.steps, EFF_DISMISS, j->host.ops, peer, ev);
}

void rdzvd_job_flush(const struct rdzvd_job *j)
{
    struct rdzvd_job_steps *s = j->host.steps;
    struct rdzvd_job_outbox *o = s->out;
    struct rdzvd_job_effect *e;

    /* One flush of a host in a row is enough. */
    if (s->depth > 0 && o->last) {
        if (o->last->kind == EFF_FLUSH && o->last->ops == j->host.ops &&
            o->last->peer == j->host.ud)
            return;
    }
    if (!(e = effect_new(EFF_FLUSH, j->host.ops, j->host.ud))) {
        if (!o) { /* outside any step: at once */
            j->host.ops->flush(j->host.ud);
            return;
        }
        o->flush_ops = j->host.ops;
        o->flush_ud = j->host.ud;
        return;
    }
    post(s, e);
}
