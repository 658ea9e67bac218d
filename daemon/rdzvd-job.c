/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job.c: rendezvous jobs. A job is keyed by run_id; agents JOIN it, a round closes at max
 * ready agents or last_call_ms after min, ranks are assigned, the node-rank-0 agent supplies NCCL
 * ids, and every member gets its ROUND with the address of the generation's own store. A failed
 * worker or a lost node moves the whole job to a new generation (within the job-wide restart
 * budget); agents beyond max wait as spares; a restarted daemon rebuilds running jobs from the
 * agents that reconnect (proto/RENDEZVOUS.md). */
#include "rdzvd-job.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/rdzv-buf.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "../proto/rdzv-frame.h"
#include "../proto/rdzv-msg.h"
#include "rdzvd-conn.h"
#include "rdzvd-job-record.h"
#include "rdzvd-server.h"
#include "rdzvd-store.h"

#define NCCL_ID_TIMEOUT_MS 60000
#define INIT_GRACE_FACTOR 3
#define JOB_EVENTS                                                                                 \
    16 /* recent events kept per job for status */ /* heartbeat grace after a ROUND, while workers \
                                                      start: x timeout */

enum job_state {
    JOB_FORMING,  /* taking JOINs / READYs for the next round */
    JOB_NCCL,     /* round closed, waiting for node rank 0's NCCL ids */
    JOB_RUNNING,  /* ROUND sent; workers run */
    JOB_STOPPING, /* restart decided: waiting for the members' READY */
    JOB_ENDED,    /* outcome sent; waiting for agents to go */
    _JOB_STATE_MAX,
};

static const char *const job_state_names[_JOB_STATE_MAX] = {"forming", "nccl", "running",
                                                            "stopping", "ended"};

enum job_timer { T_LAST_CALL, T_JOIN, T_NCCL, T_REBUILD };

struct member {
    struct rdzv_list node;  /* in job->members, join order */
    struct member *id_next; /* chain in job->by_id */
    struct job *job;
    struct rdzvd_conn *conn;
    struct rdzv_join join;
    uv_timer_t hb_timer; /* heartbeat deadline */
    bool hb_rechecked;   /* the deadline passed with input unread: one more loop turn given */
    int64_t node_rank;   /* in the current generation; -1 when not in it */
    int64_t prev_rank;   /* in the generation before (kept where possible), -1: none */
    int64_t rank_offset;
    bool ready;            /* no workers running: may be put in the next round */
    uint64_t stopping_gen; /* READY for this generation makes it ready */
    bool left_ok;          /* LEAVE succeeded received for the current generation */
    bool placed;           /* scratch for close_round() */
    uint64_t joined_ms;
    uint64_t last_seen_ms; /* last message from the agent */
    int64_t failures;      /* worker failures reported from this node */
};

struct job {
    struct rdzv_list node; /* in srv->jobs */
    struct rdzvd_server *srv;
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts, last_call_ms, hb_timeout_ms, join_timeout_ms;
    bool scale_up_now;
    enum job_state state;
    uint64_t generation;
    int64_t restart_count;
    struct rdzv_list members;
    int64_t nmembers;
    int64_t nin_round;       /* members with node_rank >= 0 */
    int64_t nready;          /* members with ready set */
    struct member **by_id;   /* node_id hash (chained), id_buckets entries: duplicate check */
    struct member **by_req;  /* max entries: the member that asked for each node rank */
    struct member **by_rank; /* max entries: the member holding each rank of the generation */
    size_t id_buckets;       /* power of two */
    uint64_t id_seed;
    uv_timer_t timer; /* last call, NCCL id timeout, join timeout, rebuild window */
    bool timer_armed;
    enum job_timer timer_kind;
    bool rebuilt;                 /* recreated from reconnecting agents after a daemon restart */
    struct rdzvd_listener *store; /* this generation's TCPStore listener */
    struct rdzv_round round;      /* template: generation, sizes, ids */
    struct rdzv_event outcome;
    char last_cause[RDZV_SUMMARY_MAX + 1]; /* why the last restart happened */
    uint64_t created_ms;
    struct {
        double time; /* unix seconds */
        char text[200];
    } events[JOB_EVENTS]; /* ring, for status */
    unsigned nevents;     /* total recorded; the newest is events[(nevents - 1) % JOB_EVENTS] */
};

/* Record a status event of job j, and log it at info (warn when warn) with the job's context. */
static void job_note(struct job *j, bool warn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void job_note(struct job *j, bool warn, const char *fmt, ...)
{
    unsigned i = j->nevents++ % JOB_EVENTS;
    struct timespec ts;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    j->events[i].time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    va_start(ap, fmt);
    vsnprintf(j->events[i].text, sizeof(j->events[i].text), fmt, ap);
    va_end(ap);
    rdzv_utf8_trim(j->events[i].text);
    if (warn)
        log_warn("job=%s gen=%" PRIu64 " %s", j->run_id, j->generation, j->events[i].text);
    else
        log_info("job=%s gen=%" PRIu64 " %s", j->run_id, j->generation, j->events[i].text);
}

static struct member *member_by_rank(struct job *j, int64_t rank)
{
    return rank >= 0 && rank < j->max ? j->by_rank[rank] : NULL;
}

/* Take m out of the generation (node_rank -1). */
static void member_unrank(struct member *m)
{
    struct job *j = m->job;

    if (m->node_rank < 0)
        return;
    if (m->node_rank < j->max && j->by_rank[m->node_rank] == m)
        j->by_rank[m->node_rank] = NULL;
    m->node_rank = -1;
    j->nin_round--;
}

static void member_set_rank(struct member *m, int64_t rank)
{
    struct job *j = m->job;

    member_unrank(m);
    m->node_rank = rank;
    j->by_rank[rank] = m;
    j->nin_round++;
}

static void job_set_state(struct job *j, enum job_state st)
{
    log_debug("job %s: %s -> %s", j->run_id, job_state_names[j->state], job_state_names[st]);
    j->state = st;
}

static struct job *job_find(struct rdzvd_server *srv, const char *run_id)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &srv->jobs)
    {
        struct job *j = rdzv_container_of(pos, struct job, node);

        if (strcmp(j->run_id, run_id) == 0)
            return j;
    }
    return NULL;
}

#define for_each_member(j, m, pos, tmp)                                                            \
    rdzv_list_for_each_safe(                                                                       \
        pos, tmp, &(j)->members) if (((m) = rdzv_container_of(pos, struct member, node)), 1)

static void job_timer_close_cb(uv_handle_t *h)
{
    struct job *j = h->data;

    free(j->by_id);
    free(j->by_req);
    free(j->by_rank);
    free(j);
}

/* The generation's store goes; its journal (--state-dir) too, unless rdzvd is shutting down:
 * then the agents come back to the next rdzvd, which reopens it with its keys. */
static void job_close_store(struct job *j)
{
    if (j->store) {
        rdzvd_listener_close(j->store, !j->srv->stopping);
        j->store = NULL;
    }
}

/* The journal name of generation gen's store: "job-<hash of run_id>-gen-<gen>". */
static void job_state_name(const struct job *j, uint64_t gen, char *buf, size_t len)
{
    snprintf(buf, len, "job-%016" PRIx64 "-gen-%" PRIu64,
             rdzv_hash64(0x72647a76, j->run_id, strlen(j->run_id)), gen);
}

/* --state-dir: record the job's generation and restart count, so that a restarted rdzvd
 * rebuilds it instead of starting it over. running: the generation's workers run (ROUND sent),
 * a restarted rdzvd waits for their agents before it places anyone. Once per generation. */
static void job_save(struct job *j, bool running)
{
    struct rdzvd_job_record rec = {.min = j->min,
                                   .max = j->max,
                                   .max_restarts = j->max_restarts,
                                   .generation = j->generation,
                                   .restart_count = j->restart_count,
                                   .running = running};
    int r;

    if (j->srv->state_dirfd < 0)
        return;
    memcpy(rec.run_id, j->run_id, sizeof(rec.run_id));
    if (running) {
        rec.nnodes = j->round.nnodes;
        rec.world_size = j->round.world_size;
        rec.store_port = j->store ? j->store->port : 0;
    }
    r = rdzvd_job_record_save(j->srv->state_dirfd, &rec);
    if (r < 0)
        log_warn_errno(r, "job=%s gen=%" PRIu64 " cannot record the job in --state-dir", j->run_id,
                       j->generation);
}

/* The job is over (or gone while rdzvd runs on): nothing to rebuild after a restart. */
static void job_forget(struct job *j)
{
    int r;

    if (j->srv->state_dirfd < 0)
        return;
    r = rdzvd_job_record_drop(j->srv->state_dirfd, j->run_id);
    if (r < 0)
        log_warn_errno(r, "job=%s cannot delete its record in --state-dir", j->run_id);
}

/* Remove a job with no members left. */
static void job_free(struct job *j)
{
    job_note(j, false, "removed (generation %" PRIu64 ")", j->generation);
    if (!j->srv->stopping)
        job_forget(j);
    rdzv_list_del(&j->node);
    job_close_store(j);
    uv_close((uv_handle_t *)&j->timer, job_timer_close_cb);
}

static void job_timer_stop(struct job *j)
{
    if (j->timer_armed) {
        uv_timer_stop(&j->timer);
        j->timer_armed = false;
    }
}

static void job_timer_cb(uv_timer_t *t);

static void job_timer_start(struct job *j, enum job_timer kind, uint64_t ms)
{
    uv_timer_start(&j->timer, job_timer_cb, ms, 0);
    j->timer_armed = true;
    j->timer_kind = kind;
}

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

static void member_send_event(struct member *m, const struct rdzv_event *e)
{
    struct rdzv_buf *out;

    if (!m->conn || !(out = rdzvd_conn_out(m->conn)))
        return;
    if (rdzv_msg_put_event(out, e) < 0)
        log_error("job %s: out of memory sending an event", m->job->run_id);
}

/* The job is over: tell every member how it ended. */
static void job_end(struct job *j, const char *type, int64_t exit_code, const char *summary)
{
    struct rdzv_list *pos, *tmp;
    struct member *m;

    if (j->state == JOB_ENDED)
        return;
    job_timer_stop(j);
    snprintf(j->outcome.type, sizeof(j->outcome.type), "%s", type);
    j->outcome.generation = j->generation;
    j->outcome.exit_code = exit_code;
    snprintf(j->outcome.summary, sizeof(j->outcome.summary), "%s", summary);
    job_set_state(j, JOB_ENDED);
    job_forget(j);
    if (exit_code == 0)
        job_note(j, false, "generation %" PRIu64 " succeeded", j->generation);
    else
        job_note(j, true, "generation %" PRIu64 " failed (exit code %" PRId64 "): %s",
                 j->generation, exit_code, summary);
    for_each_member(j, m, pos, tmp) member_send_event(m, &j->outcome);
    rdzvd_conn_flush_pending(j->srv);
}

/* ---- heartbeats ---- */

static void member_lost(struct member *m, const char *why);
static void job_check_all_left(struct job *j);

static void member_hb_cb(uv_timer_t *t)
{
    struct member *m = t->data;
    char why[RDZV_HOST_MAX + 128];

    /* libuv runs due timers before it polls: after a stall (a SIGSTOPped or starved daemon)
     * the heartbeat that keeps this member may be waiting in the socket. Give it one turn of
     * the loop, whose poll reads it and re-arms this timer; a member whose input is still
     * unread after that (not a heartbeat, or reading paused) is lost. 1 ms, not 0: libuv
     * would run a 0 ms timer again in this same pass over the due timers, before any poll. */
    if (!m->hb_rechecked && m->conn && rdzvd_conn_unread(m->conn) > 0) {
        m->hb_rechecked = true;
        uv_timer_start(&m->hb_timer, member_hb_cb, 1, 0);
        return;
    }
    snprintf(why, sizeof(why), "sent no heartbeat for %.1f s",
             (double)m->job->hb_timeout_ms / 1000);
    member_lost(m, why);
}

static void member_hb_arm(struct member *m, uint64_t ms)
{
    m->hb_rechecked = false;
    uv_timer_start(&m->hb_timer, member_hb_cb, ms, 0);
}

/* ---- rounds ---- */

static void send_rounds(struct job *j)
{
    struct rdzv_list *pos, *tmp;
    struct member *m;

    job_set_state(j, JOB_RUNNING);
    job_save(j, true);
    job_note(j, false,
             "generation %" PRIu64 " formed: %" PRId64 " nodes, world size %" PRId64
             ", store on port %u, %u NCCL id(s), restart %" PRId64 " of %" PRId64,
             j->generation, j->round.nnodes, j->round.world_size, j->store->port, j->round.n_ids,
             j->restart_count, j->max_restarts);
    for_each_member(j, m, pos, tmp)
    {
        struct rdzv_round *rd = &j->round;
        struct rdzv_buf *out;

        if (m->node_rank < 0 || !m->conn || !(out = rdzvd_conn_out(m->conn)))
            continue;
        rd->node_rank = m->node_rank;
        rd->rank_offset = m->rank_offset;
        /* The store's address as this agent reached us: right on multi-homed masters too. */
        if (rdzvd_conn_local_addr(m->conn, rd->master_addr, sizeof(rd->master_addr)) < 0)
            snprintf(rd->master_addr, sizeof(rd->master_addr), "127.0.0.1");
        rd->master_port = j->store->port;
        if (rdzv_msg_put_round(out, rd) < 0)
            log_error("job %s: out of memory sending ROUND", j->run_id);
        /* Workers are starting: a longer heartbeat grace until the next heartbeat. */
        member_hb_arm(m, (uint64_t)j->hb_timeout_ms * INIT_GRACE_FACTOR);
    }
    rdzvd_conn_flush_pending(j->srv);
}

static struct member *rank0_member(struct job *j)
{
    return member_by_rank(j, 0);
}

/* Every change of m->ready goes through here: j->nready is kept exact (O(1) per join). */
static void member_set_ready(struct member *m, bool ready)
{
    if (m->ready != ready)
        m->job->nready += ready ? 1 : -1;
    m->ready = ready;
}

static void job_fail_nodes(struct job *j, int64_t have)
{
    char why[RDZV_SUMMARY_MAX + 256];

    snprintf(why, sizeof(why),
             "only %" PRId64 " of the %" PRId64 " nodes the job needs (--nnodes "
             "%" PRId64 ":%" PRId64 ") were there within the join timeout (%.0f s)%s%s",
             have, j->min, j->min, j->max, (double)j->join_timeout_ms / 1000,
             j->last_cause[0] ? "; " : "", j->last_cause);
    job_end(j, "failed", 1, why);
}

/* Close the round over the ready members: previous node ranks kept where possible, then
 * requested ranks, then join order; compacted to 0..n-1; spares beyond max wait. Opens the
 * generation's store and asks for NCCL ids. */
static void close_round(struct job *j)
{
    struct member **slots = calloc((size_t)j->max, sizeof(*slots));
    struct rdzv_list *pos, *tmp;
    struct member *m;
    int64_t next = 0, rank = 0, offset = 0, want_ids = 0, taken = 0;
    char desc[64], sname[64];
    int r;

    job_timer_stop(j);
    if (!slots) {
        job_end(j, "failed", 1, "rdzvd ran out of memory forming the round");
        return;
    }
    /* Previous ranks first, then asked-for ranks, then free slots in join order. */
    for (int pass = 0; pass < 3; pass++)
        for_each_member(j, m, pos, tmp)
        {
            int64_t want = pass == 0 ? m->prev_rank : pass == 1 ? m->join.node_rank : -1;

            if (!m->ready || m->placed || taken >= j->max)
                continue;
            if (pass < 2 && (want < 0 || want >= j->max || slots[want]))
                continue;
            if (pass == 2) {
                while (slots[next])
                    next++;
                want = next;
            }
            slots[want] = m;
            m->placed = true;
            taken++;
        }
    for (int64_t i = 0; i < j->max; i++) {
        if (!(m = slots[i]))
            continue;
        m->placed = false;
        member_set_rank(m, rank++);
        m->prev_rank = m->node_rank;
        m->rank_offset = offset;
        member_set_ready(m, false);
        m->left_ok = false;
        offset += m->join.nproc;
        if (m->join.nccl != RDZV_NCCL_OFF && m->join.nccl_ids > want_ids)
            want_ids = m->join.nccl_ids;
    }
    free(slots);

    j->generation++;
    memset(&j->round, 0, sizeof(j->round));
    j->round.generation = j->generation;
    j->round.nnodes = rank;
    j->round.world_size = offset;
    j->round.restart_count = j->restart_count;
    j->round.max_restarts = j->max_restarts;
    if (j->nmembers > rank)
        job_note(j, false, "%" PRId64 " spare node(s) wait for a place", j->nmembers - rank);

    job_close_store(j);
    snprintf(desc, sizeof(desc), "job %.24s gen %" PRIu64, j->run_id, j->generation);
    job_state_name(j, j->generation, sname, sizeof(sname));
    /* A fresh store: never what an earlier use of this generation number left on disk (a round
     * formed but never sent before rdzvd died, or an earlier job of the same run_id). */
    if (j->srv->state_dirfd >= 0 &&
        (r = rdzvd_job_record_drop_journal(j->srv->state_dirfd, sname)) < 0)
        log_warn_errno(r, "job=%s cannot delete the stale journal %s", j->run_id, sname);
    r = rdzvd_listener_open(j->srv, desc, sname, 0, &j->store);
    if (r < 0) {
        char why[128];

        snprintf(why, sizeof(why), "rdzvd could not open the job's store: %s", uv_strerror(r));
        job_end(j, "failed", 1, why);
        return;
    }
    if (want_ids > 0) {
        struct member *m0 = rank0_member(j);
        struct rdzv_buf *out = m0 && m0->conn ? rdzvd_conn_out(m0->conn) : NULL;

        job_set_state(j, JOB_NCCL);
        if (!out || rdzv_msg_put(out, RDZV_MSG_NCCL_REQUEST,
                                 json_pack("{s:I, s:I}", "generation", (json_int_t)j->generation,
                                           "count", (json_int_t)want_ids)) < 0) {
            job_end(j, "failed", 1, "could not ask node rank 0 for the NCCL id");
            return;
        }
        job_timer_start(j, T_NCCL, NCCL_ID_TIMEOUT_MS);
        rdzvd_conn_flush_pending(j->srv);
        return;
    }
    send_rounds(j);
}

/* In FORMING: close the round if it is time, else make sure the right timer runs. After a
 * restart (generation > 0) the round closes as soon as every member is ready and there are
 * enough of them; the first round waits for max, or last call after min. */
static void job_try_close(struct job *j)
{
    int64_t ready = j->nready;

    if (j->state != JOB_FORMING)
        return;
    if (ready >= j->max || (j->generation > 0 && ready == j->nmembers && ready >= j->min)) {
        close_round(j);
        return;
    }
    if (ready >= j->min) {
        if (!j->timer_armed || j->timer_kind != T_LAST_CALL)
            job_timer_start(j, T_LAST_CALL, (uint64_t)j->last_call_ms);
        return;
    }
    /* Below min: the join timeout runs (from when the job was created or fell below min). */
    if ((!j->timer_armed || j->timer_kind != T_JOIN) && j->join_timeout_ms > 0)
        job_timer_start(j, T_JOIN, (uint64_t)j->join_timeout_ms);
    else if (j->timer_armed && j->timer_kind != T_JOIN)
        job_timer_stop(j);
}

/* Every member of the stopped generation is ready: form the next one. */
static void job_check_stopped(struct job *j)
{
    struct rdzv_list *pos, *tmp;
    struct member *m;

    if (j->state != JOB_STOPPING)
        return;
    if (j->nready < j->nmembers)
        return;
    job_close_store(j);
    for_each_member(j, m, pos, tmp) member_unrank(m);
    job_set_state(j, JOB_FORMING);
    job_timer_stop(j);
    job_try_close(j);
}

/* Stop the current generation everywhere and form a new one. counted: a failure (uses the
 * restart budget); otherwise a membership change (scale up). exit_code/summary: the root cause. */
static void job_restart(struct job *j, bool counted, int64_t exit_code, const char *summary)
{
    struct rdzv_event e = {.type = "restart"};
    struct rdzv_list *pos, *tmp;
    struct member *m;

    if (j->state == JOB_ENDED || j->state == JOB_STOPPING)
        return;
    if (counted && j->restart_count >= j->max_restarts) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "%s; restart budget exhausted (%" PRId64 " of %" PRId64 " restarts used)", summary,
                 j->restart_count, j->max_restarts);
        job_end(j, "failed", exit_code ? exit_code : 1, why);
        return;
    }
    if (counted)
        j->restart_count++;
    job_save(j, false);
    snprintf(j->last_cause, sizeof(j->last_cause), "%s", summary);
    job_timer_stop(j);
    e.generation = j->generation;
    e.exit_code = exit_code;
    snprintf(e.summary, sizeof(e.summary), "%s", summary);
    job_note(j, true,
             "restarting generation %" PRIu64 " (restart %" PRId64 " of %" PRId64 "%s): %s",
             j->generation, j->restart_count, j->max_restarts,
             counted ? "" : ", not counted: scale-up", summary);
    job_set_state(j, JOB_STOPPING);
    for_each_member(j, m, pos, tmp)
    {
        if (m->node_rank < 0)
            continue;
        m->stopping_gen = j->generation;
        member_send_event(m, &e);
    }
    rdzvd_conn_flush_pending(j->srv);
    job_check_stopped(j);
}

static void job_timer_cb(uv_timer_t *t)
{
    struct job *j = t->data;

    j->timer_armed = false;
    if (j->state == JOB_FORMING && (j->timer_kind == T_LAST_CALL || j->timer_kind == T_JOIN)) {
        int64_t ready = j->nready;

        if (ready >= j->min) {
            job_note(j, false, "last call over with %" PRId64 " of %" PRId64 "..%" PRId64 " nodes",
                     ready, j->min, j->max);
            close_round(j);
        } else {
            job_fail_nodes(j, ready);
        }
    } else if (j->state == JOB_NCCL && j->timer_kind == T_NCCL) {
        struct member *m0 = rank0_member(j);
        char why[RDZV_HOST_MAX + 128];

        snprintf(why, sizeof(why), "node rank 0 (%s) sent no NCCL id within %d s",
                 m0 ? m0->join.host : "?", NCCL_ID_TIMEOUT_MS / 1000);
        job_end(j, "failed", 1, why);
    } else if (j->state == JOB_RUNNING && j->timer_kind == T_REBUILD &&
               j->nin_round < j->round.nnodes) {
        char why[256];

        snprintf(why, sizeof(why),
                 "root cause: %" PRId64 " of %" PRId64 " nodes of generation %" PRIu64
                 " did not come back after rdzvd restarted",
                 j->round.nnodes - j->nin_round, j->round.nnodes, j->generation);
        job_restart(j, true, 1, why);
    }
}

static struct job *job_new(struct rdzvd_server *srv, const struct rdzv_join *jn)
{
    struct job *j = calloc(1, sizeof(*j));
    int r;

    if (!j)
        return NULL;
    j->id_buckets = 64;
    j->by_id = calloc(j->id_buckets, sizeof(*j->by_id));
    j->by_req = calloc((size_t)jn->max, sizeof(*j->by_req));
    j->by_rank = calloc((size_t)jn->max, sizeof(*j->by_rank));
    if (!j->by_id || !j->by_req || !j->by_rank)
        goto out_free;
    r = uv_timer_init(srv->loop, &j->timer);
    if (r < 0) {
        log_error_errno(r, "job=%s: cannot create its timer", jn->run_id);
        goto out_free;
    }
    j->id_seed = rdzv_random_u64();
    j->srv = srv;
    memcpy(j->run_id, jn->run_id, sizeof(j->run_id));
    j->min = jn->min;
    j->max = jn->max;
    j->max_restarts = jn->max_restarts;
    j->last_call_ms = jn->last_call_ms;
    j->hb_timeout_ms = jn->heartbeat_timeout_ms;
    j->join_timeout_ms = jn->join_timeout_ms;
    j->scale_up_now = jn->scale_up_now;
    j->created_ms = rdzv_now_ms();
    rdzv_list_init(&j->members);
    j->timer.data = j;
    rdzv_list_add_tail(&srv->jobs, &j->node);
    job_note(j, false,
             "created (nodes %" PRId64 "..%" PRId64 ", last call %" PRId64
             " ms, max restarts %" PRId64 ", heartbeat timeout %" PRId64 " ms)",
             j->min, j->max, j->last_call_ms, j->max_restarts, j->hb_timeout_ms);
    return j;

out_free:
    free(j->by_id);
    free(j->by_req);
    free(j->by_rank);
    free(j);
    return NULL;
}

static struct member **id_slot(struct job *j, const char *node_id)
{
    uint64_t h = rdzv_hash64(j->id_seed, node_id, strlen(node_id));

    return &j->by_id[h & (j->id_buckets - 1)];
}

static struct member *member_by_id(struct job *j, const char *node_id)
{
    for (struct member *m = *id_slot(j, node_id); m; m = m->id_next)
        if (strcmp(m->join.node_id, node_id) == 0)
            return m;
    return NULL;
}

/* Index m by node id, doubling the table past one member per bucket. */
static int member_index(struct job *j, struct member *m)
{
    struct member **pp;

    if ((size_t)j->nmembers >= j->id_buckets) {
        size_t nb = j->id_buckets * 2;
        struct member **old = j->by_id, **b = calloc(nb, sizeof(*b));
        size_t ob = j->id_buckets;

        if (!b)
            return -ENOMEM;
        j->by_id = b;
        j->id_buckets = nb;
        for (size_t i = 0; i < ob; i++)
            while (old[i]) {
                struct member *o = old[i];

                old[i] = o->id_next;
                pp = id_slot(j, o->join.node_id);
                o->id_next = *pp;
                *pp = o;
            }
        free(old);
    }
    pp = id_slot(j, m->join.node_id);
    m->id_next = *pp;
    *pp = m;
    return 0;
}

static void member_unindex(struct job *j, struct member *m)
{
    struct member **pp;

    for (pp = id_slot(j, m->join.node_id); *pp; pp = &(*pp)->id_next)
        if (*pp == m) {
            *pp = m->id_next;
            return;
        }
}

static void member_close_cb(uv_handle_t *h)
{
    free(h->data);
}

/* Unlink m (and free the job with its last member). The caller deals with the consequences. */
static void member_remove(struct member *m)
{
    struct job *j = m->job;

    member_unindex(j, m);
    rdzv_list_del(&m->node);
    j->nmembers--;
    j->nready -= m->ready;
    member_unrank(m);
    if (m->join.node_rank >= 0 && m->join.node_rank < j->max && j->by_req[m->join.node_rank] == m)
        j->by_req[m->join.node_rank] = NULL;
    if (m->conn)
        rdzvd_conn_set_member(m->conn, NULL);
    uv_close((uv_handle_t *)&m->hb_timer, member_close_cb);
    if (j->nmembers == 0)
        job_free(j);
}

/* m is gone (its connection closed, or it fell silent): drop it, and move the job on. */
static void member_lost(struct member *m, const char *why)
{
    struct job *j = m->job;
    struct rdzvd_conn *c = m->conn;
    enum job_state st = j->state;
    bool in_round = m->node_rank >= 0, left = m->left_ok, last = j->nmembers == 1;
    int64_t rank = m->node_rank;
    char cause[RDZV_SUMMARY_MAX + 1];

    snprintf(cause, sizeof(cause), "root cause: the agent of node rank %" PRId64 " (%s) %s", rank,
             m->join.host, why);
    if (in_round && (st == JOB_RUNNING || st == JOB_NCCL) && !left)
        job_note(j, true, "%s", cause + 12);
    else
        job_note(j, false, "node=%s left (node id %s): %s", m->join.host, m->join.node_id, why);
    member_remove(m);
    if (c)
        rdzvd_conn_close(c, why); /* its member is detached: no second report */
    if (last)
        return; /* the job went with its last member */
    switch (st) {
    case JOB_RUNNING:
        if (in_round && !left)
            job_restart(j, true, 1, cause);
        else if (in_round)
            job_check_all_left(j); /* its workers were done: the others may finish too */
        break;
    case JOB_NCCL:
        if (in_round) {
            /* No worker started yet: form the round again, nothing to stop. */
            struct rdzv_list *pos, *tmp;
            struct member *o;

            job_timer_stop(j);
            job_close_store(j);
            for_each_member(j, o, pos, tmp)
            {
                member_unrank(o);
                member_set_ready(o, true);
            }
            j->generation--;
            snprintf(j->last_cause, sizeof(j->last_cause), "%s", cause);
            job_set_state(j, JOB_FORMING);
            job_try_close(j);
        }
        break;
    case JOB_STOPPING:
        job_check_stopped(j);
        break;
    case JOB_FORMING:
        job_try_close(j);
        break;
    default:
        break;
    }
}

static int check_join_matches(struct rdzvd_conn *c, struct job *j, const struct rdzv_join *jn)
{
    if (j->min != jn->min || j->max != jn->max || j->max_restarts != jn->max_restarts) {
        send_frame_error(c,
                         "job '%s' was started with --nnodes %" PRId64 ":%" PRId64
                         " --max-restarts %" PRId64 ", this agent has --nnodes %" PRId64 ":%" PRId64
                         " --max-restarts %" PRId64 "; start every agent with the same values",
                         jn->run_id, j->min, j->max, j->max_restarts, jn->min, jn->max,
                         jn->max_restarts);
        return -EINVAL;
    }
    return 0;
}

static struct member *member_add(struct job *j, struct rdzvd_conn *c, const struct rdzv_join *jn)
{
    struct member *m = calloc(1, sizeof(*m));
    int r;

    if (!m)
        return NULL;
    m->job = j;
    m->conn = c;
    m->join = *jn;
    m->node_rank = -1;
    m->prev_rank = -1;
    m->joined_ms = m->last_seen_ms = rdzv_now_ms();
    r = uv_timer_init(j->srv->loop, &m->hb_timer);
    if (r < 0) {
        log_error_errno(r, "job=%s: cannot create a heartbeat timer", j->run_id);
        free(m);
        return NULL;
    }
    if (member_index(j, m) < 0) {
        /* The handle is initialised: it must be closed before its memory goes. */
        m->hb_timer.data = m;
        uv_close((uv_handle_t *)&m->hb_timer, member_close_cb);
        return NULL;
    }
    m->ready = true;
    j->nready++;
    m->hb_timer.data = m;
    member_hb_arm(m, (uint64_t)j->hb_timeout_ms);
    rdzv_list_add_tail(&j->members, &m->node);
    j->nmembers++;
    if (jn->node_rank >= 0 && jn->node_rank < j->max && !j->by_req[jn->node_rank])
        j->by_req[jn->node_rank] = m;
    rdzvd_conn_set_member(c, m);
    return m;
}

static void send_joined(struct rdzvd_conn *c, struct job *j, bool spare, bool resumed)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);

    if (out)
        (void)rdzv_msg_put(out, RDZV_MSG_JOINED,
                           json_pack("{s:s, s:I, s:b, s:b, s:I}", "run_id", j->run_id, "waiting",
                                     (json_int_t)j->nmembers, "spare", spare, "resumed", resumed,
                                     "generation", (json_int_t)j->generation));
}

/* Rebuild the job j (just made by job_new) as a restarted rdzvd finds it in rec: generation and
 * restart count as they were; when its workers run, the generation's store reopened (with its
 * keys) on the port they know, and the job RUNNING until their agents are back or the rebuild
 * window ends. 0 or a negative errno (the store could not be opened at all). */
static int job_rebuild(struct job *j, const struct rdzvd_job_record *rec)
{
    char desc[64], sname[64];
    int r;

    j->generation = rec->generation;
    j->restart_count = rec->restart_count;
    if (!rec->running || rec->generation == 0) {
        job_note(j, false,
                 "restored from --state-dir after an rdzvd restart: generation %" PRIu64
                 " is over, restart %" PRId64 " of %" PRId64 "; forming the next one",
                 j->generation, j->restart_count, j->max_restarts);
        return 0; /* JOB_FORMING: the next round is generation + 1 */
    }
    j->rebuilt = true;
    j->round.generation = rec->generation;
    j->round.nnodes = rec->nnodes;
    j->round.world_size = rec->world_size;
    j->round.restart_count = rec->restart_count;
    j->round.max_restarts = j->max_restarts;
    snprintf(desc, sizeof(desc), "job %.24s gen %" PRIu64, j->run_id, j->generation);
    job_state_name(j, j->generation, sname, sizeof(sname));
    r = rdzvd_listener_open(j->srv, desc, sname, rec->store_port, &j->store);
    if (r < 0) {
        job_note(j, true,
                 "cannot reopen the store of generation %" PRIu64 " on port %u (%s); workers "
                 "that reconnect to it will fail",
                 j->generation, rec->store_port, uv_strerror(r));
        r = rdzvd_listener_open(j->srv, desc, sname, 0, &j->store);
    }
    if (r < 0)
        return r;
    job_set_state(j, JOB_RUNNING);
    /* Agents that do not come back within this window count as lost. */
    job_timer_start(j, T_REBUILD, (uint64_t)j->hb_timeout_ms * 2);
    job_note(j, false,
             "rebuilding generation %" PRIu64 " (%" PRId64 " nodes) from reconnecting agents",
             j->generation, rec->nnodes);
    return 0;
}

/* While a rebuilt generation waits for its agents, nobody else is placed. */
static bool job_rebuilding(const struct job *j)
{
    return j->rebuilt && j->timer_armed && j->timer_kind == T_REBUILD;
}

/* The job jn names is not in memory: after an rdzvd restart, rebuild it from its record in
 * --state-dir, else (no record) from what a resuming agent says. *ret: the job, or NULL when
 * neither knows it (a plain JOIN of a new job). 0, or a negative errno after an ERROR to c. */
static int job_restore(struct rdzvd_conn *c, const struct rdzv_join *jn, struct job **ret)
{
    struct rdzvd_server *srv = rdzvd_conn_server(c);
    const struct rdzv_resume *rs = &jn->resume;
    struct rdzvd_job_record rec = {.generation = 0};
    struct job *j;
    int r = -ENOENT;

    *ret = NULL;
    if (srv->state_dirfd >= 0 &&
        (r = rdzvd_job_record_load(srv->state_dirfd, jn->run_id, &rec)) < 0 && r != -ENOENT)
        log_warn_errno(r, "job=%s: its record in --state-dir is unreadable; ignored", jn->run_id);
    if (r == 0 &&
        (rec.min != jn->min || rec.max != jn->max || rec.max_restarts != jn->max_restarts)) {
        send_frame_error(c,
                         "job '%s' was started with --nnodes %" PRId64 ":%" PRId64
                         " --max-restarts %" PRId64 ", this agent has --nnodes %" PRId64 ":%" PRId64
                         " --max-restarts %" PRId64 "; start every agent with the same values",
                         jn->run_id, rec.min, rec.max, rec.max_restarts, jn->min, jn->max,
                         jn->max_restarts);
        return -EINVAL;
    }
    if (rs->generation > rec.generation) {
        /* No record, or one older than what this agent runs: its generation it is. */
        rec.generation = rs->generation;
        rec.running = true;
        rec.nnodes = rs->nnodes;
        rec.world_size = rs->world_size;
        rec.store_port = (uint16_t)rs->master_port;
        if (rs->restart_count > rec.restart_count)
            rec.restart_count = rs->restart_count;
        r = 0;
    }
    if (r < 0)
        return 0;
    if (!(j = job_new(srv, jn))) {
        send_frame_error(c, "rdzvd is out of memory");
        return -ENOMEM;
    }
    r = job_rebuild(j, &rec);
    if (r < 0) {
        send_frame_error(c, "rdzvd could not reopen the job's store: %s", uv_strerror(r));
        job_free(j);
        return r;
    }
    *ret = j;
    return 0;
}

/* A reconnecting agent whose workers run generation jn->resume.generation. */
static int handle_resume(struct rdzvd_conn *c, struct job *j, const struct rdzv_join *jn)
{
    const struct rdzv_resume *rs = &jn->resume;
    struct member *m, *old;
    bool created = false;
    int r;

    if (!j) {
        /* rdzvd restarted: rebuild the job, generation and all. */
        if ((r = job_restore(c, jn, &j)) < 0)
            return r;
        created = true;
    } else if (check_join_matches(c, j, jn) < 0) {
        return -EINVAL;
    }
    old = member_by_id(j, jn->node_id);
    if (old && old->conn != c) {
        /* The same agent on a new connection before we saw the old one close: take it over. */
        job_note(j, false, "node=%s reconnected", jn->host);
        if (old->conn) {
            struct rdzvd_conn *oc = old->conn;

            rdzvd_conn_set_member(oc, NULL);
            old->conn = NULL;
            rdzvd_conn_close(oc, "replaced by the agent's new connection");
        }
        old->conn = c;
        rdzvd_conn_set_member(c, old);
        member_hb_arm(old, (uint64_t)j->hb_timeout_ms);
        send_joined(c, j, old->node_rank < 0, true);
        if (j->state == JOB_STOPPING && old->stopping_gen == rs->generation && !old->ready) {
            struct rdzv_event e = {.type = "restart", .generation = rs->generation};

            snprintf(e.summary, sizeof(e.summary), "%s", j->last_cause);
            member_send_event(old, &e);
        }
        return 0;
    }
    if (!(m = member_add(j, c, jn))) {
        send_frame_error(c, "rdzvd is out of memory");
        if (created)
            job_free(j);
        return -ENOMEM;
    }
    if (j->state == JOB_RUNNING && j->generation == rs->generation &&
        !member_by_rank(j, rs->node_rank) && rs->nnodes == j->round.nnodes) {
        member_set_rank(m, rs->node_rank);
        m->prev_rank = rs->node_rank;
        m->rank_offset = rs->rank_offset;
        member_set_ready(m, false);
        m->left_ok = rs->left;
        job_note(j, false,
                 "node=%s is back (node rank %" PRId64 " of generation %" PRIu64 ", %" PRId64
                 " of %" PRId64 " nodes)",
                 jn->host, rs->node_rank, j->generation, j->nin_round, j->round.nnodes);
        send_joined(c, j, false, true);
        if (j->rebuilt && j->nin_round == j->round.nnodes && j->timer_armed) {
            job_timer_stop(j);
            job_note(j, false, "generation %" PRIu64 " rebuilt; its workers never stopped",
                     j->generation);
        }
        return 0;
    }
    /* The job moved on without it: stop the old workers, then it is a candidate like any. */
    {
        struct rdzv_event e = {.type = "restart", .generation = rs->generation};

        snprintf(e.summary, sizeof(e.summary),
                 "generation %" PRIu64 " is over (the job is at generation %" PRIu64
                 "); this node rejoins as a new member",
                 rs->generation, j->generation);
        member_set_ready(m, false);
        m->stopping_gen = rs->generation;
        send_joined(c, j, true, false);
        member_send_event(m, &e);
        job_note(j, false,
                 "node=%s reconnected from generation %" PRIu64 " (now %" PRIu64 "): told to "
                 "stop its workers",
                 jn->host, rs->generation, j->generation);
    }
    return 0;
}

static int handle_join(struct rdzvd_conn *c, const uint8_t *body, uint32_t len)
{
    struct rdzvd_server *srv = rdzvd_conn_server(c);
    struct rdzv_join jn;
    struct member *m;
    struct job *j;
    char err[256];
    bool spare;
    int r;

    if (rdzv_msg_parse_join(body, len, &jn, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    j = job_find(srv, jn.run_id);
    /* Not in memory but recorded (rdzvd restarted): rebuild it before placing this agent. */
    if (!j && !jn.resume.generation && (r = job_restore(c, &jn, &j)) < 0)
        return r;
    if (j && j->state == JOB_ENDED) {
        send_frame_error(c,
                         "job '%s' has just ended and its agents are still leaving; use a new "
                         "--rdzv-id for a new job",
                         jn.run_id);
        return -EBUSY;
    }
    if (jn.resume.generation)
        return handle_resume(c, j, &jn);
    if (j && check_join_matches(c, j, &jn) < 0)
        return -EINVAL;
    if (jn.node_rank >= jn.max) {
        if (!jn.rank_hint) {
            send_frame_error(c,
                             "node rank %" PRId64 " is out of range: job '%s' has at most "
                             "%" PRId64 " nodes (ranks 0..%" PRId64 ")",
                             jn.node_rank, jn.run_id, jn.max, jn.max - 1);
            return -ERANGE;
        }
        jn.node_rank = -1; /* the scheduler's extra node: a spare */
    }
    if (j && jn.node_rank >= 0) {
        struct member *o =
            j->by_req[jn.node_rank] ? j->by_req[jn.node_rank] : j->by_rank[jn.node_rank];

        if (o && jn.rank_hint) {
            jn.node_rank = -1; /* only a preference: take any free rank */
        } else if (o) {
            send_frame_error(c,
                             "node rank %" PRId64 " of job '%s' is already taken by %s (%s); "
                             "give each node its own --node-rank, or run one agent per node",
                             jn.node_rank, jn.run_id, o->join.host, o->join.node_id);
            return -EEXIST;
        }
    }
    if (j && member_by_id(j, jn.node_id)) {
        send_frame_error(c, "node id '%s' has already joined job '%s'", jn.node_id, jn.run_id);
        return -EEXIST;
    }
    if (!j && !(j = job_new(srv, &jn))) {
        send_frame_error(c, "rdzvd is out of memory");
        return -ENOMEM;
    }
    if (!(m = member_add(j, c, &jn))) {
        send_frame_error(c, "rdzvd is out of memory");
        if (j->nmembers == 0)
            job_free(j);
        return -ENOMEM;
    }
    spare = j->state != JOB_FORMING;
    job_note(j, false,
             "node=%s joined (node id %s, %" PRId64 " workers, node rank %" PRId64
             " asked), %" PRId64 " of %" PRId64 "..%" PRId64 "%s",
             jn.host, jn.node_id, jn.nproc, jn.node_rank, j->nmembers, j->min, j->max,
             spare ? " (waits for the next generation)" : "");
    send_joined(c, j, spare, false);
    if (j->state == JOB_FORMING)
        job_try_close(j);
    else if (j->state == JOB_RUNNING && j->scale_up_now && j->nin_round < j->max &&
             !job_rebuilding(j))
        job_restart(j, false, 0, "a node joined below --nnodes MAX: restarting to scale up");
    return 0;
}

static int handle_nccl_id(struct member *m, const uint8_t *body, uint32_t len)
{
    struct job *j = m->job;
    const char *error = NULL;
    json_int_t gen;
    json_t *root, *ids = NULL, *v;
    json_error_t jerr;
    char err[RDZV_HOST_MAX + 512];
    size_t i;
    bool required = false;
    struct rdzv_list *pos, *tmp;
    struct member *o;

    root = rdzv_msg_load(body, len, err, sizeof(err));
    if (!root) {
        send_frame_error(m->conn, "NCCL_ID: %s", err);
        return -EBADMSG;
    }
    if (json_unpack_ex(root, &jerr, 0, "{s:I, s?o, s?s}", "generation", &gen, "ids", &ids, "error",
                       &error) < 0) {
        send_frame_error(m->conn, "NCCL_ID: %s", jerr.text);
        json_decref(root);
        return -EBADMSG;
    }
    if (j->state != JOB_NCCL || (uint64_t)gen != j->generation || m->node_rank != 0) {
        log_debug("job %s: stale NCCL_ID for generation %lld ignored", j->run_id, (long long)gen);
        json_decref(root);
        return 0;
    }
    if (error) {
        for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && o->join.nccl == RDZV_NCCL_REQUIRED)
            required = true;
        if (required) {
            snprintf(err, sizeof(err),
                     "this job needs NCCL, but node rank 0 (%s) cannot make "
                     "an NCCL id: %s",
                     m->join.host, error);
            json_decref(root);
            job_end(j, "failed", 1, err);
            return 0;
        }
        job_note(j, false, "no NCCL id (%s); workers get no RDZV_NCCL_UNIQUE_ID", error);
    } else {
        if (!json_is_array(ids) || json_array_size(ids) < 1 ||
            json_array_size(ids) > RDZV_MAX_NCCL_IDS) {
            send_frame_error(m->conn, "NCCL_ID: 'ids' must be an array of 1..%d ids",
                             RDZV_MAX_NCCL_IDS);
            json_decref(root);
            return -EBADMSG;
        }
        json_array_foreach(ids, i, v)
        {
            if (!json_is_string(v) || !rdzv_nccl_hex_valid(json_string_value(v))) {
                send_frame_error(m->conn, "NCCL_ID: ids[%zu] is not %d lowercase hex characters", i,
                                 RDZV_NCCL_HEX_LEN);
                json_decref(root);
                return -EBADMSG;
            }
            memcpy(j->round.ids[i], json_string_value(v), RDZV_NCCL_HEX_LEN + 1);
        }
        j->round.n_ids = (unsigned)json_array_size(ids);
    }
    json_decref(root);
    job_timer_stop(j);
    send_rounds(j);
    return 0;
}

static int handle_worker_exit(struct member *m, const uint8_t *body, uint32_t len)
{
    struct job *j = m->job;
    struct rdzv_worker_exit w;
    char err[256], when[32], summary[RDZV_SUMMARY_MAX + 1], how[48];
    time_t secs;
    struct tm tm;

    if (rdzv_msg_parse_worker_exit(body, len, &w, err, sizeof(err)) < 0) {
        send_frame_error(m->conn, "%s", err);
        return -EBADMSG;
    }
    if (j->state != JOB_RUNNING || w.generation != j->generation || m->node_rank < 0)
        return 0; /* a late report from an earlier generation, or the job already moved on */
    m->failures++;
    secs = (time_t)w.time; /* the parser bounds it */
    if (!gmtime_r(&secs, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof(when), "?");
    if (w.signal > 0)
        snprintf(how, sizeof(how), "was killed by signal %" PRId64 " (%s)", w.signal,
                 strsignal((int)w.signal));
    else
        snprintf(how, sizeof(how), "exited with code %" PRId64, w.exit_code);
    snprintf(summary, sizeof(summary),
             "root cause: worker rank %" PRId64 " (local rank %" PRId64 ") on node rank %" PRId64
             " (%s) %s at %s (generation %" PRIu64 ")",
             w.rank, w.local_rank, m->node_rank, m->join.host, how, when, j->generation);
    job_restart(j, true, w.exit_code ? w.exit_code : 1, summary);
    return 0;
}

/* The job succeeded when every node of the running generation has sent LEAVE succeeded. */
static void job_check_all_left(struct job *j)
{
    struct rdzv_list *pos, *tmp;
    struct member *o;

    if (j->state != JOB_RUNNING || (j->rebuilt && j->nin_round < j->round.nnodes))
        return;
    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && !o->left_ok) return;
    job_end(j, "succeeded", 0, "every worker of every node exited 0");
}

static int handle_leave(struct member *m, const uint8_t *body, uint32_t len)
{
    struct job *j = m->job;
    const char *status;
    json_int_t gen;
    json_error_t jerr;
    char err[256];
    json_t *root = rdzv_msg_load(body, len, err, sizeof(err));

    if (!root) {
        send_frame_error(m->conn, "LEAVE: %s", err);
        return -EBADMSG;
    }
    if (json_unpack_ex(root, &jerr, 0, "{s:I, s:s}", "generation", &gen, "status", &status) < 0) {
        send_frame_error(m->conn, "LEAVE: %s", jerr.text);
        json_decref(root);
        return -EBADMSG;
    }
    if (j->state == JOB_RUNNING && (uint64_t)gen == j->generation && m->node_rank >= 0 &&
        strcmp(status, "succeeded") == 0)
        m->left_ok = true;
    json_decref(root);
    job_check_all_left(j);
    return 0;
}

static int handle_ready(struct member *m, const uint8_t *body, uint32_t len)
{
    struct job *j = m->job;
    json_int_t gen;
    json_error_t jerr;
    char err[256];
    json_t *root = rdzv_msg_load(body, len, err, sizeof(err));

    if (!root) {
        send_frame_error(m->conn, "READY: %s", err);
        return -EBADMSG;
    }
    if (json_unpack_ex(root, &jerr, 0, "{s:I}", "generation", &gen) < 0) {
        send_frame_error(m->conn, "READY: %s", jerr.text);
        json_decref(root);
        return -EBADMSG;
    }
    json_decref(root);
    if (m->ready || (uint64_t)gen != m->stopping_gen)
        return 0; /* a duplicate, or for a generation it was not asked to stop */
    member_set_ready(m, true);
    log_debug("job %s: %s ready after generation %lld", j->run_id, m->join.host, (long long)gen);
    if (j->state == JOB_STOPPING)
        job_check_stopped(j);
    else if (j->state == JOB_FORMING)
        job_try_close(j);
    return 0;
}

static int handle_heartbeat(struct member *m)
{
    struct rdzv_buf *out = rdzvd_conn_out(m->conn);

    member_hb_arm(m, (uint64_t)m->job->hb_timeout_ms);
    /* Answer, so that the agent notices a silent daemon too. */
    if (out)
        (void)rdzv_msg_put(out, RDZV_MSG_HEARTBEAT,
                           json_pack("{s:I}", "generation", (json_int_t)m->job->generation));
    return 0;
}

static json_t *job_status(struct job *j, uint64_t now)
{
    json_t *nodes = json_array(), *events = json_array(), *o;
    struct rdzv_list *pos, *tmp;
    struct member *m;
    unsigned first = j->nevents > JOB_EVENTS ? j->nevents - JOB_EVENTS : 0;

    for_each_member(j, m, pos, tmp)
    {
        json_array_append_new(
            nodes,
            json_pack("{s:s, s:s, s:I, s:I, s:f, s:f, s:I, s:b, s:b, s:s}", "host", m->join.host,
                      "node_id", m->join.node_id, "node_rank", (json_int_t)m->node_rank, "workers",
                      (json_int_t)m->join.nproc, "last_heartbeat_age_s",
                      (double)(now - m->last_seen_ms) / 1000, "age_s",
                      (double)(now - m->joined_ms) / 1000, "failures", (json_int_t)m->failures,
                      "spare", m->node_rank < 0 && m->ready, "connected", m->conn != NULL, "state",
                      m->node_rank >= 0 ? (m->ready ? "stopped" : "running")
                      : m->ready        ? "spare"
                                        : "stopping"));
    }
    for (unsigned i = first; i < j->nevents; i++)
        json_array_append_new(events,
                              json_pack("{s:f, s:s}", "time", j->events[i % JOB_EVENTS].time,
                                        "text", j->events[i % JOB_EVENTS].text));
    o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:o, s:o}", "run_id",
                  j->run_id, "state", job_state_names[j->state], "generation",
                  (json_int_t)j->generation, "restart_count", (json_int_t)j->restart_count,
                  "max_restarts", (json_int_t)j->max_restarts, "min_nodes", (json_int_t)j->min,
                  "max_nodes", (json_int_t)j->max, "nodes_in_generation", (json_int_t)j->nin_round,
                  "world_size", (json_int_t)j->round.world_size, "age_s",
                  (double)(now - j->created_ms) / 1000, "store_port",
                  j->store ? (int)j->store->port : 0, "nodes", nodes, "events", events);
    if (o && j->state == JOB_ENDED)
        json_object_set_new(o, "outcome",
                            json_pack("{s:s, s:I, s:s}", "type", j->outcome.type, "exit_code",
                                      (json_int_t)j->outcome.exit_code, "summary",
                                      j->outcome.summary));
    return o;
}

json_t *rdzvd_status_json(struct rdzvd_server *srv)
{
    uint64_t now = rdzv_now_ms();
    json_t *jobs = json_array();
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &srv->jobs)
        json_array_append_new(jobs, job_status(rdzv_container_of(pos, struct job, node), now));
    return json_pack("{s:s, s:s, s:I, s:f, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}", "daemon",
                     "rdzvd", "version", RDZV_VERSION, "port", (json_int_t)srv->bound_port,
                     "uptime_s", (double)(now - srv->start_ms) / 1000, "stats", "connections",
                     (json_int_t)srv->nconns, "accepted", (json_int_t)srv->stats.accepted,
                     "rejected", (json_int_t)srv->stats.rejected, "protocol_errors",
                     (json_int_t)srv->stats.closed_proto, "requests",
                     (json_int_t)srv->stats.requests, "main_store_keys",
                     (json_int_t)rdzvd_store_num_keys(srv->main.store), "jobs", jobs);
}

static int handle_status(struct rdzvd_conn *c)
{
    struct rdzv_buf *out = rdzvd_conn_out(c);

    if (out &&
        rdzv_msg_put(out, RDZV_MSG_STATUS_REPLY, rdzvd_status_json(rdzvd_conn_server(c))) < 0)
        log_error("out of memory answering STATUS");
    return 0;
}

int rdzvd_job_msg(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len)
{
    /* The member is looked up through the connection, never taken from the message. */
    struct member *m = rdzvd_conn_get_member(c);

    if (op == RDZV_MSG_STATUS)
        return handle_status(c);
    if (m)
        m->last_seen_ms = rdzv_now_ms();

    if (op == RDZV_MSG_JOIN) {
        if (m) {
            send_frame_error(c, "this connection has already joined job '%s'", m->job->run_id);
            return -EEXIST;
        }
        return handle_join(c, body, len);
    }
    if (!m) {
        send_frame_error(c, "%s before JOIN", rdzv_msg_name(op));
        return -EPROTO;
    }
    switch (op) {
    case RDZV_MSG_HEARTBEAT:
        return handle_heartbeat(m);
    case RDZV_MSG_NCCL_ID:
        return handle_nccl_id(m, body, len);
    case RDZV_MSG_WORKER_EXIT:
        return handle_worker_exit(m, body, len);
    case RDZV_MSG_LEAVE:
        return handle_leave(m, body, len);
    case RDZV_MSG_READY:
        return handle_ready(m, body, len);
    default:
        send_frame_error(c, "unexpected %s from an agent", rdzv_msg_name(op));
        return -EPROTO;
    }
}

void rdzvd_job_conn_closed(struct rdzvd_conn *c, void *member)
{
    struct member *m = member;

    (void)c;
    m->conn = NULL;
    member_lost(m, "disconnected");
}

void rdzvd_jobs_shutdown(struct rdzvd_server *srv)
{
    while (!rdzv_list_empty(&srv->jobs)) {
        struct job *j = rdzv_container_of(srv->jobs.next, struct job, node);
        bool last = false;

        /* member_remove() frees the job together with its last member. */
        while (!last) {
            struct member *m = rdzv_container_of(j->members.next, struct member, node);

            last = j->nmembers == 1;
            member_remove(m);
        }
    }
}
