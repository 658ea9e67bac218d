/* SPDX-License-Identifier: Apache-2.0 */
/* cluster.h: the cluster simulator's world (test-cluster-sim.c): one clock, one queue of timed
 * events, rdzvd's job machine (daemon/job/rdzvd-job-sm.h) on a host of the simulator's, and a
 * network of connections between it and the agents (cluster-agent.h), each a FIFO each way with
 * a delay. A connection is lost (both sides told), a node is cut off for a while (what it sends
 * or is sent waits until the partition heals), rdzvd restarts (its connections reset; with
 * --state-dir its job table's records survive and the jobs are rebuilt from them). No libuv, no
 * socket, no clock read: everything is a struct on the queue, in order of time, then of
 * scheduling. For test-cluster-sim.c only, which includes it once. */
#pragma once
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-status.h"
#include "daemon/job/rdzvd-job-world.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"

#define CS_AGENTS 8   /* agents at most */
#define CS_NPROC 2    /* workers per agent at most */
#define CS_T0 1000000 /* the clock at a world's start (never 0: 0 is "never" to the machine) */
#define CS_GENS 256   /* generations remembered (their worlds, for the checks) */

/* ---- the queue of timed events ---- */

enum cs_ev_kind {
    E_DELIVER,      /* msg on its connection reaches its side */
    E_GONE,         /* rdzvd learns a lost connection closed (RDZVD_IN_CLOSED) */
    E_LOST,         /* an agent learns its connection broke (AGENT_IN_LOST) */
    E_TICK,         /* rdzvd's clock reached a deadline of its Ready */
    E_REAP,         /* the loop turn that closed timers is over */
    E_ATIMER,       /* agent a's machine timer arg (token: armed as) */
    E_BEAT,         /* agent a's heartbeat timer, and its checks of silence and progress */
    E_CONNECT,      /* agent a tries to connect */
    E_STEP,         /* the workers of generation gen try a step together */
    E_WEXIT,        /* worker arg of agent a exits (token: its life) */
    E_HEALTH,       /* agent a's health check before READY passed */
    E_FAULT,        /* the trace's fault arg */
    E_SIGNAL,       /* agent a receives signal arg from outside */
    E_RDZVD_UP,     /* rdzvd starts again */
    E_OUTPUT,       /* the stderr of worker arg of agent a closes (token: its group) */
    E_STACKS,       /* the stacks of agent a's silent worker arg are in (gen: it hung in) */
};

struct cs_msg;
struct cs_ev {
    uint64_t t, seq;
    enum cs_ev_kind kind;
    int a, arg, sig;
    uint64_t gen, token;
    struct cs_msg *msg;
};

/* ---- messages: what crosses a connection, as the structs proto/rdzv-msg.h decodes ---- */

enum cs_msg_kind {
    /* agent -> rdzvd */
    M_JOIN, M_HB, M_NCCL_ID, M_WEXIT, M_LEAVE, M_READY, M_CANCEL, M_UNHEALTHY,
    /* rdzvd -> agent */
    M_JOINED, M_ROUND, M_EVENT, M_NCCL_REQ, M_HB_REPLY, M_ERROR,
    /* either way: the sender closed its end (what was sent before arrives first) */
    M_FIN,
};

struct cs_msg {
    enum cs_msg_kind kind;
    int conn;
    union {
        struct rdzv_join join;
        struct {
            uint64_t gen;
            unsigned n;
            struct rdzv_rank_progress p[CS_NPROC];
        } hb;
        struct rdzv_nccl_id nccl_id;
        struct rdzv_worker_exit wexit;
        struct rdzv_leave leave;
        struct rdzv_ready ready;
        struct rdzv_cancel cancel;
        struct rdzv_unhealthy unhealthy;
        struct {
            bool spare, resumed;
            uint64_t incarnation;
            unsigned run;
            char secret[RDZV_SECRET_HEX + 1];
        } joined;
        struct rdzv_round round;
        struct rdzv_event event;
        struct rdzv_nccl_request nreq;
        char error[RDZV_ERROR_MAX + 1];
    } u;
    bool old_held; /* an ERROR refusing a JOIN: rdzvd held the agent's old connection then */
};

/* A connection between agent a and one rdzvd (epoch: its incarnation in this world). */
struct cs_conn {
    int a;
    unsigned epoch;
    bool a_open, r_open;       /* each side's end open */
    bool r_closed;             /* rdzvd let go of it (ops close, dismiss, a refusal) */
    struct rdzvd_member *m;    /* bound by the machine (ops bind) */
    uint64_t last_t[2];        /* the last delivery each way (0: to rdzvd): FIFO */
};

/* ---- what the checks remember of the job's generations ---- */

struct cs_gen {
    uint64_t g;
    int64_t world, nnodes;
    char id[17];           /* the first 16 hex of the NCCL id its ROUND gave ("": none yet) */
    int owner[CS_AGENTS * CS_NPROC * 2]; /* rank -> agent * CS_NPROC + local rank + 1, 0: none */
    bool stepping;         /* an E_STEP is queued */
    unsigned epoch;        /* the rdzvd that formed it */
    int64_t step_ms;
};

struct cs_world;
static struct cs_world *W; /* the world being simulated (one at a time) */

static void cs_bad(int inv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cs_push(uint64_t t, struct cs_ev ev);

static uint64_t cs_rnd(uint64_t *x) /* splitmix64 */
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the heap ---- */

struct cs_heap {
    struct cs_ev *v;
    size_t n, cap;
    uint64_t seq;
};

static bool cs_ev_before(const struct cs_ev *x, const struct cs_ev *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void cs_heap_push(struct cs_heap *h, struct cs_ev ev)
{
    size_t i;

    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->v = realloc(h->v, h->cap * sizeof(*h->v));
        if (!h->v)
            abort();
    }
    ev.seq = h->seq++;
    i = h->n++;
    while (i > 0 && cs_ev_before(&ev, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = ev;
}

static bool cs_heap_pop(struct cs_heap *h, struct cs_ev *out)
{
    struct cs_ev last;
    size_t i = 0;

    if (!h->n)
        return false;
    *out = h->v[0];
    last = h->v[--h->n];
    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= h->n)
            break;
        if (c + 1 < h->n && cs_ev_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!cs_ev_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return true;
}

#include "cluster-agent-types.h"

/* ---- the world ---- */

struct cs_world {
    uint64_t seed, now, rng; /* rng: the world's incidental draws (delays, step times) */
    uint64_t side; /* the draws of the agents' adapter since their step machine took its guards
                    * (stderr's end, stacks, checks), apart: rng's draws as they were */
    struct cs_cfg c;
    struct cs_heap q;
    uint64_t events;
    /* rdzvd: up, its incarnation (epoch), its host and what the host keeps */
    bool up;
    unsigned epoch;
    struct rdzvd_job_host h;
    struct rdzvd_job_steps steps;
    struct rdzvd_job_timers timers;
    struct rdzvd_ended_jobs ended;
    struct rdzv_list jobs;
    struct rdzvd_store *table;     /* --state-dir: the job table, surviving a restart */
    struct rdzvd_store *mem_table; /* without: nodes' secrets, lost with rdzvd */
    struct rdzvd_job_bounds bounds;
    bool crashing;                 /* rdzvd is going down: nothing more is written or sent */
    uint64_t tick_at;              /* the earliest E_TICK queued (0: none) */
    int stores;
    /* the network */
    struct cs_conn *conns;
    int nconns, capconns;
    uint64_t part_until[CS_AGENTS]; /* node a cut off until then (0: not) */
    /* the agents and their workers */
    struct cs_agent ag[CS_AGENTS];
    int64_t ckpt;                   /* the job's checkpoint: the last step saved */
    struct cs_gen gens[CS_GENS];
    unsigned run;                   /* the job made afresh this many times (cs_key) */
    bool run_ended;                 /* rdzvd told this run's end */
    uint64_t end_forgot_t;          /* ... and forgot it: a resume rebuilt the job then (0: no) */
    int end_forgot_a;               /* ... node-<a>'s */
    bool round_ignored;             /* a ROUND came while the agent's workers still ran */
    /* what rdzvd said of its jobs' ends (its EVENTs to the agents), each once */
    struct rdzv_event outs[8];
    int nouts;
    uint64_t last_fault_t;          /* the time of the trace's last fault */
    uint64_t restart_gen;           /* the last generation told to restart (run << 40 | gen) */
    uint64_t uncounted_at[RDZVD_JOB_UNCOUNTED_RESTARTS + 2]; /* the last scale-ups: when */
    unsigned nuncounted, free_run, free_epoch; /* ... and the job they are of */
    /* a violation (the first), and the trace's faults */
    int bad_inv;
    char bad[512];
    struct cs_fault *faults;
    int nfaults;
    int verbose; /* 1: faults and ends, 2: every event */
};

#define NOW (W->now)

static int64_t cs_draw(int64_t lo, int64_t hi) /* in [lo, hi] */
{
    return lo + (int64_t)(cs_rnd(&W->rng) % (uint64_t)(hi - lo + 1));
}

static int64_t cs_side(int64_t lo, int64_t hi) /* in [lo, hi], from W->side */
{
    return lo + (int64_t)(cs_rnd(&W->side) % (uint64_t)(hi - lo + 1));
}

static void cs_push(uint64_t t, struct cs_ev ev)
{
    ev.t = t;
    cs_heap_push(&W->q, ev);
}

static void cs_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cs_say(const char *fmt, ...)
{
    va_list ap;

    if (!W->verbose)
        return;
    printf("#   %8.3f ", (double)(NOW - CS_T0) / 1000);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

#include "cluster-wire.h"

/* ---- the network ---- */

static struct cs_msg *cs_msg_new(enum cs_msg_kind kind)
{
    struct cs_msg *m = calloc(1, sizeof(*m)); /* every field the encoders read is set */

    if (!m)
        abort();
    m->kind = kind;
    return m;
}

static bool cs_cut(int a)
{
    return W->part_until[a] > NOW;
}

/* Send m on connection ci, toward rdzvd (to_r) or the agent: after a delay of its own, never
 * before what went before it, and not before a partition of the agent's node heals. */
static void cs_send(int ci, bool to_r, struct cs_msg *m)
{
    struct cs_conn *c = &W->conns[ci];
    uint64_t t = NOW + (uint64_t)cs_draw(W->c.net_min_ms, W->c.net_max_ms);

    m->conn = ci;
    if (W->c.wire)
        cs_wire(m);
    if (cs_cut(c->a))
        t = W->part_until[c->a] + (uint64_t)cs_draw(W->c.net_min_ms, W->c.net_max_ms);
    if (t < c->last_t[!to_r])
        t = c->last_t[!to_r];
    c->last_t[!to_r] = t;
    cs_push(t, (struct cs_ev){.kind = E_DELIVER, .a = c->a, .arg = to_r, .msg = m});
}

static int cs_conn_new(int a)
{
    struct cs_conn *c;

    if (W->nconns == W->capconns) {
        W->capconns = W->capconns ? 2 * W->capconns : 64;
        W->conns = realloc(W->conns, (size_t)W->capconns * sizeof(*W->conns));
        if (!W->conns)
            abort();
    }
    c = &W->conns[W->nconns];
    *c = (struct cs_conn){.a = a, .epoch = W->epoch, .a_open = true, .r_open = true};
    return W->nconns++;
}

/* rdzvd still holds another connection of agent a than ci, bound to its member: it has not seen
 * it close (a lost connection's end reaches each side in its own time). */
static bool cs_old_conn_held(int a, int ci)
{
    for (int k = 0; k < W->nconns; k++) {
        const struct cs_conn *c = &W->conns[k];

        if (k != ci && c->a == a && c->m && !c->r_closed && c->epoch == W->epoch)
            return true;
    }
    return false;
}

/* ---- rdzvd's host: the ops the machine reaches the world through ---- */

static struct cs_conn *cs_peer(void *peer)
{
    return &W->conns[(int)(intptr_t)peer - 1];
}

static void *cs_peer_of(int ci)
{
    return (void *)(intptr_t)(ci + 1);
}

static int cs_ci(void *peer)
{
    return (int)(intptr_t)peer - 1;
}

/* To peer from rdzvd, unless rdzvd is going down or let go of it. */
static bool cs_r_can_send(void *peer)
{
    struct cs_conn *c = cs_peer(peer);

    return !W->crashing && c->r_open && c->epoch == W->epoch;
}

static void h_joined(void *peer, const char *run_id, int64_t waiting, bool spare, bool resumed,
                     uint64_t generation, bool inplace, const char *secret, const char *warning)
{
    struct cs_msg *m;

    (void)run_id, (void)waiting, (void)generation, (void)inplace, (void)warning;
    if (!cs_r_can_send(peer))
        return;
    m = cs_msg_new(M_JOINED);
    m->u.joined.spare = spare;
    m->u.joined.resumed = resumed;
    m->u.joined.incarnation = W->h.incarnation;
    m->u.joined.run = W->run;
    snprintf(m->u.joined.secret, sizeof(m->u.joined.secret), "%s", secret ? secret : "");
    cs_send(cs_ci(peer), false, m);
}

static void cs_end_forgotten_round(uint64_t gen);

static void h_round(void *peer, struct rdzv_round *rd)
{
    struct cs_msg *m;

    if (!rd->master_addr[0])
        snprintf(rd->master_addr, sizeof(rd->master_addr), "10.0.0.1");
    if (!cs_r_can_send(peer))
        return;
    cs_end_forgotten_round(rd->generation);
    m = cs_msg_new(M_ROUND);
    m->u.round = *rd;
    cs_send(cs_ci(peer), false, m);
}

static void cs_note_outcome(const struct rdzv_event *e);
static void cs_note_told(const struct rdzv_event *e);
static void cs_end_forgotten(int a, uint64_t gen);

static void h_event(void *peer, const struct rdzv_event *e)
{
    struct cs_msg *m;

    if (!cs_r_can_send(peer))
        return;
    cs_note_outcome(e);
    m = cs_msg_new(M_EVENT);
    m->u.event = *e;
    cs_send(cs_ci(peer), false, m);
}

static int h_nccl_request(void *peer, uint64_t generation, int64_t count, bool store,
                          const char *store_allow)
{
    struct cs_msg *m;

    (void)store_allow;
    if (!cs_r_can_send(peer))
        return 0;
    m = cs_msg_new(M_NCCL_REQ);
    m->u.nreq = (struct rdzv_nccl_request){.generation = generation, .count = (unsigned)count,
                                           .store = store};
    cs_send(cs_ci(peer), false, m);
    return 0;
}

/* rdzvd closes its end of peer: the agent reads what was sent, then the end. */
static void cs_r_close(void *peer)
{
    struct cs_conn *c = cs_peer(peer);
    bool send = cs_r_can_send(peer);

    c->r_closed = true;
    c->m = NULL;
    if (!send)
        return;
    c->r_open = false;
    cs_send(cs_ci(peer), false, cs_msg_new(M_FIN));
}

static void h_close(void *peer, const char *reason)
{
    (void)reason;
    cs_r_close(peer);
}

static void h_dismiss(void *peer, const struct rdzv_event *e)
{
    h_event(peer, e);
    cs_r_close(peer);
}

static void h_preflight(void *peer, const struct rdzv_preflight *p)
{
    (void)peer, (void)p;
}

static void h_bind(void *peer, struct rdzvd_member *m)
{
    cs_peer(peer)->m = m;
}

static size_t h_unread(void *peer)
{
    (void)peer;
    return 0;
}

static void h_flush(void *ud)
{
    (void)ud;
}

static int h_store_open(void *ud, const char *desc, const char *state_name, uint16_t port,
                        void **store, uint16_t *port_out)
{
    (void)ud, (void)desc, (void)state_name;
    W->stores++;
    *store = (void *)(uintptr_t)W->stores;
    *port_out = port ? port : (uint16_t)(30000 + W->stores % 20000);
    return 0;
}

static void h_store_close(void *ud, void *store, bool drop)
{
    (void)ud, (void)store, (void)drop;
}

/* A record of the job table: kept (--state-dir) unless rdzvd is going down. */
static int h_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                    const uint8_t *val, size_t vlen)
{
    (void)ud;
    if (!W->crashing && W->h.record_table)
        rdzvd_store_pass_change(W->h.record_table, what, key, klen, val, vlen);
    return 0;
}

static const struct rdzvd_job_ops cs_ops = {
    .joined = h_joined, .round = h_round, .event = h_event, .nccl_request = h_nccl_request,
    .close = h_close, .put_aside = h_dismiss, .preflight = h_preflight, .bind = h_bind,
    .unread = h_unread, .flush = h_flush, .store_open = h_store_open,
    .store_close = h_store_close, .record = h_record,
};

static struct rdzvd_job_now cs_clock(void)
{
    return (struct rdzvd_job_now){.ms = NOW, .wall_s = 1800000000.0 + (double)NOW / 1000};
}

/* After a Ready: rdzvd's next deadline queued (unless an earlier tick is), closed timers
 * reaped at the end of the turn. */
static void cs_after_ready(const struct rdzvd_job_ready *rd)
{
    uint64_t due = rd->next_deadline_ms;

    if (due && (!W->tick_at || due < W->tick_at || W->tick_at < NOW)) {
        W->tick_at = due < NOW ? NOW : due;
        cs_push(W->tick_at, (struct cs_ev){.kind = E_TICK, .token = W->epoch});
    }
    if (rd->reap)
        cs_push(NOW, (struct cs_ev){.kind = E_REAP, .token = W->epoch});
}

/* One input into rdzvd's machine, its Ready carried out at once. ready->rc. */
static int cs_r_step(const struct rdzvd_job_input *in, struct rdzvd_job_ready *rd)
{
    rdzvd_job_step(&W->h, in, cs_clock(), rd);
    rdzvd_job_advance(rd);
    cs_after_ready(rd);
    return rd->rc;
}

static void cs_r_tick(void)
{
    struct rdzvd_job_input tick = {.kind = RDZVD_IN_TICK, .u.until = NOW};
    struct rdzvd_job_ready rd;

    W->tick_at = 0;
    do
        cs_r_step(&tick, &rd);
    while (rd.ticked);
    if (rdzvd_job_next_deadline(&W->h))
        cs_after_ready(&(struct rdzvd_job_ready){.next_deadline_ms =
                                                     rdzvd_job_next_deadline(&W->h)});
}

/* rdzvd starts: a host of its own, the job table kept (--state-dir) rebuilt. */
static void cs_rdzvd_start(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

    W->up = true;
    W->epoch++;
    W->crashing = false;
    memset(&W->steps, 0, sizeof(W->steps));
    W->steps.now = cs_clock();
    rdzv_list_init(&W->jobs);
    rdzvd_job_timers_init(&W->timers);
    rdzvd_ended_jobs_init(&W->ended, 3600 * 1000, 16);
    W->h = (struct rdzvd_job_host){
        .ops = &cs_ops, .steps = &W->steps, .state_dirfd = -1, .jobs = &W->jobs,
        .timers = &W->timers, .ended = &W->ended, .incarnation = 1000 + W->epoch,
        .keep_ended = rdzvd_ended_jobs_add, .keep_end = rdzvd_ended_jobs_add_recorded,
        .keep_waiting = rdzvd_waiting_jobs_add, .take_waiting = rdzvd_waiting_jobs_take,
        .quiet = true};
    if (W->c.state_dir) {
        if (!W->table) {
            if (rdzvd_store_new(&lim, NULL, &W->table) < 0)
                abort();
            rdzvd_store_set_decision_fn(W->table, rdzvd_decision_apply, &W->bounds);
        }
        W->h.record_table = W->table;
        W->h.secret_table = W->table;
        rdzvd_job_host_keep_records(&W->h);
    } else {
        if (rdzvd_store_new(&lim, NULL, &W->mem_table) < 0)
            abort();
        rdzvd_store_set_decision_fn(W->mem_table, rdzvd_decision_apply, &W->bounds);
        W->h.secret_table = W->mem_table;
    }
    W->tick_at = 0;
    if (W->c.state_dir) { /* as rdzvd does at its start: REBUILD_BEGIN, then the ids listed */
        struct rdzvd_job_input in = {.kind = RDZVD_IN_REBUILD_BEGIN};
        struct rdzvd_job_ready rd;

        if (cs_r_step(&in, &rd) < 0) {
            free(rd.ids);
            return;
        }
        in = (struct rdzvd_job_input){.kind = RDZVD_IN_REBUILD, .u.rebuild = {rd.ids, rd.n_ids}};
        cs_r_step(&in, &rd);
        free(in.u.rebuild.ids);
    }
}

/* rdzvd goes down (a crash: nothing more written, nothing more sent): its jobs leave memory,
 * every connection resets. */
static void cs_rdzvd_stop(void)
{
    struct rdzvd_job_ready rd;

    W->crashing = true;
    cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_DROP_ALL}, &rd);
    do {
        struct rdzvd_job_input tick = {.kind = RDZVD_IN_TICK, .u.until = NOW};

        cs_r_step(&tick, &rd);
    } while (rd.ticked);
    cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_REAP}, &rd);
    rdzvd_ended_jobs_free(&W->ended);
    W->mem_table = rdzvd_store_free(W->mem_table);
    W->up = false;
    for (int ci = 0; ci < W->nconns; ci++) {
        struct cs_conn *c = &W->conns[ci];

        if (c->epoch != W->epoch)
            continue;
        c->r_open = false;
        c->m = NULL;
        if (c->a_open) /* reset: what was in flight is lost */
            cs_push(NOW + (uint64_t)cs_draw(1, 50),
                    (struct cs_ev){.kind = E_LOST, .a = c->a, .arg = ci});
    }
}

/* A message reaches rdzvd on connection ci (any frame from a member is a sign of life first). */
static void cs_r_deliver(struct cs_msg *msg)
{
    static struct rdzv_heartbeat hb;
    struct cs_conn *c = &W->conns[msg->conn];
    struct rdzvd_job_input in = {.member = c->m};
    struct rdzvd_job_ready rd;

    if (!W->up || c->epoch != W->epoch || !c->r_open)
        return;
    if (msg->kind == M_FIN) {
        c->r_open = false;
        if (c->m && !c->r_closed) {
            in.kind = RDZVD_IN_CLOSED;
            cs_r_step(&in, &rd);
        }
        c->m = NULL;
        return;
    }
    if (c->m)
        cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_SEEN, .member = c->m}, &rd);
    in.member = c->m;
    switch (msg->kind) {
    case M_JOIN: {
        uint64_t waiting = rdzvd_waiting_jobs_peek(&W->ended, msg->u.join.run_id);

        const struct rdzvd_job *cur = rdzvd_job_view(&W->jobs, "job");
        bool none = !cur, ended = W->run_ended;

        /* A job made afresh: none in memory, or one that ended (an agent started after its end
         * begins a new run; one started before is refused, and runs nothing). */
        if (!msg->u.join.resume.generation && !waiting && (none || cur->state == JOB_ENDED)) {
            W->run++;
            W->run_ended = false;
            W->end_forgot_t = 0;
        }
        in.kind = RDZVD_IN_JOIN;
        in.peer = cs_peer_of(msg->conn);
        in.u.join = &msg->u.join;
        in.waiting = &waiting;
        cs_r_step(&in, &rd);
        if (none && ended && msg->u.join.resume.generation && rdzvd_job_view(&W->jobs, "job"))
            cs_end_forgotten(c->a, msg->u.join.resume.generation);
        if (rd.rc < 0) {
            struct cs_msg *e;

            if (rd.rc == -EACCES) {
                e = cs_msg_new(M_EVENT);
                memset(&e->u.event, 0, sizeof(e->u.event));
                snprintf(e->u.event.type, sizeof(e->u.event.type), "put_aside");
                e->u.event.exit_code = RDZV_EXIT_PUT_ASIDE;
                snprintf(e->u.event.summary, sizeof(e->u.event.summary), "%s", rd.err);
            } else if (rd.told.type[0]) { /* its job ended: its outcome, as rdzvd's wire */
                e = cs_msg_new(M_EVENT);
                e->u.event = rd.told;
                cs_note_told(&rd.told);
            } else {
                e = cs_msg_new(M_ERROR);
                snprintf(e->u.error, sizeof(e->u.error), "%s", rd.err);
                e->old_held = cs_old_conn_held(c->a, msg->conn);
            }
            cs_send(msg->conn, false, e);
            cs_r_close(cs_peer_of(msg->conn));
        }
        return;
    }
    case M_HB: {
        struct cs_msg *r;

        hb.generation = msg->u.hb.gen;
        hb.n_progress = msg->u.hb.n;
        hb.has_loop_stall = false;
        hb.warning[0] = '\0';
        memset(&hb.wait, 0, sizeof(hb.wait));
        memcpy(hb.progress, msg->u.hb.p, msg->u.hb.n * sizeof(hb.progress[0]));
        in.kind = RDZVD_IN_HEARTBEAT;
        in.u.heartbeat = &hb;
        rdzvd_job_step(&W->h, &in, cs_clock(), &rd);
        if (cs_r_can_send(cs_peer_of(msg->conn))) { /* the answer first, as the wire does */
            r = cs_msg_new(M_HB_REPLY);
            r->u.hb.gen = rd.generation;
            r->u.hb.n = 0;
            cs_send(msg->conn, false, r);
        }
        rdzvd_job_advance(&rd);
        cs_after_ready(&rd);
        return;
    }
    case M_NCCL_ID:
        in.kind = RDZVD_IN_NCCL_ID;
        in.u.nccl_id.generation = msg->u.nccl_id.generation;
        in.u.nccl_id.msg = &msg->u.nccl_id;
        break;
    case M_WEXIT:
        in.kind = RDZVD_IN_WORKER_EXIT;
        in.u.worker_exit = &msg->u.wexit;
        break;
    case M_LEAVE:
        in.kind = RDZVD_IN_LEAVE;
        in.u.leave = &msg->u.leave;
        break;
    case M_READY:
        in.kind = RDZVD_IN_AGENT_READY;
        in.u.ready = &msg->u.ready;
        break;
    case M_CANCEL:
        in.kind = RDZVD_IN_CANCEL;
        in.u.cancel = &msg->u.cancel;
        break;
    case M_UNHEALTHY:
        in.kind = RDZVD_IN_UNHEALTHY;
        in.u.unhealthy = &msg->u.unhealthy;
        break;
    default:
        return;
    }
    if (!c->m) /* before JOIN: refused, the connection closed */
        return;
    if (cs_r_step(&in, &rd) < 0 && in.kind == RDZVD_IN_WORKER_EXIT) {
        struct cs_msg *e = cs_msg_new(M_ERROR);

        snprintf(e->u.error, sizeof(e->u.error), "%s", rd.err);
        cs_send(msg->conn, false, e);
        cs_r_close(cs_peer_of(msg->conn));
    }
}

/* Connection ci is lost (a fault): both ends learn it soon, what was in flight is lost. */
static void cs_conn_lose(int ci)
{
    struct cs_conn *c = &W->conns[ci];

    if (c->r_open && c->epoch == W->epoch && W->up) {
        c->r_open = false;
        cs_push(NOW + (uint64_t)cs_draw(1, 100),
                (struct cs_ev){.kind = E_GONE, .a = c->a, .arg = ci, .token = W->epoch});
    }
    if (c->a_open)
        cs_push(NOW + (uint64_t)cs_draw(1, 100), (struct cs_ev){.kind = E_LOST, .a = c->a,
                                                                 .arg = ci});
}

static void cs_r_gone(int ci, uint64_t epoch)
{
    struct cs_conn *c = &W->conns[ci];
    struct rdzvd_job_ready rd;

    if (epoch != W->epoch || !W->up || !c->m || c->r_closed)
        return;
    cs_r_step(&(struct rdzvd_job_input){.kind = RDZVD_IN_CLOSED, .member = c->m}, &rd);
    c->m = NULL;
}
