/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-wire.c: the job machine's wire side and timers: decodes an agent's frames (after
 * HELLO) from its rdzvd_conn and feeds the job state machine (rdzvd-job-sm.h); implements the
 * machine's ops on top of rdzvd_conn and the server's listeners (proto/RENDEZVOUS.md). The
 * hosted replicas it hands the agents' news to are rdzvd-job-hosted.c's. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/job/rdzvd-job-world.h"
#include "daemon/job/rdzvd-job.h"
#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "daemon/server/rdzvd-conn.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-status.h"
#include "daemon/job/rdzvd-job-hosted.h"
#include "daemon/job/rdzvd-job-abandon.h"
#include "daemon/server/rdzvd-server.h"
#include "common/rdzv-list.h"
#include "daemon/data/rdzvd-journal.h"

struct rdzvd_jobs {
    struct rdzvd_server *srv;   /* borrowed: the listeners, the counters for STATUS */
    struct rdzv_list list;      /* every job (struct rdzvd_job, the state machine's) */
    struct rdzvd_job_host host; /* built once: what each job needs of the server */
    struct rdzvd_job_steps steps;   /* the job machine's steps under way (host.steps) */
    uv_loop_t *loop;                /* the server's */
    struct rdzvd_job_timers timers; /* the machine's timers (host.timers) */
    struct jobs_clock *clock;       /* which runs them on libuv */
    struct rdzvd_ended_jobs ended; /* for status: jobs that ended (--keep-ended) */
    /* Without a job table (no --state-dir): where nodes' secrets' hashes are kept meanwhile. */
    struct rdzvd_store *secret_table;
    struct rdzvd_voters *voters;          /* a replica's hosted replicas; NULL: none */
    struct rdzvd_abandon *abandon;        /* --abandon-after; NULL: never */
    struct rebuild_run *rebuilding;       /* the job table's jobs being rebuilt; NULL: none */
};

/* ---- the machine's timers on libuv: one timer, due at the Ready's next deadline ---- */

/* Its own memory: closed at shutdown, it goes once libuv has closed both handles. */
struct jobs_clock {
    uv_timer_t timer; /* due when the machine's first timer is */
    uv_check_t reap;  /* at the end of a loop turn: the memory of the timers closed in it */
    struct rdzvd_jobs *jobs;
    unsigned open; /* handles not closed back */
    bool firing;   /* in clock_fired: libuv's timers pass is under way */
};

static void clock_fired(uv_timer_t *t);
static void clock_reap(uv_check_t *h);

/* After a step: the libuv timer follows the Ready's next deadline (due, on the step's clock; 0:
 * none), from libuv's time brought up to date (it keeps one a loop turn), and what the step
 * closed is freed once this turn is done (the Ready's reap). Armed from its own callback, it is
 * due 1 ms on at the soonest: libuv before 1.45 runs a timer armed due now in the same timers
 * pass, before the poll that a deadline's retry waits for (rdzvd_member_deadline). */
static void clock_arm(struct rdzvd_jobs *jobs, const struct rdzvd_job_ready *rd)
{
    struct jobs_clock *c = jobs->clock;
    uint64_t now, due = rd->next_deadline_ms;

    if (!c) /* shut down: what is left is freed with the registry */
        return;
    if (!due) {
        (void)uv_timer_stop(&c->timer);
    } else {
        uv_update_time(jobs->loop);
        now = rdzv_now_ms();
        (void)uv_timer_start(&c->timer, clock_fired, due > now ? due - now : c->firing ? 1 : 0,
                             0);
    }
    if (rd->reap)
        (void)uv_check_start(&c->reap, clock_reap);
}

static void clock_closed(uv_handle_t *h)
{
    struct jobs_clock *c = h->data;

    if (--c->open == 0)
        free(c);
}

static int clock_new(struct rdzvd_jobs *jobs)
{
    struct jobs_clock *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    (void)uv_timer_init(jobs->loop, &c->timer); /* cannot fail */
    (void)uv_check_init(jobs->loop, &c->reap);
    c->timer.data = c->reap.data = c;
    c->jobs = jobs;
    c->open = 2;
    jobs->clock = c;
    return 0;
}

/* At shutdown (before anything walks the loop closing its handles), or at free if it never
 * shut down. What closed timers held then waits for rdzvd_jobs_free. */
static void clock_close(struct rdzvd_jobs *jobs)
{
    struct jobs_clock *c = jobs->clock;

    if (!c)
        return;
    jobs->clock = NULL;
    uv_close((uv_handle_t *)&c->timer, clock_closed);
    uv_close((uv_handle_t *)&c->reap, clock_closed);
}

/* A step the abandonment timer took (rdzvd-job-abandon.h): its Ready's next deadline. */
static void jobs_stepped(void *ud, const struct rdzvd_job_ready *rd)
{
    clock_arm(ud, rd);
}

/* Both clocks, read for a step of the job machine, which reads none. */
static struct rdzvd_job_now clock_now(void)
{
    return (struct rdzvd_job_now){.ms = rdzv_now_ms(), .wall_s = rdzv_wall_s()};
}

/* One input into the job machine, its Ready carried out at once: for the inputs that owe their
 * connection no answer of the machine's. ready->rc. One that comes while a Ready is carried out
 * (a connection closing as the outbox writes to it) is queued, and stepped once that Ready is
 * done: 0. */
static int step(struct rdzvd_jobs *jobs, const struct rdzvd_job_input *in,
                struct rdzvd_job_ready *rd)
{
    if (in->member && rdzvd_job_input_later(&jobs->host, in, clock_now(), NULL, 0))
        return 0;
    rdzvd_job_step(&jobs->host, in, clock_now(), rd);
    rdzvd_job_advance(rd);
    clock_arm(jobs, rd);
    return rd->rc;
}

/* The timers due by now, each in a step of its own at the time read as it runs, in order; one
 * armed meanwhile waits for the next pass (a deadline's retry gets its poll first). */
static void clock_fired(uv_timer_t *t)
{
    struct jobs_clock *c = t->data;
    struct rdzvd_job_input tick = {.kind = RDZVD_IN_TICK, .u.until = rdzv_now_ms()};
    struct rdzvd_job_ready rd;

    c->firing = true;
    do
        step(c->jobs, &tick, &rd);
    while (rd.ticked);
    c->firing = false; /* closed meanwhile, c is freed only once its handles' close is done */
}

/* The end of the loop turn that closed timers: what held them goes. */
static void clock_reap(uv_check_t *h)
{
    struct jobs_clock *c = h->data;
    struct rdzvd_job_ready rd;

    (void)uv_check_stop(h);
    step(c->jobs, &(struct rdzvd_job_input){.kind = RDZVD_IN_REAP}, &rd);
}

/* ---- rebuilding the job table's jobs, a batch a loop turn ---- */

/* Rebuilt at the start or an election a batch at a time (rdzvd_jobs_rebuild_one), the
 * connections served between batches: with thousands of records rdzvd answers its first HELLO
 * at once, not after every job is in memory. A JOIN of a job still to come is
 * rebuilt by that JOIN, and the batch passes it. */
#define REBUILD_BATCH 64
struct rebuild_run {
    uv_idle_t idle;
    struct rdzvd_jobs *jobs;
    char (*ids)[RDZV_ID_MAX + 1];
    size_t n, next;
    uint64_t start_ms;
};

static void rebuild_closed(uv_handle_t *h)
{
    struct rebuild_run *rr = h->data;

    free(rr->ids);
    free(rr);
}

static void rebuild_stop(struct rdzvd_jobs *jobs)
{
    struct rebuild_run *rr = jobs->rebuilding;

    if (!rr)
        return;
    jobs->rebuilding = NULL;
    jobs->ended.n_pending = 0;
    uv_close((uv_handle_t *)&rr->idle, rebuild_closed);
}

static void rebuild_batch(uv_idle_t *idle)
{
    struct rebuild_run *rr = idle->data;
    struct rdzvd_jobs *jobs = rr->jobs;
    struct rdzvd_job_input in = {.kind = RDZVD_IN_REBUILD};
    struct rdzvd_job_ready rd;
    uint64_t waiting[REBUILD_BATCH];

    in.u.rebuild.ids = rr->ids + rr->next;
    in.u.rebuild.n = rr->n - rr->next < REBUILD_BATCH ? rr->n - rr->next : REBUILD_BATCH;
    for (size_t i = 0; i < in.u.rebuild.n; i++) /* a job rebuilt takes its note over */
        waiting[i] = rdzvd_waiting_jobs_peek(&jobs->ended, in.u.rebuild.ids[i]);
    in.waiting = waiting;
    rr->next += in.u.rebuild.n;
    step(jobs, &in, &rd);
    jobs->ended.n_pending = rr->n - rr->next;
    if (rr->next < rr->n)
        return;
    log_info("the job table's %zu jobs are back in %.3f s: those running wait for their agents, "
             "the others in their records",
             rr->n, (double)(rdzv_now_ms() - rr->start_ms) / 1000);
    rebuild_stop(jobs);
}

static void rebuild_start(struct rdzvd_jobs *jobs)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_REBUILD_BEGIN};
    struct rdzvd_job_ready rd;
    struct rebuild_run *rr;
    char(*ids)[RDZV_ID_MAX + 1];
    size_t n;

    rebuild_stop(jobs);
    if (step(jobs, &in, &rd) < 0 || rd.n_ids == 0) {
        free(rd.ids);
        return;
    }
    ids = rd.ids;
    n = rd.n_ids;
    if (!(rr = calloc(1, sizeof(*rr)))) {
        log_error("out of memory: the job table's jobs are rebuilt at once");
        in = (struct rdzvd_job_input){.kind = RDZVD_IN_REBUILD, .u.rebuild = {ids, n}};
        step(jobs, &in, &rd);
        free(ids);
        return;
    }
    (void)uv_idle_init(jobs->loop, &rr->idle); /* cannot fail */
    rr->idle.data = rr;
    rr->jobs = jobs;
    rr->ids = ids;
    rr->n = n;
    rr->start_ms = rdzv_now_ms();
    jobs->rebuilding = rr;
    jobs->ended.n_pending = n;
    (void)uv_idle_start(&rr->idle, rebuild_batch);
}

/* ---- the state machine's ops on rdzvd_conn (peer: struct rdzvd_conn *) ---- */

/* This process's incarnation (JOINED incarnation): drawn once, 1..RDZV_INCARNATION_MAX. */
static uint64_t rdzvd_incarnation(void)
{
    static uint64_t inc;

    while (!inc)
        inc = rdzv_random_u64() & (uint64_t)RDZV_INCARNATION_MAX;
    return inc;
}

static void conn_joined(void *peer, const char *run_id, int64_t waiting, bool spare, bool resumed,
                        uint64_t generation, bool inplace, const char *secret, const char *warning)
{
    struct rdzv_buf *out = rdzvd_conn_out(peer);
    struct rdzv_joined jd = {.waiting = waiting,
                             .spare = spare,
                             .resumed = resumed,
                             .generation = generation,
                             .recovery = "restart",
                             .incarnation = rdzvd_incarnation()};

    /* run_id came from a parsed JOIN, so it fits. */
    snprintf(jd.run_id, sizeof(jd.run_id), "%s", run_id);
    if (inplace)
        snprintf(jd.recovery, sizeof(jd.recovery), "inplace");
    snprintf(jd.secret, sizeof(jd.secret), "%s", secret);
    snprintf(jd.warning, sizeof(jd.warning), "%s", warning ? warning : "");
    if (out)
        (void)rdzv_msg_put_joined(out, &jd);
}

static void conn_round(void *peer, struct rdzv_round *rd)
{
    struct rdzv_buf *out = rdzvd_conn_out(peer);

    if (!out)
        return;
    /* The store's address as this agent reached us (right on multi-homed masters too), unless
     * node rank 0's agent hosts it (a replicated rdzvd). */
    if (!rd->master_addr[0] &&
        rdzvd_conn_local_addr(peer, rd->master_addr, sizeof(rd->master_addr)) < 0)
        snprintf(rd->master_addr, sizeof(rd->master_addr), "127.0.0.1");
    if (rdzv_msg_put_round(out, rd) < 0)
        log_error("conn %" PRIu64 ": out of memory sending ROUND", rdzvd_conn_id(peer));
}

static void conn_event(void *peer, const struct rdzv_event *e)
{
    struct rdzv_buf *out = rdzvd_conn_out(peer);

    if (out && rdzv_msg_put_event(out, e) < 0)
        log_error("conn %" PRIu64 ": out of memory sending an event", rdzvd_conn_id(peer));
}

static void conn_preflight(void *peer, const struct rdzv_preflight *p)
{
    struct rdzv_buf *out = rdzvd_conn_out(peer);

    if (out && rdzv_msg_put_preflight(out, p) < 0)
        log_error("conn %" PRIu64 ": out of memory sending PREFLIGHT", rdzvd_conn_id(peer));
}

static int conn_nccl_request(void *peer, uint64_t generation, int64_t count, bool store,
                             const char *store_allow)
{
    struct rdzv_buf *out = rdzvd_conn_out(peer);
    struct rdzv_nccl_request q = {
        .generation = generation, .count = (unsigned)count, .store = store};

    if (store_allow)
        snprintf(q.store_allow, sizeof(q.store_allow), "%s", store_allow);

    if (!out)
        return -EPIPE;
    return rdzv_msg_put_nccl_request(out, &q);
}

static void conn_close(void *peer, const char *reason)
{
    rdzvd_conn_close(peer, reason);
}

/* An EVENT that ends the connection: a node put aside, or an agent whose job ended. */
static void conn_put_aside(void *peer, const struct rdzv_event *e)
{
    conn_event(peer, e);
    log_warn("conn %" PRIu64 " (%s): %s", rdzvd_conn_id(peer), rdzvd_conn_peer(peer), e->summary);
    rdzvd_conn_close_after_flush(peer);
}

static void conn_bind(void *peer, struct rdzvd_member *m)
{
    rdzvd_conn_set_member(peer, m);
}

static size_t conn_unread(void *peer)
{
    return rdzvd_conn_unread(peer);
}

static void srv_flush(void *ud)
{
    struct rdzvd_jobs *jobs = ud;

    rdzvd_conn_flush_pending(jobs->srv);
}

/* A port another job's workers may reconnect to: the store port of a job waiting in its record,
 * or of a running generation rebuilt at start whose store opens when its agents are back. A new
 * store on it would take it from them: of 2,000 jobs made one after the other, 267 were given a
 * port an earlier one's record held, and those failed to reopen ("address already in use"). */
static bool port_reserved(const struct rdzvd_jobs *jobs, uint16_t port)
{
    return rdzvd_waiting_jobs_port(&jobs->ended, port) ||
           rdzvd_jobs_port_deferred((struct rdzv_list *)&jobs->list, port);
}

/* How many ports the kernel may pick that another job holds before rdzvd takes one anyway. */
#define STORE_PORT_TRIES 8

/* A port the kernel picks that no other job holds for a store of desc (state_name: its journal):
 * one another job holds is kept bound (so that the next pick is another) and let go once a free
 * one is found. 0 with *ret, or a negative errno. */
static int store_open_unreserved(struct rdzvd_jobs *jobs, const char *desc,
                                 const char *state_name, struct rdzvd_listener **ret)
{
    struct rdzvd_listener *l, *held[STORE_PORT_TRIES];
    unsigned nheld = 0;
    uint16_t port = 0;
    int r;

    while (nheld < STORE_PORT_TRIES) {
        if (rdzvd_listener_open(jobs->srv, desc, NULL, 0, &l) < 0)
            break; /* the open below says why */
        if (!port_reserved(jobs, rdzvd_listener_port(l))) {
            port = rdzvd_listener_port(l);
            rdzvd_listener_close(l, false);
            break;
        }
        held[nheld++] = l;
    }
    r = rdzvd_listener_open(jobs->srv, desc, state_name, port, ret);
    if (r == -EADDRINUSE && port) /* taken in between: any */
        r = rdzvd_listener_open(jobs->srv, desc, state_name, 0, ret);
    while (nheld)
        rdzvd_listener_close(held[--nheld], false);
    return r;
}

static int srv_store_open(void *ud, const char *desc, const char *state_name, uint16_t port,
                          void **store, uint16_t *port_out)
{
    struct rdzvd_jobs *jobs = ud;
    struct rdzvd_listener *l;
    int r = rdzvd_listener_open(jobs->srv, desc, state_name, port, &l);

    /* Any port, and the kernel picked one another job holds (rare): another. Its journal is
     * closed with it, at once, and reopened. */
    if (r == 0 && !port && port_reserved(jobs, rdzvd_listener_port(l))) {
        rdzvd_listener_close(l, false);
        r = store_open_unreserved(jobs, desc, state_name, &l);
    }
    if (r < 0)
        return r;
    *store = l;
    *port_out = rdzvd_listener_port(l);
    return 0;
}

static void srv_store_close(void *ud, void *store, bool drop)
{
    (void)ud;
    rdzvd_listener_close(store, drop);
}

/* A record of the job table, to its hook: the journal's write (on disk, fsynced unless --fsync
 * no, when this returns), or the replica's batch (every reply is held until it commits). A
 * journal that failed (persistence off) did not write it. */
static int srv_record(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                      const uint8_t *val, size_t vlen)
{
    struct rdzvd_jobs *jobs = ud;
    struct rdzvd_journal *jl = jobs->host.record_journal;

    rdzvd_store_pass_change(jobs->host.record_table, what, key, klen, val, vlen);
    return jl && rdzvd_journal_failed(jl) ? -EIO : 0;
}

static const struct rdzvd_job_ops conn_job_ops = {
    .joined = conn_joined,
    .round = conn_round,
    .event = conn_event,
    .nccl_request = conn_nccl_request,
    .close = conn_close,
    .put_aside = conn_put_aside,
    .preflight = conn_preflight,
    .bind = conn_bind,
    .unread = conn_unread,
    .flush = srv_flush,
    .store_open = srv_store_open,
    .store_close = srv_store_close,
    .record = srv_record,
};

/* ---- frames from agents ---- */

static void send_frame_error(struct rdzvd_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void send_frame_error(struct rdzvd_conn *c, const char *fmt, ...)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    log_warn("conn %" PRIu64 " (%s): refused: %s", rdzvd_conn_id(c), rdzvd_conn_peer(c), text);
    if (out)
        (void)rdzv_msg_put_error(out, "%s", text);
    rdzvd_conn_close_after_flush(c);
}

static int handle_join(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, struct rdzvd_member *m,
                       const uint8_t *body, uint32_t len)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = c, .member = m};
    struct rdzvd_job_ready rd;
    struct rdzv_join jn;
    uint64_t waiting;
    char err[512];
    int r;

    if (m) { /* refused before the message is read */
        step(jobs, &in, &rd);
        send_frame_error(c, "%s", rd.err);
        return rd.rc;
    }
    if (rdzv_msg_parse_join(body, len, &jn, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    in.u.join = &jn;
    waiting = rdzvd_waiting_jobs_peek(&jobs->ended, jn.run_id); /* its job takes it over */
    in.waiting = &waiting;
    r = step(jobs, &in, &rd);
    if (r == -EACCES) {
        /* A node the job put aside: told so as a member put aside is, not as a mistake. */
        struct rdzv_event e = {.type = "put_aside", .exit_code = RDZV_EXIT_PUT_ASIDE};

        snprintf(e.summary, sizeof(e.summary), "%s", rd.err);
        conn_put_aside(c, &e);
    } else if (r < 0 && rd.told.type[0]) {
        /* Its job ended: told its outcome as its members were, an EVENT (X1, X5), so that an
         * agent whose workers ran to their end exits as the job did, not as refused. */
        conn_put_aside(c, &rd.told);
    } else if (r < 0) {
        send_frame_error(c, "%s", rd.err);
    } else {
        rdzvd_voters_joined(jobs->voters, c, jn.host_replica);
    }
    return r;
}

static int handle_nccl_id(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, struct rdzvd_member *m,
                          const uint8_t *body, uint32_t len)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_NCCL_ID, .member = m};
    struct rdzvd_job_ready rd;
    struct rdzv_nccl_id n;
    char err[256];

    if (rdzv_msg_parse_nccl_id_generation(body, len, &in.u.nccl_id.generation, err,
                                          sizeof(err)) < 0)
        goto out_refuse;
    /* One that does not decode is refused only when its generation's ids are wanted (a stale
     * NCCL_ID is ignored whatever its ids say). */
    if (rdzv_msg_parse_nccl_id(body, len, &n, err, sizeof(err)) == 0)
        in.u.nccl_id.msg = &n;
    if (step(jobs, &in, &rd) == 0)
        return 0;

out_refuse:
    send_frame_error(c, "%s", err);
    return -EBADMSG;
}

static int handle_worker_exit(struct rdzvd_jobs *jobs, struct rdzvd_conn *c,
                              struct rdzvd_member *m, const uint8_t *body, uint32_t len)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_WORKER_EXIT, .member = m};
    struct rdzvd_job_ready rd;
    struct rdzv_worker_exit w;
    char err[256];

    if (rdzv_msg_parse_worker_exit(body, len, &w, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    in.u.worker_exit = &w;
    if (step(jobs, &in, &rd) < 0) {
        send_frame_error(c, "%s", rd.err);
        return -EBADMSG;
    }
    return 0;
}

static int handle_leave(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, struct rdzvd_member *m,
                        const uint8_t *body, uint32_t len)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_LEAVE, .member = m};
    struct rdzvd_job_ready rd;
    struct rdzv_leave l;
    char err[256];

    if (rdzv_msg_parse_leave(body, len, &l, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    in.u.leave = &l;
    step(jobs, &in, &rd);
    return 0;
}

static int handle_ready(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, struct rdzvd_member *m,
                        const uint8_t *body, uint32_t len)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_AGENT_READY, .member = m};
    struct rdzvd_job_ready rd;
    struct rdzv_ready msg;
    char err[256];

    if (rdzv_msg_parse_ready(body, len, &msg, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    in.u.ready = &msg;
    step(jobs, &in, &rd);
    return 0;
}

/* Any frame from the agent counts as a sign of life, a HEARTBEAT whatever its body (as before
 * its progress member existed): one that does not decode is answered, its progress dropped. */
static int handle_heartbeat(struct rdzvd_jobs *jobs, struct rdzvd_conn *c,
                            struct rdzvd_member *m, const uint8_t *body, uint32_t len)
{
    struct rdzv_heartbeat hb; /* 24 KiB with its progress: the loop thread's stack has room */
    struct rdzvd_job_input in = {.kind = RDZVD_IN_HEARTBEAT, .member = m, .u.heartbeat = &hb};
    struct rdzv_buf *out = rdzvd_conn_out(c);
    struct rdzvd_job_ready rd;
    char err[256];

    if (rdzv_msg_parse_heartbeat(body, len, &hb, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    rdzvd_job_step(&jobs->host, &in, clock_now(), &rd);
    hb.generation = rd.generation;
    hb.n_progress = 0;
    hb.wait = rd.wait; /* what its job waits for, if anything (1.15) */
    snprintf(hb.warning, sizeof(hb.warning), "%s", rd.warning); /* (1.17) */
    /* Answer, so that the agent notices a silent daemon too; before what the step sends (the
     * straggler check may put m aside). */
    if (out)
        (void)rdzv_msg_put_heartbeat(out, &hb);
    rdzvd_job_advance(&rd);
    clock_arm(jobs, &rd);
    return 0;
}

/* The STATUS body is not looked at (rdzvctl sends {}). */
static int handle_status(const struct rdzvd_jobs *jobs, struct rdzvd_conn *c)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);
    struct rdzv_status st;

    if (!out)
        return 0;
    if (rdzvd_jobs_status(jobs, &st) < 0) {
        log_error("out of memory answering STATUS");
        return 0;
    }
    /* Node ids only to whom proved the token: without one, anybody is asking. */
    if (!rdzvd_server_config(jobs->srv)->token)
        rdzv_status_hide_node_ids(&st);
    if (rdzv_status_put_reply(out, &st) < 0)
        log_error("out of memory answering STATUS");
    rdzv_status_free(&st);
    return 0;
}

/* What a peer that is not the operator is told when it asks for the operator's message op, in
 * the words of the rdzvctl command that sends it. */
static void not_operator(struct rdzvd_conn *c, uint8_t op, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "only the operator may %s: run rdzvctl with --admin-token-file FILE, the file "
             "rdzvd's --admin-token-file names (the agents' token, --token-file, does not allow "
             "it)",
             op == RDZV_MSG_RELEASE ? "take back a node put aside" : "cancel a job");
    log_warn("conn %" PRIu64 " (%s): refused %s: not the operator", rdzvd_conn_id(c),
             rdzvd_conn_peer(c), rdzv_msg_name(op));
}

/* RELEASE: the operator's (rdzvctl --admin-token-file; anybody without a token). */
static int handle_release(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, const uint8_t *body,
                          uint32_t len)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);
    struct rdzv_release_reply rep = {0};
    struct rdzv_release rq;
    char err[256];
    int r = -EPERM;

    if (rdzv_msg_parse_release(body, len, &rq, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    if (!rdzvd_conn_is_operator(c)) {
        not_operator(c, RDZV_MSG_RELEASE, rep.error, sizeof(rep.error));
        rep.denied = true;
    } else {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_RELEASE, .u.release = &rq};
        struct rdzvd_job_ready rd;

        r = step(jobs, &in, &rd);
        snprintf(rep.error, sizeof(rep.error), "%s", rd.err);
        if (r == 0)
            r = (int)rd.count;
    }
    rep.released = r < 0 ? 0 : r;
    if (out && rdzv_msg_put_release_reply(out, &rep) < 0)
        log_error("out of memory answering RELEASE");
    return 0;
}

/* CANCEL_JOB: the operator ends a job as cancelled (agents leave, they do not cancel). */
static int handle_cancel_job(struct rdzvd_jobs *jobs, struct rdzvd_conn *c, const uint8_t *body,
                             uint32_t len)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);
    struct rdzv_cancel_job_reply rep = {0};
    struct rdzv_cancel_job rq;
    char err[256];

    if (rdzv_msg_parse_cancel_job(body, len, &rq, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    if (!rdzvd_conn_is_operator(c)) {
        not_operator(c, RDZV_MSG_CANCEL_JOB, rep.error, sizeof(rep.error));
        rep.denied = true;
    } else {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_CANCEL_JOB, .u.cancel_job = &rq};
        struct rdzvd_job_ready rd;

        rep.cancelled = step(jobs, &in, &rd) == 0;
        snprintf(rep.error, sizeof(rep.error), "%s", rd.err);
    }
    if (out && rdzv_msg_put_cancel_job_reply(out, &rep) < 0)
        log_error("out of memory answering CANCEL_JOB");
    return 0;
}

int rdzvd_job_msg(void *ud, struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len)
{
    struct rdzvd_jobs *jobs = ud;
    /* The member is looked up through the connection, never taken from the message. */
    struct rdzvd_member *m = rdzvd_conn_get_member(c);

    if (op == RDZV_MSG_STATUS)
        return handle_status(jobs, c);
    if (op == RDZV_MSG_RELEASE)
        return handle_release(jobs, c, body, len);
    if (op == RDZV_MSG_CANCEL_JOB)
        return handle_cancel_job(jobs, c, body, len);
    if (m) {
        struct rdzvd_job_ready rd;

        step(jobs, &(struct rdzvd_job_input){.kind = RDZVD_IN_SEEN, .member = m}, &rd);
    }

    if (op == RDZV_MSG_JOIN)
        return handle_join(jobs, c, m, body, len);
    if (!m) {
        send_frame_error(c, "%s before JOIN", rdzv_msg_name(op));
        return -EPROTO;
    }
    switch (op) {
    case RDZV_MSG_HEARTBEAT:
        return handle_heartbeat(jobs, c, m, body, len);
    case RDZV_MSG_NCCL_ID:
        return handle_nccl_id(jobs, c, m, body, len);
    case RDZV_MSG_WORKER_EXIT:
        return handle_worker_exit(jobs, c, m, body, len);
    case RDZV_MSG_LEAVE:
        return handle_leave(jobs, c, m, body, len);
    case RDZV_MSG_READY:
        return handle_ready(jobs, c, m, body, len);
    case RDZV_MSG_CANCEL: {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_CANCEL, .member = m};
        struct rdzvd_job_ready rd;
        struct rdzv_cancel cn;
        char err[256];

        if (rdzv_msg_parse_cancel(body, len, &cn, err, sizeof(err)) < 0) {
            send_frame_error(c, "%s", err);
            return -EBADMSG;
        }
        in.u.cancel = &cn;
        step(jobs, &in, &rd);
        return 0;
    }
    case RDZV_MSG_UNHEALTHY: {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_UNHEALTHY, .member = m};
        struct rdzvd_job_ready rd;
        struct rdzv_unhealthy u;
        char err[256];

        if (rdzv_msg_parse_unhealthy(body, len, &u, err, sizeof(err)) < 0) {
            send_frame_error(c, "%s", err);
            return -EBADMSG;
        }
        in.u.unhealthy = &u;
        step(jobs, &in, &rd);
        return 0;
    }
    case RDZV_MSG_PREFLIGHT_REPORT: {
        struct rdzvd_job_input in = {.kind = RDZVD_IN_PREFLIGHT_REPORT, .member = m};
        struct rdzvd_job_ready rd;
        struct rdzv_preflight_report rep;
        char err[256];

        if (rdzv_msg_parse_preflight_report(body, len, &rep, err, sizeof(err)) < 0) {
            send_frame_error(c, "%s", err);
            return -EBADMSG;
        }
        in.u.preflight_report = &rep;
        step(jobs, &in, &rd);
        return 0;
    }
    case RDZV_MSG_REPLICA: {
        char err[256];
        int r = rdzvd_voters_answer(jobs->voters, c, body, len, err, sizeof(err));

        if (r < 0)
            send_frame_error(c, "%s", err);
        return r;
    }
    default:
        send_frame_error(c, "unexpected %s from an agent", rdzv_msg_name(op));
        return -EPROTO;
    }
}

void rdzvd_job_conn_closed(void *ud, struct rdzvd_conn *c, void *member)
{
    struct rdzvd_job_ready rd;

    (void)c;
    step(ud, &(struct rdzvd_job_input){.kind = RDZVD_IN_CLOSED, .member = member}, &rd);
}

bool rdzvd_jobs_all_ended(const struct rdzvd_jobs *jobs)
{
    return jobs && jobs->ended.n_ended > 0 && rdzvd_jobs_held(&jobs->host) == 0;
}

void rdzvd_jobs_peer_down(struct rdzvd_jobs *jobs, struct rdzvd_conn *c)
{
    if (jobs)
        rdzvd_voters_peer_down(jobs->voters, c);
}

static void jobs_member_lost(void *ud)
{
    struct rdzvd_jobs *jobs = ud;

    rdzvd_voters_member_lost(jobs->voters);
}

static void drop_all(struct rdzvd_jobs *jobs)
{
    struct rdzvd_job_ready rd;

    step(jobs, &(struct rdzvd_job_input){.kind = RDZVD_IN_DROP_ALL}, &rd);
}

void rdzvd_jobs_deposed(struct rdzvd_jobs *jobs)
{
    rebuild_stop(jobs);
    drop_all(jobs);
    rdzvd_waiting_jobs_clear(&jobs->ended); /* the next leader counts and abandons */
}

/* host keep_waiting, an effect of a step's Ready: noted (since_ms as the step found it in its
 * record, or recorded), and the abandonment timer follows. */
static void jobs_keep_waiting(struct rdzvd_ended_jobs *ended, const char *run_id,
                              uint64_t since_ms, uint16_t port)
{
    struct rdzvd_jobs *jobs = rdzv_container_of(ended, struct rdzvd_jobs, ended);

    rdzvd_waiting_jobs_add(ended, run_id, since_ms, port);
    rdzvd_abandon_arm(jobs->abandon);
}

void rdzvd_jobs_lead(struct rdzvd_jobs *jobs)
{
    rebuild_start(jobs);
}

void rdzvd_jobs_shutdown(void *ud)
{
    struct rdzvd_jobs *jobs = ud;

    rdzvd_voters_close(jobs->voters);
    jobs->voters = NULL;
    rdzvd_abandon_close(jobs->abandon);
    jobs->abandon = NULL;
    rebuild_stop(jobs);
    drop_all(jobs);
    clock_close(jobs);
}

int rdzvd_jobs_new(struct rdzvd_server *srv, struct rdzvd_jobs **ret)
{
    struct rdzvd_jobs *jobs = calloc(1, sizeof(*jobs));

    if (!jobs)
        return -ENOMEM;
    jobs->srv = srv;
    rdzv_list_init(&jobs->list);
    jobs->loop = rdzvd_server_loop(srv);
    rdzvd_job_timers_init(&jobs->timers);
    jobs->host = (struct rdzvd_job_host){
        .ops = &conn_job_ops,
        .ud = jobs,
        .steps = &jobs->steps,
        /* Replicas (--peers) keep no files of their own (a replica's would be stale after
         * another led the job): their generation stores are not journaled. */
        .state_dirfd = rdzvd_server_config(srv)->peers ? -1 : rdzvd_server_state_dirfd(srv),
        /* The records: replicated with the log, or journaled in --state-dir (one path). */
        .record_table = rdzvd_server_job_table(srv),
        .record_journal = rdzvd_server_job_journal(srv),
        /* A replica's generation stores are hosted by node rank 0's agent: they outlive it. */
        .agent_stores = rdzvd_server_config(srv)->peers != NULL,
        .store_allow = rdzvd_server_config(srv)->store_acl
                           ? rdzvd_server_config(srv)->store_acl->desc
                           : NULL,
        .jobs = &jobs->list,
        .timers = &jobs->timers,
        .quiet = rdzvd_server_config(srv)->embedded,
        .ended = &jobs->ended,
        .incarnation = rdzvd_incarnation(),
        .keep_ended = rdzvd_ended_jobs_add,
        .keep_end = rdzvd_ended_jobs_add_recorded,
        .keep_waiting = jobs_keep_waiting,
        .take_waiting = rdzvd_waiting_jobs_take,
        .max_jobs = rdzvd_server_config(srv)->max_jobs,
        .lost = jobs_member_lost,
        .lost_ud = jobs,
    };
    if (clock_new(jobs) < 0) {
        free(jobs);
        return -ENOMEM;
    }
    if (rdzvd_voters_new(srv, &jobs->voters) < 0) {
        clock_close(jobs);
        free(jobs);
        return -ENOMEM;
    }
    rdzvd_ended_jobs_init(&jobs->ended, rdzvd_server_config(srv)->keep_ended_ms,
                          rdzvd_server_config(srv)->keep_ended_max);
    /* Only where a record outlives its agents (--state-dir, --peers) is there one to abandon. */
    if (jobs->host.record_table) {
        jobs->ended.abandon_after_ms = rdzvd_server_config(srv)->abandon_after_ms;
        if (rdzvd_abandon_new(jobs->loop, &jobs->host, jobs->ended.abandon_after_ms,
                              jobs_stepped, jobs, &jobs->abandon) < 0) {
            rdzvd_voters_close(jobs->voters);
            clock_close(jobs);
            free(jobs);
            return -ENOMEM;
        }
    }
    rdzvd_job_host_keep_records(&jobs->host); /* its records wait for their step's Ready */
    jobs->host.secret_table = jobs->host.record_table;
    if (!jobs->host.secret_table &&
        rdzvd_store_new(&rdzvd_server_config(srv)->lim, NULL, &jobs->secret_table) == 0)
        jobs->host.secret_table = jobs->secret_table;
    {
        char err[160] = "HMAC-SHA256 failed", probe[RDZVD_SECRET_HASH_HEX + 1];

        /* Secrets are hashed with libcrypto (loaded when first used): without it, a node's
         * identity goes with its member, as before rdzvd kept it. */
        if (rdzv_auth_crypto_load(err, sizeof(err)) < 0 ||
            rdzvd_member_secret_hash("", probe) < 0) {
            log_warn("cannot hash members' secrets (%s): a node id is proven only while its "
                     "member is connected",
                     err);
            jobs->host.secret_table = NULL;
        }
    }
    *ret = jobs;
    return 0;
}

struct rdzvd_jobs *rdzvd_jobs_free(struct rdzvd_jobs *jobs)
{
    struct rdzvd_job_ready rd;

    if (jobs) {
        rdzv_assert(rdzv_list_empty(&jobs->list));
        rdzvd_voters_close(jobs->voters); /* the server never stopped: its timer closes later */
        rdzvd_abandon_close(jobs->abandon);
        rebuild_stop(jobs);
        clock_close(jobs);
        /* the jobs are gone, the loop has run: what held their timers goes */
        step(jobs, &(struct rdzvd_job_input){.kind = RDZVD_IN_REAP}, &rd);
        rdzvd_ended_jobs_free(&jobs->ended);
        rdzvd_store_free(jobs->secret_table);
    }
    free(jobs);
    return NULL;
}

int rdzvd_jobs_status(const struct rdzvd_jobs *jobs, struct rdzv_status *ret)
{
    return rdzvd_jobs_status_sel(jobs, NULL, ret);
}

int rdzvd_jobs_status_sel(const struct rdzvd_jobs *jobs, struct rdzvd_status_sel *sel,
                          struct rdzv_status *ret)
{
    struct rdzvd_job_now now = clock_now(); /* the status view reads no clock */
    struct rdzvd_server_info info;
    int r;

    rdzvd_server_info(jobs->srv, &info);
    r = rdzvd_status_fill(&info, &jobs->list, &jobs->steps.counts, &jobs->ended, sel, now, ret);
    if (r == 0 && jobs->host.max_jobs) {
        ret->jobs_held = (int64_t)rdzvd_jobs_held(&jobs->host);
        ret->jobs_waiting = (int64_t)jobs->ended.n_waiting;
        ret->jobs_limit = (int64_t)jobs->host.max_jobs;
    }
    /* The jobs waiting for their nodes (their records kept): in the full status only, the
     * pages' selections list jobs in memory. */
    if (r == 0 && !sel &&
        (r = rdzvd_status_add_waiting(ret, jobs->host.record_table, &jobs->list, &jobs->ended,
                                      info.start_ms, now)) < 0)
        rdzv_status_free(ret);
    return r;
}
