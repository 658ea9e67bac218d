/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-wire.c: the job machine's wire side and timers: decodes an agent's frames (after
 * HELLO) from its rdzvd_conn and feeds the job state machine (rdzvd-job-sm.h); implements the
 * machine's ops on top of rdzvd_conn and the server's listeners (proto/RENDEZVOUS.md);
 * and recruits hosted replicas from the agents (rdzvd-job-hosted.h). */
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
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/repl/rdzvd-replica.h"

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

static void conn_dismiss(void *peer, const struct rdzv_event *e)
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
    .dismiss = conn_dismiss,
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
        conn_dismiss(c, &e);
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
    struct rdzvd_job_input in = {.kind = RDZVD_IN_READY, .member = m};
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
    step(ud, &(struct rdzvd_job_input){.kind = RDZVD_IN_GONE, .member = member}, &rd);
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

/* -------------------------------------------------------------------------------------------- */
/* Hosted replicas, recruited from the agents (rdzvd-job-hosted.h). */

#define TRIED_MAX 64 /* hosts that failed a request, not asked again */
/* How many times a voter its agent saw exit is looked at again while it still seems to answer
 * (libraft's view lags by up to an election timeout); each look is two election timeouts. */
#define VOTERS_EXITED_LOOKS 4

struct cand {
    struct rdzv_list node;
    struct rdzvd_conn *c;
    char host[64]; /* the address its connection comes from */
};

struct rdzvd_voters {
    struct rdzvd_server *srv;
    const struct rdzvd_replica_ops *ops;
    unsigned target; /* --replicas */
    uint16_t port;   /* the leader's: the one a recruit listens on */
    struct rdzv_list cands;
    uv_timer_t timer;  /* the pending request's deadline */
    uv_timer_t kick;   /* work deferred out of libraft's callbacks, or a re-check */
    unsigned open;     /* timers not closed back */
    bool closing;
    /* The request in flight: to ask (a connection), with the id it is for. */
    struct rdzvd_conn *ask;
    unsigned ask_id;
    char ask_host[64];
    unsigned next_id;  /* past every id asked for (an id is never given twice) */
    bool changing;     /* a Raft change is under way */
    bool changed;      /* one ended well: tell the agents (from the kick) */
    unsigned promote;  /* added, to be made a voter (0: none) */
    bool check_lost;   /* a member was lost: look for a voter whose host is gone */
    unsigned suspect[RDZVD_REPLICAS_MAX * 2]; /* voters found unresponsive once, re-checked */
    unsigned nsuspect;
    /* Servers whose host's agent said they exited: removed without waiting for that host's
     * agents to go (they stay), once unresponsive at two looks. */
    unsigned exited[RDZVD_REPLICAS_MAX * 2];
    unsigned nexited, exited_looks;
    struct rdzvd_ratelimit exit_lines; /* "says replica N exited", from every agent together */
    char tried[TRIED_MAX][64];
    unsigned ntried;
};

/* The host part of "HOST:PORT" or "[V6]:PORT" into out. */
static void host_of(const char *ep, char *out, size_t len)
{
    uint16_t port;

    if (rdzv_parse_hostport(ep, out, len, &port) < 0)
        snprintf(out, len, "%.*s", (int)(len - 1), ep); /* not an address: matches no host */
}

static struct rdzvd_replica *leader_replica(struct rdzvd_voters *v)
{
    struct rdzvd_replica *rep = rdzvd_server_replica(v->srv, &v->ops);

    return rep && v->ops->role(rep) == RDZVD_ROLE_LEADER ? rep : NULL;
}

static struct cand *cand_find(struct rdzvd_voters *v, const struct rdzvd_conn *c)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *k = rdzv_container_of(pos, struct cand, node);

        if (k->c == c)
            return k;
    }
    return NULL;
}

static bool host_connected(struct rdzvd_voters *v, const char *host)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        if (strcmp(rdzv_container_of(pos, struct cand, node)->host, host) == 0)
            return true;
    }
    return false;
}

static bool host_tried(const struct rdzvd_voters *v, const char *host)
{
    for (unsigned i = 0; i < v->ntried; i++)
        if (strcmp(v->tried[i], host) == 0)
            return true;
    return false;
}

/* REPLICAS to one candidate (k) or, k NULL, to every one. */
static void send_replicas(struct rdzvd_voters *v, struct rdzvd_replica *rep, struct cand *k)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzv_replicas msg = {0};
    unsigned n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    struct rdzv_list *pos, *tmp;

    for (unsigned i = 0; i < n && i < RDZVD_REPLICAS_MAX * 2; i++)
        if (vs[i].voter && vs[i].endpoint[0] && msg.n < RDZV_REPLICAS_LIST_MAX)
            snprintf(msg.endpoint[msg.n++], sizeof(msg.endpoint[0]), "%s", vs[i].endpoint);
    if (msg.n == 0)
        return;
    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *c = rdzv_container_of(pos, struct cand, node);
        struct rdzv_buf *out;

        if (k && c != k)
            continue;
        out = rdzvd_conn_out(c->c);
        if (out && rdzv_msg_put_replicas(out, &msg) < 0)
            log_error("conn %" PRIu64 ": out of memory sending REPLICAS", rdzvd_conn_id(c->c));
    }
    rdzvd_conn_flush_pending(v->srv);
}

static void tick(struct rdzvd_voters *v);
static void kick_cb(uv_timer_t *t);

/* Run tick (and tell the agents of a change) on the loop's next turn, or after ms: never from
 * inside libraft (its callbacks) or a caller's state change. */
static void kick(struct rdzvd_voters *v, uint64_t ms)
{
    if (!v->closing)
        (void)uv_timer_start(&v->kick, kick_cb, ms, 0);
}

/* libraft's word on the change (called from inside libraft: only note it). */
static void change_done_cb(void *ud, int status)
{
    struct rdzvd_voters *v = ud;

    v->changing = false;
    if (v->closing) {
        if (v->open == 0)
            free(v);
        return;
    }
    if (status == 0) {
        v->changed = true;
        v->ntried = 0; /* a new configuration: hosts that failed may be asked again */
    } else {
        v->promote = 0; /* a stuck non-voter is removed by tick */
    }
    kick(v, 0);
}

static bool in_list(const unsigned *list, unsigned n, unsigned id)
{
    for (unsigned i = 0; i < n; i++)
        if (list[i] == id)
            return true;
    return false;
}

static bool suspected(const struct rdzvd_voters *v, unsigned id)
{
    return in_list(v->suspect, v->nsuspect, id);
}

/* After a member was lost: a voter (not this one) on a host from which no agent is connected
 * (or whose host's agent said it exited), and that has not answered the leader's heartbeats in
 * two looks an election timeout apart, is removed. Returns true when a change started or a
 * look is pending. */
static bool remove_lost(struct rdzvd_voters *v, struct rdzvd_replica *rep,
                        const struct rdzvd_voter *vs, unsigned n)
{
    bool pending = false;

    for (unsigned i = 0; i < n; i++) {
        char host[64];

        if (vs[i].self || !vs[i].voter)
            continue;
        host_of(vs[i].raft, host, sizeof(host));
        if (host_connected(v, host) && !in_list(v->exited, v->nexited, vs[i].id))
            continue;
        if (v->ops->responsive(rep, vs[i].id)) {
            /* One its agent saw exit answered within the last election timeout: look again
             * (a bounded number of times). */
            if (in_list(v->exited, v->nexited, vs[i].id) &&
                v->exited_looks < VOTERS_EXITED_LOOKS) {
                v->exited_looks++;
                pending = true;
            }
            continue;
        }
        if (!suspected(v, vs[i].id)) {
            if (v->nsuspect < RDZVD_REPLICAS_MAX * 2)
                v->suspect[v->nsuspect++] = vs[i].id;
            pending = true;
            continue;
        }
        log_warn("replication: replica %u (%s) answers no heartbeat and %s: removing it from "
                 "the configuration, to replace it",
                 vs[i].id, vs[i].endpoint,
                 in_list(v->exited, v->nexited, vs[i].id) ? "its host's agent saw it exit"
                                                          : "no agent is connected from its host");
        if (v->ops->change(rep, RDZVD_CHANGE_REMOVE, vs[i].id, NULL, change_done_cb, v) == 0)
            v->changing = true;
        return true; /* -EBUSY: tried again after the change under way */
    }
    if (pending)
        kick(v, 2 * RDZVD_REPL_ELECTION_MS);
    return pending;
}

static void ask_timer_cb(uv_timer_t *t);

/* Ask a candidate on a host with no voter to host one. */
static void recruit(struct rdzvd_voters *v, const struct rdzvd_voter *vs, unsigned n,
                    unsigned voters)
{
    struct rdzv_list *pos, *tmp;

    for (unsigned i = 0; i < n; i++)
        if (vs[i].id >= v->next_id)
            v->next_id = vs[i].id + 1;
    rdzv_list_for_each_safe(pos, tmp, &v->cands)
    {
        struct cand *k = rdzv_container_of(pos, struct cand, node);
        struct rdzv_replica q = {.id = v->next_id, .port = v->port, .replicas = v->target};
        struct rdzv_buf *out;
        bool taken = false;

        for (unsigned i = 0; i < n && !taken; i++) {
            char host[64];

            host_of(vs[i].raft, host, sizeof(host));
            taken = strcmp(host, k->host) == 0;
        }
        if (taken || host_tried(v, k->host) || rdzvd_conn_closing(k->c))
            continue;
        out = rdzvd_conn_out(k->c);
        if (!out || rdzv_msg_put_replica(out, &q) < 0)
            continue;
        v->ask = k->c;
        v->ask_id = v->next_id++;
        snprintf(v->ask_host, sizeof(v->ask_host), "%s", k->host);
        log_info("replication: %u of %u voters: asking the agent at %s to host replica %u",
                 voters, v->target, k->host, v->ask_id);
        (void)uv_timer_start(&v->timer, ask_timer_cb, RDZVD_VOTERS_ASK_MS, 0);
        rdzvd_conn_flush_pending(v->srv);
        return;
    }
}

static void tick(struct rdzvd_voters *v)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzvd_replica *rep;
    unsigned n, voters = 0;

    /* Replicas started by hand (no --replicas) are never recruited nor removed here. */
    if (v->closing || !v->target || v->ask || v->changing || !(rep = leader_replica(v)))
        return;
    n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    if (n > RDZVD_REPLICAS_MAX * 2)
        n = RDZVD_REPLICAS_MAX * 2;
    if (v->promote) {
        unsigned id = v->promote;

        v->promote = 0;
        if (v->ops->change(rep, RDZVD_CHANGE_PROMOTE, id, NULL, change_done_cb, v) == 0) {
            v->changing = true;
            return;
        }
    }
    /* A server that is no voter (a promotion given up, or left by a deposed leader) is removed:
     * its host is asked again. */
    for (unsigned i = 0; i < n; i++)
        if (!vs[i].voter && !vs[i].self) {
            log_warn("replication: replica %u (%s) is not voting: removing it", vs[i].id,
                     vs[i].endpoint);
            if (v->ops->change(rep, RDZVD_CHANGE_REMOVE, vs[i].id, NULL, change_done_cb, v) == 0)
                v->changing = true;
            return;
        }
    if (v->check_lost) {
        if (remove_lost(v, rep, vs, n))
            return;
        v->check_lost = false;
        v->nsuspect = 0;
        v->nexited = v->exited_looks = 0;
    }
    for (unsigned i = 0; i < n; i++)
        voters += vs[i].voter;
    if (voters < v->target)
        recruit(v, vs, n, voters);
}

static void kick_cb(uv_timer_t *t)
{
    struct rdzvd_voters *v = t->data;
    struct rdzvd_replica *rep;

    if (v->changed && (rep = leader_replica(v))) {
        v->changed = false;
        send_replicas(v, rep, NULL);
    }
    tick(v);
}

/* The request failed (an error, no answer, the agent gone): try another host. */
static void ask_failed(struct rdzvd_voters *v, const char *why)
{
    log_warn("replication: the agent at %s did not start replica %u: %s", v->ask_host, v->ask_id,
             why);
    if (v->ntried < TRIED_MAX)
        snprintf(v->tried[v->ntried++], sizeof(v->tried[0]), "%s", v->ask_host);
    v->ask = NULL;
    (void)uv_timer_stop(&v->timer);
    kick(v, 0);
}

static void ask_timer_cb(uv_timer_t *t)
{
    struct rdzvd_voters *v = t->data;

    if (v->ask)
        ask_failed(v, "no answer in time");
}

/* An agent says the replica it hosts exited (REPLICA {id, error}, unasked): when that server is
 * in the configuration on the agent's own host, it is checked as a lost host's voter is (and
 * removed once it answers no heartbeat), then replaced. Anything else is a late answer. */
static void replica_exited(struct rdzvd_voters *v, struct rdzvd_conn *c,
                           const struct rdzv_replica *a)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    struct rdzvd_replica *rep = leader_replica(v);
    struct cand *k = cand_find(v, c);
    uint64_t dropped = 0;
    unsigned n;

    if (!rep || !k || a->id <= 0)
        return;
    n = v->ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);
    for (unsigned i = 0; i < n && i < RDZVD_REPLICAS_MAX * 2; i++) {
        char host[64];

        if (vs[i].id != (unsigned)a->id || vs[i].self)
            continue;
        host_of(vs[i].raft, host, sizeof(host));
        if (strcmp(host, k->host) != 0)
            return; /* not its replica: nothing to believe */
        if (in_list(v->exited, v->nexited, vs[i].id))
            return; /* said before, being checked: once is enough (an agent that kept saying
                     * it made 5,432 lines in 60 s) */
        if (rdzvd_ratelimit_ok(&v->exit_lines, rdzv_now_ms(), &dropped))
            log_warn("replication: the agent at %s says replica %u exited (%s)%s", k->host,
                     vs[i].id, a->error, dropped ? " (more such lines dropped)" : "");
        if (v->nexited < RDZVD_REPLICAS_MAX * 2)
            v->exited[v->nexited++] = vs[i].id;
        v->check_lost = true;
        kick(v, 0);
        return;
    }
}

int rdzvd_voters_answer(struct rdzvd_voters *v, struct rdzvd_conn *c, const uint8_t *body,
                        uint32_t len, char *err, size_t errlen)
{
    struct rdzvd_replica *rep;
    struct rdzv_replica a;
    char host[64], raft[80], why[320];
    uint16_t port = 0;

    if (!v || !cand_find(v, c)) {
        snprintf(err, errlen, "REPLICA from an agent that was asked nothing");
        return -EPROTO;
    }
    if (rdzv_msg_parse_replica(body, len, &a, err, errlen) < 0)
        return -EBADMSG;
    if (a.failed && (c != v->ask || (unsigned)a.id != v->ask_id)) {
        replica_exited(v, c, &a);
        return 0;
    }
    if (c != v->ask || (unsigned)a.id != v->ask_id)
        return 0; /* an answer that came too late: the request was given up */
    if (a.failed || !a.endpoint[0]) {
        ask_failed(v, a.failed ? a.error : "no endpoint in its answer");
        return 0;
    }
    if (rdzv_parse_hostport(a.endpoint, host, sizeof(host), &port) < 0 ||
        strcmp(host, v->ask_host) != 0 || port != v->port) {
        snprintf(why, sizeof(why), "its endpoint %s is not its own address %s and port %u",
                 a.endpoint, v->ask_host, v->port);
        ask_failed(v, why);
        return 0;
    }
    rdzv_format_hostport(raft, sizeof(raft), host, rdzv_raft_port(port));
    v->ask = NULL;
    (void)uv_timer_stop(&v->timer);
    rep = leader_replica(v);
    if (!rep)
        return 0;
    log_info("replication: replica %u listens at %s: adding it", (unsigned)a.id, a.endpoint);
    if (v->ops->change(rep, RDZVD_CHANGE_ADD, (unsigned)a.id, raft, change_done_cb, v) == 0) {
        v->changing = true;
        v->promote = (unsigned)a.id;
    } else {
        kick(v, 0);
    }
    return 0;
}

void rdzvd_voters_joined(struct rdzvd_voters *v, struct rdzvd_conn *c, bool can_host)
{
    struct rdzvd_replica *rep;
    struct cand *k;

    if (!v || !can_host || cand_find(v, c))
        return;
    k = calloc(1, sizeof(*k));
    if (!k) {
        log_error("replication: out of memory noting an agent");
        return;
    }
    k->c = c;
    host_of(rdzvd_conn_peer(c), k->host, sizeof(k->host));
    rdzv_list_add_tail(&v->cands, &k->node);
    rep = leader_replica(v);
    if (rep)
        send_replicas(v, rep, k);
    kick(v, 0);
}

void rdzvd_voters_peer_down(struct rdzvd_voters *v, struct rdzvd_conn *c)
{
    struct cand *k = v ? cand_find(v, c) : NULL;

    if (!k)
        return;
    rdzv_list_del(&k->node);
    free(k);
    if (v->ask == c)
        ask_failed(v, "its connection closed");
}

void rdzvd_voters_member_lost(struct rdzvd_voters *v)
{
    if (!v)
        return;
    v->check_lost = true;
    kick(v, 0);
}

int rdzvd_voters_new(struct rdzvd_server *srv, struct rdzvd_voters **ret)
{
    const struct rdzvd_config *cfg = rdzvd_server_config(srv);
    struct rdzvd_voters *v;

    *ret = NULL;
    if (!cfg->peers)
        return 0;
    v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->srv = srv;
    v->target = cfg->replicas;
    v->port = cfg->port;
    v->next_id = 1;
    rdzv_list_init(&v->cands);
    if (uv_timer_init(rdzvd_server_loop(srv), &v->timer) < 0) {
        free(v);
        return -ENOMEM;
    }
    (void)uv_timer_init(rdzvd_server_loop(srv), &v->kick);
    v->timer.data = v->kick.data = v;
    v->open = 2;
    *ret = v;
    return 0;
}

static void voters_closed_cb(uv_handle_t *h)
{
    struct rdzvd_voters *v = h->data;

    if (--v->open == 0 && !v->changing) /* else when the change is done (the replica's close) */
        free(v);
}

void rdzvd_voters_close(struct rdzvd_voters *v)
{
    if (!v || v->closing)
        return;
    v->closing = true;
    while (!rdzv_list_empty(&v->cands)) {
        struct cand *k = rdzv_container_of(v->cands.next, struct cand, node);

        rdzv_list_del(&k->node);
        free(k);
    }
    v->ask = NULL;
    uv_close((uv_handle_t *)&v->timer, voters_closed_cb);
    uv_close((uv_handle_t *)&v->kick, voters_closed_cb);
}
