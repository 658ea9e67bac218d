/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-effects.c: where the job machine meets the world (rdzvd-job-impl.h, "Effects"): the
 * step's time, the machine's timers, and the outbox (rdzvd-job-sm.h): what the machine sends to
 * members' connections, the host's flush, the stores it opens and closes and the stores'
 * journals it drops, queued during a step and carried out when the step is done (through the
 * host's ops; a journal with unlinkat in the host's --state-dir); a job's status events and
 * timeline marks, dated by the step's wall time (rdzvd_job_note, rdzvd_job_mark). It reads no
 * clock either. The machine's pure files (the "pure:" line of
 * tests/layers.txt) call no uv_*, read no clock and call no op: they come here
 * (tests/layering.py checks it, with tests/layers.txt's "pure:" line). A timer is a due time in
 * its host's set: the host takes each due one back as an input (rdzvd_job_timer_due). What else
 * comes back while a Ready is carried out (a store opened, a request not queued, a record not
 * written, a connection gone) is queued as an input, and stepped through the machine's input fn
 * once that Ready is done (later_run: the one place that runs the queue), so this file calls
 * none of the machine's entry points. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-world.h"

/* ---- the step's time (rdzvd-job-world.h): the host's steps keep it ---- */

uint64_t rdzvd_job_now_ms(const struct rdzvd_job_host *h)
{
    return h->steps->now.ms;
}

double rdzvd_job_wall_s(const struct rdzvd_job_host *h)
{
    return h->steps->now.wall_s;
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

    j->events[i].time = rdzvd_job_wall_s(&j->host);
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

const char *rdzvd_job_named(struct rdzvd_job *j, const char *node_id)
{
    char *buf = j->named[j->named_next++ % 2];

    return rdzv_node_id_text(node_id, buf, sizeof(j->named[0]));
}

void rdzvd_job_mark(struct rdzvd_job *j, enum rdzv_mark_kind kind, const char *fmt, ...)
{
    char text[RDZV_STATUS_TEXT_MAX + 1];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    rdzvd_timeline_mark(&j->timeline, rdzvd_job_wall_s(&j->host), j->generation, kind, text);
}

/* ---- the machine's timers: a due time each, in its host's set (rdzvd-job-world.h) ---- */

void rdzvd_job_timers_init(struct rdzvd_job_timers *ts)
{
    ts->min = NULL;
    ts->n = 0;
    ts->seq = 0;
    rdzv_list_init(&ts->closing);
}

static struct rdzvd_job_timer *timer_of(struct rdzvd_job_heap_node *h)
{
    return rdzv_container_of(h, struct rdzvd_job_timer, heap);
}

/* a before b: due first, or as due and armed first. */
static bool heap_less(struct rdzvd_job_heap_node *a, struct rdzvd_job_heap_node *b)
{
    const struct rdzvd_job_timer *x = timer_of(a), *y = timer_of(b);

    return x->due_ms < y->due_ms || (x->due_ms == y->due_ms && x->seq < y->seq);
}

/* The link that points at node h: its parent's, or the root. */
static struct rdzvd_job_heap_node **heap_link(struct rdzvd_job_timers *ts,
                                              struct rdzvd_job_heap_node *h)
{
    if (!h->parent)
        return &ts->min;
    return h->parent->left == h ? &h->parent->left : &h->parent->right;
}

/* Swap child c with its parent p: their places in the tree, not their memory. */
static void heap_swap(struct rdzvd_job_timers *ts, struct rdzvd_job_heap_node *p,
                      struct rdzvd_job_heap_node *c)
{
    struct rdzvd_job_heap_node *sibling = p->left == c ? p->right : p->left;
    struct rdzvd_job_heap_node **up = heap_link(ts, p);
    struct rdzvd_job_heap_node *cl = c->left, *cr = c->right;

    *up = c;
    c->parent = p->parent;
    if (p->left == c) {
        c->left = p;
        c->right = sibling;
    } else {
        c->right = p;
        c->left = sibling;
    }
    if (sibling)
        sibling->parent = c;
    p->parent = c;
    p->left = cl;
    p->right = cr;
    if (cl)
        cl->parent = p;
    if (cr)
        cr->parent = p;
}

/* The link to the n-th place (1: the root) in breadth-first order, and its parent. */
static struct rdzvd_job_heap_node **heap_place(struct rdzvd_job_timers *ts, size_t n,
                                               struct rdzvd_job_heap_node **parent)
{
    struct rdzvd_job_heap_node **link = &ts->min;
    int bit = 0;

    *parent = NULL;
    while ((n >> bit) > 1)
        bit++;
    while (bit-- > 0) {
        *parent = *link;
        link = (n >> bit) & 1 ? &(*link)->right : &(*link)->left;
    }
    return link;
}

static void heap_up(struct rdzvd_job_timers *ts, struct rdzvd_job_heap_node *h)
{
    while (h->parent && heap_less(h, h->parent))
        heap_swap(ts, h->parent, h);
}

static void heap_down(struct rdzvd_job_timers *ts, struct rdzvd_job_heap_node *h)
{
    for (;;) {
        struct rdzvd_job_heap_node *least = h;

        if (h->left && heap_less(h->left, least))
            least = h->left;
        if (h->right && heap_less(h->right, least))
            least = h->right;
        if (least == h)
            return;
        heap_swap(ts, h, least);
    }
}

static void heap_insert(struct rdzvd_job_timers *ts, struct rdzvd_job_heap_node *h)
{
    struct rdzvd_job_heap_node *parent, **link = heap_place(ts, ++ts->n, &parent);

    h->left = h->right = NULL;
    h->parent = parent;
    *link = h;
    heap_up(ts, h);
}

/* The last place's node takes h's place, then moves down or up to where it belongs. */
static void heap_remove(struct rdzvd_job_timers *ts, struct rdzvd_job_heap_node *h)
{
    struct rdzvd_job_heap_node *parent, **link = heap_place(ts, ts->n--, &parent);
    struct rdzvd_job_heap_node *last = *link;

    *link = NULL;
    if (last == h)
        return;
    *heap_link(ts, h) = last;
    last->parent = h->parent;
    last->left = h->left;
    last->right = h->right;
    if (last->left)
        last->left->parent = last;
    if (last->right)
        last->right->parent = last;
    heap_down(ts, last);
    heap_up(ts, last);
}

static void timer_init(struct rdzvd_job_timer *t, bool member)
{
    t->due_ms = 0;
    t->member = member;
    rdzv_list_init(&t->closing);
}

static void timer_stop(struct rdzvd_job_timers *ts, struct rdzvd_job_timer *t)
{
    if (t->due_ms) {
        heap_remove(ts, &t->heap);
        t->due_ms = 0;
    }
}

/* Due ms after the step's now (h's); armed again, it goes after every timer armed before. */
static void timer_start(const struct rdzvd_job_host *h, struct rdzvd_job_timer *t, uint64_t ms)
{
    struct rdzvd_job_timers *ts = h->timers;

    rdzv_assert(rdzv_list_empty(&t->closing)); /* a closed timer is never armed again */
    timer_stop(ts, t);
    t->due_ms = rdzvd_job_now_ms(h) + ms;
    t->seq = ++ts->seq;
    heap_insert(ts, &t->heap);
}

static void timer_close(struct rdzvd_job_timers *ts, struct rdzvd_job_timer *t)
{
    rdzv_assert(rdzv_list_empty(&t->closing)); /* closed once */
    timer_stop(ts, t);
    rdzv_list_add_tail(&ts->closing, &t->closing);
}

uint64_t rdzvd_job_timers_first(const struct rdzvd_job_timers *ts)
{
    return ts->min ? timer_of(ts->min)->due_ms : 0;
}

uint64_t rdzvd_job_next_deadline(const struct rdzvd_job_host *h)
{
    return rdzvd_job_timers_first(h->timers);
}

bool rdzvd_job_timer_due(const struct rdzvd_job_host *h, uint64_t now_ms,
                         struct rdzvd_job_input *in)
{
    struct rdzvd_job_timer *t;

    if (!h->timers->min || (t = timer_of(h->timers->min))->due_ms > now_ms)
        return false;
    timer_stop(h->timers, t);
    if (t->member) {
        struct rdzvd_member *m = rdzv_container_of(t, struct rdzvd_member, hb_timer);

        /* What waits unread on its connection (read for the machine, which asks no host). */
        *in = (struct rdzvd_job_input){
            .kind = RDZVD_IN_DEADLINE,
            .member = m,
            .u.deadline = m->peer ? m->job->host.ops->unread(m->peer) : 0};
    } else {
        *in = (struct rdzvd_job_input){
            .kind = RDZVD_IN_TIMER, .u.job = rdzv_container_of(t, struct rdzvd_job, timer)};
    }
    return true;
}

bool rdzvd_job_timers_closing(const struct rdzvd_job_host *h)
{
    return !rdzv_list_empty(&h->timers->closing);
}

/* A member's memory may go after its job's (both closed in one step): m keeps what frees it. */
void rdzvd_job_timers_reap(const struct rdzvd_job_host *h)
{
    while (!rdzv_list_empty(&h->timers->closing)) {
        struct rdzvd_job_timer *t =
            rdzv_container_of(h->timers->closing.next, struct rdzvd_job_timer, closing);

        rdzv_list_del(&t->closing);
        if (t->member) {
            struct rdzvd_member *m = rdzv_container_of(t, struct rdzvd_member, hb_timer);

            m->freed(m);
        } else {
            struct rdzvd_job *j = rdzv_container_of(t, struct rdzvd_job, timer);

            j->handlers->freed(j);
        }
    }
}

/* ---- the job's timer ---- */

void rdzvd_job_timer_init(struct rdzvd_job *j)
{
    timer_init(&j->timer, false);
}

void rdzvd_job_timer_close(struct rdzvd_job *j)
{
    timer_close(j->host.timers, &j->timer);
}

void rdzvd_job_timer_start(struct rdzvd_job *j, enum job_timer kind, uint64_t ms)
{
    timer_start(&j->host, &j->timer, ms);
    j->timer_armed = true;
    j->timer_kind = kind;
}

void rdzvd_job_timer_stop(struct rdzvd_job *j)
{
    if (j->timer_armed) {
        timer_stop(j->host.timers, &j->timer);
        j->timer_armed = false;
    }
}

uint64_t rdzvd_job_timer_due_in(const struct rdzvd_job *j)
{
    uint64_t now = rdzvd_job_now_ms(&j->host);

    return j->timer.due_ms > now ? j->timer.due_ms - now : 0;
}

/* ---- a member's heartbeat deadline ---- */

void rdzvd_member_timer_init(struct rdzvd_member *m)
{
    timer_init(&m->hb_timer, true);
}

void rdzvd_member_timer_close(struct rdzvd_member *m, void (*freed)(struct rdzvd_member *m))
{
    m->freed = freed;
    timer_close(m->job->host.timers, &m->hb_timer);
}

void rdzvd_member_deadline_set(struct rdzvd_member *m, uint64_t ms)
{
    timer_start(&m->job->host, &m->hb_timer, ms);
}

void rdzvd_member_deadline_retry(struct rdzvd_member *m)
{
    /* 1 ms, not 0: a pass over the due timers runs those due at its time, before any poll. */
    timer_start(&m->job->host, &m->hb_timer, 1);
}

bool rdzvd_member_deadline_due(const struct rdzvd_member *m)
{
    return m->hb_timer.due_ms && m->hb_timer.due_ms <= rdzvd_job_now_ms(&m->job->host);
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
    EFF_PUT_ASIDE = RDZVD_SEND_PUT_ASIDE,
    EFF_FLUSH = RDZVD_SEND_FLUSH,
    EFF_STORE_OPEN = RDZVD_SEND_STORE_OPEN,
    EFF_STORE_CLOSE = RDZVD_SEND_STORE_CLOSE,
    EFF_JOURNAL_DROP = RDZVD_SEND_JOURNAL_DROP,
    EFF_PREFLIGHT = RDZVD_SEND_PREFLIGHT,
    EFF_KEEP_ENDED = RDZVD_SEND_KEEP_ENDED,
    EFF_KEEP_END = RDZVD_SEND_KEEP_END,
    EFF_KEEP_WAITING = RDZVD_SEND_KEEP_WAITING,
    EFF_TAKE_WAITING = RDZVD_SEND_TAKE_WAITING,
    EFF_LOST = RDZVD_SEND_LOST
};

struct rdzvd_job_shared {
    unsigned refs;
    union {
        struct rdzv_event event;
        struct rdzv_round round;
    } u;
};

struct store_open {
    struct rdzvd_job *job; /* its memory outlives the pass (freed by a later REAP) */
    uint64_t ask, generation;
    char desc[64], state_name[RDZVD_JOB_NAME_MAX]; /* "": no journal */
    uint16_t port;
    bool fresh;
};

/* A generation store's journal to delete from the host's --state-dir (fresh: a stale one). */
struct journal_drop {
    int dirfd; /* the host's state_dirfd */
    uint64_t generation;
    char run_id[RDZV_ID_MAX + 1], state_name[RDZVD_JOB_NAME_MAX];
    bool fresh;
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
    uint64_t seq;  /* its place in the outbox (1: the first queued) */
    bool unsent;   /* a message decided after a record not written: not sent */
    enum effect_kind kind;
    const struct rdzvd_job_ops *ops;
    void *peer; /* the host's; ud for EFF_FLUSH */
    union {
        struct joined *joined;
        struct {
            struct rdzvd_job_shared *body;
            int64_t node_rank, rank_offset;
        } round;
        struct rdzvd_job_shared *event; /* EVENT, PUT_ASIDE */
        struct {
            struct rdzvd_member *m; /* its memory outlives the step (freed from the loop) */
            uint64_t generation;
            int64_t count;
            bool store;
            const char *allow; /* the host's, lives as long as it */
        } nccl;
        char *why;                 /* CLOSE */
        struct store_open *open;   /* STORE_OPEN */
        struct journal_drop *jdrop; /* JOURNAL_DROP */
        struct rdzv_preflight *preflight; /* PREFLIGHT */
        struct {
            void *store;
            bool drop;
        } close; /* STORE_CLOSE */
        /* What the host's tables learn (peer: the host's ended, or lost's ud), with the host's
         * function for it: a copy, as a job's host may go. */
        struct {
            const struct rdzvd_job *j; /* its memory outlives the pass (freed by a REAP) */
            void (*fn)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job *j);
        } ended; /* KEEP_ENDED */
        struct {
            struct rdzvd_job_end *end;
            struct rdzvd_job_now now;
            void (*fn)(struct rdzvd_ended_jobs *ended, const struct rdzvd_job_end *e,
                       struct rdzvd_job_now now);
        } end; /* KEEP_END */
        struct {
            char *run_id;
            uint64_t since_ms;
            uint16_t port;
            void (*keep)(struct rdzvd_ended_jobs *ended, const char *run_id, uint64_t since_ms,
                         uint16_t port);
            uint64_t (*take)(struct rdzvd_ended_jobs *ended, const char *run_id);
        } waiting; /* KEEP_WAITING, TAKE_WAITING */
        void (*lost)(void *ud); /* LOST */
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
    case EFF_PUT_ASIDE:
        shared_put(o, e->u.event);
        break;
    case EFF_CLOSE:
        free(e->u.why);
        break;
    case EFF_JOINED:
        free(e->u.joined->warning);
        free(e->u.joined);
        break;
    case EFF_STORE_OPEN:
        free(e->u.open);
        break;
    case EFF_JOURNAL_DROP:
        free(e->u.jdrop);
        break;
    case EFF_PREFLIGHT:
        free(e->u.preflight);
        break;
    case EFF_KEEP_END:
        free(e->u.end.end);
        break;
    case EFF_KEEP_WAITING:
    case EFF_TAKE_WAITING:
        free(e->u.waiting.run_id);
        break;
    default:
        break;
    }
    free(e);
}
/* ---- what comes back while a Ready is carried out: inputs for later, in order ---- */

/* One input queued in its host's steps (a copy, with its message's bytes), and who steps it. */
struct rdzvd_job_later {
    struct rdzvd_job_later *next;
    rdzvd_job_input_fn fn;
    struct rdzvd_job_host h; /* a copy: a job's may go */
    struct rdzvd_job_input in;
    struct rdzvd_job_now now;
    max_align_t body[]; /* what in's message pointer names */
};

/* Queue in for fn at s's time, with blen bytes of body its message pointer names (a record's
 * bytes for UNRECORDED; else every pointer of the input's union is its first member). */
static void later(struct rdzvd_job_steps *s, rdzvd_job_input_fn fn,
                  const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                  const void *body, size_t blen)
{
    struct rdzvd_job_later *q = malloc(sizeof(*q) + blen);

    rdzv_assert(fn && in->kind < RDZVD_IN_KINDS);
    if (!q) {
        log_error("out of memory queueing input %d of the job machine: lost", (int)in->kind);
        return;
    }
    *q = (struct rdzvd_job_later){.fn = fn, .h = *h, .in = *in, .now = s->now};
    if (blen) {
        memcpy(q->body, body, blen);
        if (in->kind == RDZVD_IN_UNRECORDED)
            q->in.u.unrecorded.val = (const uint8_t *)q->body;
        else
            q->in.u.heartbeat = (const void *)q->body;
    }
    if (s->later_last)
        s->later_last->next = q;
    else
        s->later = q;
    s->later_last = q;
}

/* Step what came back, first to last, each with its own Ready carried out before the next:
 * the one place that runs the queue, once the outermost Ready is carried out. What a queued
 * step's Ready brings back joins the end of the queue. */
static void later_run(struct rdzvd_job_steps *s)
{
    struct rdzvd_job_later *q;

    rdzv_assert(!s->out && !s->draining);
    if (s->running)
        return;
    s->running = true;
    while ((q = s->later)) {
        s->later = q->next;
        if (!s->later)
            s->later_last = NULL;
        q->fn(&q->h, &q->in, q->now);
        rdzv_assert(!s->out && !s->draining); /* each carried out whole */
        free(q);
    }
    s->running = false;
}

bool rdzvd_job_input_later(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                           struct rdzvd_job_now now, const void *body, size_t blen)
{
    struct rdzvd_job_steps *s = h->steps;
    struct rdzvd_job_now was = s->now;

    if (!s->out && !s->draining && !s->running)
        return false;
    rdzv_assert(in->member && in->member->job); /* a member's input */
    s->now = now;
    later(s, in->member->job->handlers->input, h, in, body, blen);
    s->now = was;
    return true;
}

/* Delete d's journal (unlinkat, through rdzvd_journal_unlink): the one file of a job's that the
 * adapter deletes itself, as it carries the Ready out. */
static void journal_drop(const struct journal_drop *d)
{
    int r = rdzvd_job_record_drop_journal(d->dirfd, d->state_name);

    if (r < 0)
        log_warn_errno(r, "job=%s cannot delete the %sjournal %s", d->run_id,
                       d->fresh ? "stale " : "", d->state_name);
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
    case EFF_PUT_ASIDE:
        e->ops->put_aside(e->peer, &e->u.event->u.event);
        break;
    case EFF_NCCL:
        /* Not queued on the connection (it is closing, or out of memory): the job is told, in a
         * step of its own once this Ready is carried out. */
        if (e->ops->nccl_request(e->peer, e->u.nccl.generation, e->u.nccl.count, e->u.nccl.store,
                                 e->u.nccl.store ? e->u.nccl.allow : NULL) < 0) {
            struct rdzvd_member *m = e->u.nccl.m;

            later(m->job->host.steps, m->job->handlers->input, &m->job->host,
                  &(struct rdzvd_job_input){
                      .kind = RDZVD_IN_NCCL_UNSENT,
                      .member = m,
                      .u.nccl_unsent = {.generation = e->u.nccl.generation, .peer = e->peer}},
                  NULL, 0);
        }
        break;
    case EFF_CLOSE:
        e->ops->close(e->peer, e->u.why ? e->u.why : "closed");
        break;
    case EFF_FLUSH:
        e->ops->flush(e->peer);
        break;
    case EFF_STORE_OPEN: {
        /* Its answer is an input of a step of its own, once this Ready is carried out. */
        struct store_open *o = e->u.open;
        void *store = NULL;
        uint16_t port = 0;
        int r = e->ops->store_open(e->peer, o->desc, o->state_name[0] ? o->state_name : NULL,
                                   o->port, &store, &port);

        later(o->job->host.steps, o->job->handlers->input, &o->job->host,
              &(struct rdzvd_job_input){
                  .kind = RDZVD_IN_STORE_OPENED,
                  .u.store_opened = {.job = o->job,
                                     .ask = o->ask,
                                     .generation = o->generation,
                                     .store = r < 0 ? NULL : store,
                                     .port = r < 0 ? o->port : port,
                                     .err = r < 0 ? r : 0}},
              NULL, 0);
        break;
    }
    case EFF_STORE_CLOSE:
        e->ops->store_close(e->peer, e->u.close.store, e->u.close.drop);
        break;
    case EFF_JOURNAL_DROP:
        journal_drop(e->u.jdrop);
        break;
    case EFF_PREFLIGHT:
        if (e->ops->preflight)
            e->ops->preflight(e->peer, e->u.preflight);
        break;
    case EFF_KEEP_ENDED:
        e->u.ended.fn(e->peer, e->u.ended.j);
        break;
    case EFF_KEEP_END:
        e->u.end.fn(e->peer, e->u.end.end, e->u.end.now);
        break;
    case EFF_KEEP_WAITING:
        e->u.waiting.keep(e->peer, e->u.waiting.run_id, e->u.waiting.since_ms, e->u.waiting.port);
        break;
    case EFF_TAKE_WAITING:
        (void)e->u.waiting.take(e->peer, e->u.waiting.run_id);
        break;
    case EFF_LOST:
        e->u.lost(e->peer);
        break;
    }
}

/* What queues an effect or a record assumes: a step is open, its Ready not carried out. */
static void step_holds(const struct rdzvd_job_steps *s)
{
    rdzv_assert(s->out && !s->draining);
}

/* ---- the step's records: the job table's changes, written before anything is sent ---- */

struct rdzvd_job_kept {
    struct rdzvd_job_kept *next;
    struct rdzvd_job_host h; /* the host whose table made it (a copy: a job's may go) */
    uint64_t after;                 /* the effects queued before it */
    bool holds;                     /* not written: the messages queued after it are not sent */
    enum rdzvd_change what;
    size_t klen, vlen;
    uint8_t bytes[]; /* the key, then the value */
};

/* The host's write of one record: 0 or a negative errno. */
static int record_write(const struct rdzvd_job_host *h, enum rdzvd_change what,
                        const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    if (h->ops->record)
        return h->ops->record(h->ud, what, key, klen, val, vlen);
    rdzvd_store_pass_change(h->record_table, what, key, klen, val, vlen);
    return 0;
}

/* k was not written (r): the machine is told once o is carried out (the input UNRECORDED with
 * k's bytes, queued: a step of its own, never inside this one). When k holds (its decision's
 * rule), the messages to agents of o queued after k, up to top, are not sent. A close, a
 * put-aside EVENT, a flush or a store's open or close is carried out still (the machine let go of
 * the connection; a store it asked for gets its answer). */
static void unrecorded(struct rdzvd_job_outbox *o, const struct rdzvd_job_kept *k, int r,
                       uint64_t top)
{
    struct rdzvd_job_steps *s = k->h.steps;
    struct rdzvd_job_input in = {
        .kind = RDZVD_IN_UNRECORDED,
        .u.unrecorded = {.err = r, .what = k->what, .vlen = k->vlen}};

    later(s, s->input, &k->h, &in, k->bytes + k->klen, k->vlen);
    if (!k->holds)
        return;
    for (struct rdzvd_job_effect *e = o->head; e && e->seq <= top; e = e->next)
        e->unsent |= e->seq > k->after && (e->kind == EFF_JOINED || e->kind == EFF_ROUND ||
                                           e->kind == EFF_EVENT || e->kind == EFF_NCCL);
}

/* Hand o's records to their hosts, in order. */
static void records_write(struct rdzvd_job_outbox *o)
{
    uint64_t top = o->queued; /* what the steps told of a record not written queue is after */
    struct rdzvd_job_kept *k;
    int r;

    while ((k = o->kept)) {
        rdzv_assert(k->after <= top); /* kept after the effects queued before it, in order */
        o->kept = k->next;
        if (!o->kept)
            o->kept_last = NULL;
        r = record_write(&k->h, k->what, k->bytes, k->klen, k->bytes + k->klen, k->vlen);
        if (r < 0)
            unrecorded(o, k, r, top);
        free(k);
    }
}

struct rdzvd_job_kept *rdzvd_job_record_new(const struct rdzvd_job_host *h,
                                            enum rdzvd_change what, const uint8_t *key,
                                            size_t klen, const uint8_t *val, size_t vlen,
                                            bool holds)
{
    struct rdzvd_job_kept *k = malloc(sizeof(*k) + klen + vlen);

    step_holds(h->steps); /* a record is of the step under way */
    if (!k)
        return NULL;
    *k = (struct rdzvd_job_kept){.h = *h, .holds = holds, .what = what, .klen = klen,
                                 .vlen = vlen};
    memcpy(k->bytes, key, klen);
    if (vlen)
        memcpy(k->bytes + klen, val, vlen);
    return k;
}

void rdzvd_job_record_queue(const struct rdzvd_job_host *h, struct rdzvd_job_kept *k, bool made)
{
    struct rdzvd_job_outbox *o = h->steps->out;

    step_holds(h->steps);
    rdzv_assert(k);
    if (!made) {
        free(k);
        return;
    }
    /* Records are kept in the order decided: each after the one before it. */
    rdzv_assert(!o->kept_last || o->kept_last->after <= o->queued);
    k->after = o->queued;
    if (o->kept_last)
        o->kept_last->next = k;
    else
        o->kept = k;
    o->kept_last = k;
}

void rdzvd_job_records_keep(struct rdzvd_job_host *h, rdzvd_job_input_fn fn)
{
    h->steps->input = fn;
    h->keep_records = h->record_table != NULL;
}

/* The stale journals of o's fresh stores go first, before any record: a record of the
 * generation that names such a journal must never find the old one if rdzvd dies right after
 * it (a rebuild would replay it). A stale journal is nobody's, so it may go early. */
static void stale_journals_first(struct rdzvd_job_outbox *o)
{
    struct rdzvd_job_effect **pp = &o->head, *e, *prev = NULL;

    while ((e = *pp)) {
        if (e->kind != EFF_JOURNAL_DROP || !e->u.jdrop->fresh) {
            prev = e;
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        if (o->last == e)
            o->last = prev;
        carry(e);
        effect_free(o, e);
    }
}

/* Carry out everything queued in s's outbox, in order: the stale journals of fresh stores go
 * first, then what the steps recorded is written, before each effect. No step begins
 * meanwhile: what comes back is queued for later. */
static void drain(struct rdzvd_job_steps *s)
{
    struct rdzvd_job_outbox *o = s->out;
    struct rdzvd_job_effect *e;

    rdzv_assert(o && !s->draining);
    s->draining = true;
again:
    stale_journals_first(o);
    for (records_write(o); (e = o->head); records_write(o)) {
        o->head = e->next;
        if (!o->head)
            o->last = NULL;
        /* Sent only once every record kept before it is written, and with no step open. */
        rdzv_assert(!o->kept && s->draining && s->out == o);
        if (!e->unsent)
            carry(e);
        effect_free(o, e);
    }
    if (o->flush_ops) { /* one that found no memory for its place in the queue */
        const struct rdzvd_job_ops *ops = o->flush_ops;

        o->flush_ops = NULL;
        ops->flush(o->flush_ud);
        goto again;
    }
    rdzv_assert(!o->head && !o->kept && s->out == o);
    s->draining = false;
    o->last_event = o->last_round = NULL;
    s->out = NULL;
}

static void enqueue(struct rdzvd_job_outbox *o, struct rdzvd_job_effect *e)
{
    e->next = NULL;
    e->seq = ++o->queued;
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

bool rdzvd_job_deciding(const struct rdzvd_job_steps *s)
{
    return s->out && !s->draining;
}

/* The Ready's step (rdzvd-job-step.c): it holds the outbox. One step at a time: none is open,
 * no Ready is carried out (the last was carried out whole). */
void rdzvd_job_ready_open(const struct rdzvd_job_host *h, struct rdzvd_job_ready *rd)
{
    rdzv_assert(!h->steps->out && !h->steps->draining);
    rd->out = (struct rdzvd_job_outbox){0};
    rd->steps_ = h->steps;
    rd->steps_->out = &rd->out;
}

/* The Ready is carried out, then what came back meanwhile is stepped. */
void rdzvd_job_ready_close(struct rdzvd_job_ready *rd)
{
    rdzv_assert(rd->steps_->out == &rd->out && !rd->steps_->draining);
    drain(rd->steps_);
    later_run(rd->steps_);
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
    case EFF_PUT_ASIDE:
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
    case EFF_STORE_OPEN:
        send->run_id = e->u.open->job->run_id;
        send->generation = e->u.open->generation;
        send->desc = e->u.open->desc;
        send->state_name = e->u.open->state_name[0] ? e->u.open->state_name : NULL;
        send->port = e->u.open->port;
        send->fresh = e->u.open->fresh;
        break;
    case EFF_STORE_CLOSE:
        send->handle = e->u.close.store;
        send->drop = e->u.close.drop;
        break;
    case EFF_JOURNAL_DROP:
        send->run_id = e->u.jdrop->run_id;
        send->generation = e->u.jdrop->generation;
        send->state_name = e->u.jdrop->state_name;
        send->fresh = e->u.jdrop->fresh;
        break;
    case EFF_PREFLIGHT:
        send->preflight = e->u.preflight;
        break;
    case EFF_KEEP_ENDED:
        send->run_id = e->u.ended.j->run_id;
        break;
    case EFF_KEEP_END:
        send->run_id = e->u.end.end->run_id;
        break;
    case EFF_KEEP_WAITING:
    case EFF_TAKE_WAITING:
        send->run_id = e->u.waiting.run_id;
        send->since_ms = e->u.waiting.since_ms;
        send->port = e->u.waiting.port;
        break;
    case EFF_LOST:
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

static void post_event(struct rdzvd_job_steps *s, enum effect_kind kind,
                       const struct rdzvd_job_ops *ops, void *peer, const struct rdzv_event *ev)
{
    struct rdzvd_job_effect *e = effect_new(kind, ops, peer);
    struct rdzvd_job_shared *b;

    step_holds(s); /* e goes in the outbox of the step under way */
    if ((b = e ? event_body(s->out, ev) : NULL)) {
        e->u.event = b;
        enqueue(s->out, e);
    } else {
        free(e);
        dropped(kind == EFF_PUT_ASIDE ? "an EVENT put_aside" : "an EVENT");
        if (kind == EFF_PUT_ASIDE)
            ops->close(peer, ev->summary);
    }
}

/* e goes in the outbox of the step under way. */
static void post(struct rdzvd_job_steps *s, struct rdzvd_job_effect *e)
{
    step_holds(s);
    enqueue(s->out, e);
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
    struct rdzvd_job_effect *e;

    /* A ROUND goes out once its generation formed, to a member that holds a node rank in it. */
    rdzv_assert(m->job->state == JOB_RUNNING && rd->generation == m->job->generation);
    rdzv_assert(m->node_rank >= 0 && m->node_rank < m->job->rank_cap && m->peer);
    step_holds(s);
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

void rdzvd_member_send_preflight(struct rdzvd_member *m, const struct rdzv_preflight *p)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_effect *e = effect_new(EFF_PREFLIGHT, j->host.ops, m->peer);

    if (!e || !(e->u.preflight = malloc(sizeof(*p)))) {
        free(e);
        dropped("PREFLIGHT"); /* its link counts as unreachable when the slot ends */
        return;
    }
    *e->u.preflight = *p;
    post(j->host.steps, e);
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

void rdzvd_job_peer_put_aside(const struct rdzvd_job *j, void *peer, const struct rdzv_event *ev)
{
    post_event(j->host.steps, EFF_PUT_ASIDE, j->host.ops, peer, ev);
}

void rdzvd_job_flush(const struct rdzvd_job *j)
{
    struct rdzvd_job_steps *s = j->host.steps;
    struct rdzvd_job_outbox *o = s->out;
    struct rdzvd_job_effect *e;

    step_holds(s);
    /* One flush of a host in a row is enough. */
    if (o->last) {
        if (o->last->kind == EFF_FLUSH && o->last->ops == j->host.ops &&
            o->last->peer == j->host.ud)
            return;
    }
    if (!(e = effect_new(EFF_FLUSH, j->host.ops, j->host.ud))) {
        o->flush_ops = j->host.ops;
        o->flush_ud = j->host.ud;
        return;
    }
    post(s, e);
}

/* The host's stores: opened and closed as the outbox is carried out, in order. */
int rdzvd_job_store_ask(const struct rdzvd_job *j, uint64_t ask, const char *desc,
                        const char *state_name, uint16_t port, bool fresh)
{
    struct rdzvd_job_effect *e = effect_new(EFF_STORE_OPEN, j->host.ops, j->host.ud);
    struct store_open *o = e ? calloc(1, sizeof(*o)) : NULL;

    if (!o) {
        free(e);
        return -ENOMEM;
    }
    o->job = (struct rdzvd_job *)j;
    o->ask = ask;
    o->generation = j->generation;
    snprintf(o->desc, sizeof(o->desc), "%s", desc);
    snprintf(o->state_name, sizeof(o->state_name), "%s", state_name ? state_name : "");
    o->port = port;
    o->fresh = fresh;
    e->u.open = o;
    post(j->host.steps, e);
    return 0;
}

void rdzvd_job_store_drop(const struct rdzvd_job *j, void *store, bool drop)
{
    struct rdzvd_job_effect *e = effect_new(EFF_STORE_CLOSE, j->host.ops, j->host.ud);

    if (!e) { /* out of memory: at once (nothing comes back into the machine) */
        j->host.ops->store_close(j->host.ud, store, drop);
        return;
    }
    e->u.close.store = store;
    e->u.close.drop = drop;
    post(j->host.steps, e);
}

int rdzvd_job_journal_drop(const struct rdzvd_job *j, uint64_t gen, const char *state_name,
                           bool fresh)
{
    struct rdzvd_job_effect *e = effect_new(EFF_JOURNAL_DROP, j->host.ops, j->host.ud);
    struct journal_drop *d = e ? calloc(1, sizeof(*d)) : NULL;

    rdzv_assert(j->host.state_dirfd >= 0 && state_name && state_name[0]);
    if (!d) {
        free(e);
        log_error("job=%s out of memory queueing the deletion of the journal %s: it stays",
                  j->run_id, state_name);
        return -ENOMEM;
    }
    *d = (struct journal_drop){.dirfd = j->host.state_dirfd, .generation = gen, .fresh = fresh};
    snprintf(d->run_id, sizeof(d->run_id), "%s", j->run_id);
    snprintf(d->state_name, sizeof(d->state_name), "%s", state_name);
    e->u.jdrop = d;
    post(j->host.steps, e);
    return 0;
}

int rdzvd_job_store_open_now(const struct rdzvd_job *j, const char *desc,
                             const char *state_name, uint16_t port, void **store,
                             uint16_t *port_out)
{
    return j->host.ops->store_open(j->host.ud, desc, state_name, port, store, port_out);
}

/* ---- what the host's tables must learn: effects too, carried out in order ---- */

static void host_lost(const char *what)
{
    log_error("out of memory queueing %s for the host's tables: dropped", what);
}

void rdzvd_job_tell_ended(const struct rdzvd_job *j)
{
    struct rdzvd_job_effect *e;

    if (!j->host.keep_ended)
        return;
    if (!(e = effect_new(EFF_KEEP_ENDED, j->host.ops, j->host.ended))) {
        host_lost("a job that ended");
        return;
    }
    e->u.ended.j = j;
    e->u.ended.fn = j->host.keep_ended;
    post(j->host.steps, e);
}

void rdzvd_job_tell_end(const struct rdzvd_job_host *h, const struct rdzvd_job_end *end)
{
    struct rdzvd_job_effect *e;

    if (!h->keep_end || !h->ended)
        return;
    e = effect_new(EFF_KEEP_END, h->ops, h->ended);
    if (!e || !(e->u.end.end = malloc(sizeof(*end)))) {
        free(e);
        host_lost("how a job ended");
        return;
    }
    *e->u.end.end = *end;
    e->u.end.now = h->steps->now;
    e->u.end.fn = h->keep_end;
    post(h->steps, e);
}

/* A note of run_id's waiting (kind KEEP_WAITING or TAKE_WAITING), or NULL: out of memory. */
static struct rdzvd_job_effect *waiting_new(const struct rdzvd_job_host *h,
                                            enum effect_kind kind, const char *run_id)
{
    struct rdzvd_job_effect *e = effect_new(kind, h->ops, h->ended);

    if (e && !(e->u.waiting.run_id = strdup(run_id))) {
        free(e);
        e = NULL;
    }
    if (!e)
        host_lost("a job's waiting for its nodes");
    return e;
}

void rdzvd_job_tell_waiting(const struct rdzvd_job_host *h, const char *run_id,
                            uint64_t since_ms, uint16_t port)
{
    struct rdzvd_job_effect *e;

    if (!h->keep_waiting || !h->ended || !(e = waiting_new(h, EFF_KEEP_WAITING, run_id)))
        return;
    e->u.waiting.since_ms = since_ms;
    e->u.waiting.port = port;
    e->u.waiting.keep = h->keep_waiting;
    post(h->steps, e);
}

void rdzvd_job_tell_taken(const struct rdzvd_job_host *h, const char *run_id)
{
    struct rdzvd_job_effect *e;

    if (!h->take_waiting || !h->ended || !(e = waiting_new(h, EFF_TAKE_WAITING, run_id)))
        return;
    e->u.waiting.take = h->take_waiting;
    post(h->steps, e);
}

void rdzvd_job_tell_lost(const struct rdzvd_job_host *h)
{
    struct rdzvd_job_effect *e;

    if (!h->lost)
        return;
    if (!(e = effect_new(EFF_LOST, h->ops, h->lost_ud))) {
        host_lost("a member lost");
        return;
    }
    e->u.lost = h->lost;
    post(h->steps, e);
}

uint64_t rdzvd_job_input_waiting(const struct rdzvd_job_host *h, const char *run_id)
{
    const struct rdzvd_job_input *in = h->steps->in;

    if (!in || !in->waiting)
        return 0;
    if (in->kind == RDZVD_IN_JOIN)
        return in->u.join && !strcmp(in->u.join->run_id, run_id) ? in->waiting[0] : 0;
    if (in->kind == RDZVD_IN_REBUILD)
        for (size_t i = 0; i < in->u.rebuild.n; i++)
            if (!strcmp(in->u.rebuild.ids[i], run_id))
                return in->waiting[i];
    return 0;
}

/* ---- the generation stores' journals (rdzvd-job-journals.h) ---- */

int rdzvd_job_record_drop_journal(int dirfd, const char *state_name)
{
    return rdzvd_journal_unlink(dirfd, state_name);
}
