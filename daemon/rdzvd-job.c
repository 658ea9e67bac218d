/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job.c: rendezvous jobs. A job is keyed by run_id; agents JOIN it, a round closes at max
 * agents or last_call_ms after min, ranks are assigned, the node-rank-0 agent supplies NCCL ids,
 * and every member gets its ROUND with the address of the generation's own store. */
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
#include "rdzvd-server.h"

#define NCCL_ID_TIMEOUT_MS 60000

enum job_state {
    JOB_FORMING, /* taking JOINs */
    JOB_NCCL,    /* round closed, waiting for node rank 0's NCCL ids */
    JOB_RUNNING, /* ROUND sent; workers run */
    JOB_ENDED,   /* outcome sent; waiting for agents to go */
    _JOB_STATE_MAX,
};

static const char *const job_state_names[_JOB_STATE_MAX] = {"forming", "nccl", "running", "ended"};

struct member {
    struct rdzv_list node; /* in job->members, join order */
    struct member *id_next; /* chain in job->by_id */
    struct job *job;
    struct rdzvd_conn *conn;
    struct rdzv_join join;
    int64_t node_rank;   /* this generation's, -1 before the round closes */
    int64_t rank_offset;
    uint64_t last_hb_ms;
    bool left_ok;        /* LEAVE succeeded received */
};

struct job {
    struct rdzv_list node; /* in srv->jobs */
    struct rdzvd_server *srv;
    char run_id[RDZV_ID_MAX + 1];
    int64_t min, max, max_restarts, last_call_ms;
    enum job_state state;
    uint64_t generation;
    int64_t restart_count;
    struct rdzv_list members;
    int64_t nmembers;
    struct member **by_rank; /* requested node ranks among members, max entries */
    struct member **by_id;   /* node_id hash (chained), id_buckets entries: duplicate check */
    size_t id_buckets;       /* power of two */
    uint64_t id_seed;
    uv_timer_t timer;        /* last call, then NCCL id timeout */
    bool timer_armed;
    struct rdzvd_listener *store; /* this generation's TCPStore listener */
    struct rdzv_round round;      /* template: generation, sizes, ids */
    struct rdzv_event outcome;
};

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

static void job_timer_close_cb(uv_handle_t *h)
{
    struct job *j = h->data;

    free(j->by_id);
    free(j->by_rank);
    free(j);
}

/* Remove a job with no members left. */
static void job_free(struct job *j)
{
    log_info("job %s: removed (generation %" PRIu64 ")", j->run_id, j->generation);
    rdzv_list_del(&j->node);
    if (j->store) {
        rdzvd_listener_close(j->store, true);
        j->store = NULL;
    }
    uv_close((uv_handle_t *)&j->timer, job_timer_close_cb);
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

static void member_send_event(struct member *m)
{
    struct rdzv_buf *out;

    if (!m->conn || !(out = rdzvd_conn_out(m->conn)))
        return;
    if (rdzv_msg_put_event(out, &m->job->outcome) < 0)
        log_error("job %s: out of memory sending an event", m->job->run_id);
}

/* The job is over: tell every member how it ended. */
static void job_end(struct job *j, const char *type, int64_t exit_code, const char *summary)
{
    struct rdzv_list *pos, *tmp;

    if (j->state == JOB_ENDED)
        return;
    if (j->timer_armed) {
        uv_timer_stop(&j->timer);
        j->timer_armed = false;
    }
    snprintf(j->outcome.type, sizeof(j->outcome.type), "%s", type);
    j->outcome.generation = j->generation;
    j->outcome.exit_code = exit_code;
    snprintf(j->outcome.summary, sizeof(j->outcome.summary), "%s", summary);
    job_set_state(j, JOB_ENDED);
    if (exit_code == 0)
        log_info("job %s: generation %" PRIu64 " succeeded", j->run_id, j->generation);
    else
        log_warn("job %s: generation %" PRIu64 " failed (exit code %" PRId64 "): %s", j->run_id,
                 j->generation, exit_code, summary);
    rdzv_list_for_each_safe(pos, tmp, &j->members)
        member_send_event(rdzv_container_of(pos, struct member, node));
    rdzvd_conn_flush_pending(j->srv);
}

static void send_rounds(struct job *j)
{
    struct rdzv_list *pos, *tmp;

    job_set_state(j, JOB_RUNNING);
    log_info("job %s: generation %" PRIu64 " formed: %" PRId64 " nodes, world size %" PRId64
             ", store on port %u, %u NCCL id(s)",
             j->run_id, j->generation, j->round.nnodes, j->round.world_size, j->store->port,
             j->round.n_ids);
    rdzv_list_for_each_safe(pos, tmp, &j->members)
    {
        struct member *m = rdzv_container_of(pos, struct member, node);
        struct rdzv_round *rd = &j->round;
        struct rdzv_buf *out;

        if (!m->conn || !(out = rdzvd_conn_out(m->conn)))
            continue;
        rd->node_rank = m->node_rank;
        rd->rank_offset = m->rank_offset;
        /* The store's address as this agent reached us: right on multi-homed masters too. */
        if (rdzvd_conn_local_addr(m->conn, rd->master_addr, sizeof(rd->master_addr)) < 0)
            snprintf(rd->master_addr, sizeof(rd->master_addr), "127.0.0.1");
        rd->master_port = j->store->port;
        if (rdzv_msg_put_round(out, rd) < 0)
            log_error("job %s: out of memory sending ROUND", j->run_id);
    }
    rdzvd_conn_flush_pending(j->srv);
}

static void job_timer_cb(uv_timer_t *t);

static struct member *rank0_member(struct job *j)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &j->members)
    {
        struct member *m = rdzv_container_of(pos, struct member, node);

        if (m->node_rank == 0)
            return m;
    }
    return NULL;
}

/* Close the round: assign node ranks and offsets, open the generation's store, get NCCL ids. */
static void close_round(struct job *j)
{
    struct member **slots = calloc((size_t)j->max, sizeof(*slots));
    struct rdzv_list *pos, *tmp;
    int64_t next = 0, rank = 0, offset = 0, want_ids = 0;
    char desc[48];
    int r;

    if (j->timer_armed) {
        uv_timer_stop(&j->timer);
        j->timer_armed = false;
    }
    if (!slots) {
        job_end(j, "failed", 1, "rdzvd ran out of memory forming the round");
        return;
    }
    /* Asked-for ranks first, the rest fill free slots in join order, then compact. */
    rdzv_list_for_each_safe(pos, tmp, &j->members)
    {
        struct member *m = rdzv_container_of(pos, struct member, node);

        if (m->join.node_rank >= 0)
            slots[m->join.node_rank] = m;
    }
    rdzv_list_for_each_safe(pos, tmp, &j->members)
    {
        struct member *m = rdzv_container_of(pos, struct member, node);

        if (m->join.node_rank >= 0)
            continue;
        while (slots[next])
            next++;
        slots[next] = m;
    }
    for (int64_t i = 0; i < j->max; i++) {
        struct member *m = slots[i];

        if (!m)
            continue;
        m->node_rank = rank++;
        m->rank_offset = offset;
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

    snprintf(desc, sizeof(desc), "job %.24s gen %" PRIu64, j->run_id, j->generation);
    r = rdzvd_listener_open(j->srv, desc, NULL, 0, &j->store);
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
        uv_timer_start(&j->timer, job_timer_cb, NCCL_ID_TIMEOUT_MS, 0);
        j->timer_armed = true;
        rdzvd_conn_flush_pending(j->srv);
        return;
    }
    send_rounds(j);
}

static void job_timer_cb(uv_timer_t *t)
{
    struct job *j = t->data;

    j->timer_armed = false;
    if (j->state == JOB_FORMING) {
        log_info("job %s: last call over with %" PRId64 " of %" PRId64 "..%" PRId64 " nodes",
                 j->run_id, j->nmembers, j->min, j->max);
        if (j->nmembers >= j->min)
            close_round(j);
    } else if (j->state == JOB_NCCL) {
        struct member *m0 = rank0_member(j);
        char why[RDZV_HOST_MAX + 128];

        snprintf(why, sizeof(why), "node rank 0 (%s) sent no NCCL id within %d s",
                 m0 ? m0->join.host : "?", NCCL_ID_TIMEOUT_MS / 1000);
        job_end(j, "failed", 1, why);
    }
}

static struct job *job_new(struct rdzvd_server *srv, const struct rdzv_join *jn)
{
    struct job *j = calloc(1, sizeof(*j));

    if (!j)
        return NULL;
    j->by_rank = calloc((size_t)jn->max, sizeof(*j->by_rank));
    j->id_buckets = 64;
    j->by_id = calloc(j->id_buckets, sizeof(*j->by_id));
    if (!j->by_rank || !j->by_id) {
        free(j->by_rank);
        free(j->by_id);
        free(j);
        return NULL;
    }
    j->id_seed = rdzv_random_u64();
    j->srv = srv;
    memcpy(j->run_id, jn->run_id, sizeof(j->run_id));
    j->min = jn->min;
    j->max = jn->max;
    j->max_restarts = jn->max_restarts;
    j->last_call_ms = jn->last_call_ms;
    rdzv_list_init(&j->members);
    uv_timer_init(srv->loop, &j->timer);
    j->timer.data = j;
    rdzv_list_add_tail(&srv->jobs, &j->node);
    log_info("job %s: created (nodes %" PRId64 "..%" PRId64 ", last call %" PRId64
             " ms, max restarts %" PRId64 ")",
             j->run_id, j->min, j->max, j->last_call_ms, j->max_restarts);
    return j;
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

static void member_remove(struct member *m)
{
    struct job *j = m->job;

    member_unindex(j, m);

    if (m->join.node_rank >= 0 && m->join.node_rank < j->max && j->by_rank[m->join.node_rank] == m)
        j->by_rank[m->join.node_rank] = NULL;
    rdzv_list_del(&m->node);
    j->nmembers--;
    if (m->conn)
        rdzvd_conn_set_member(m->conn, NULL);
    free(m);
    if (j->nmembers == 0)
        job_free(j);
}

static int handle_join(struct rdzvd_conn *c, const uint8_t *body, uint32_t len)
{
    struct rdzvd_server *srv = rdzvd_conn_server(c);
    struct rdzv_join jn;
    struct member *m;
    struct job *j;
    char err[256];
    struct rdzv_buf *out;

    if (rdzv_msg_parse_join(body, len, &jn, err, sizeof(err)) < 0) {
        send_frame_error(c, "%s", err);
        return -EBADMSG;
    }
    j = job_find(srv, jn.run_id);
    if (j && j->state == JOB_ENDED) {
        send_frame_error(c, "job '%s' has just ended and its agents are still leaving; use a new "
                            "--rdzv-id for a new job",
                         jn.run_id);
        return -EBUSY;
    }
    if (j && j->state != JOB_FORMING) {
        send_frame_error(c, "job '%s' is already running generation %" PRIu64 " with %" PRId64
                            " nodes; it takes no more nodes",
                         jn.run_id, j->generation, j->round.nnodes);
        return -EBUSY;
    }
    if (j && (j->min != jn.min || j->max != jn.max || j->max_restarts != jn.max_restarts)) {
        send_frame_error(c, "job '%s' was started with --nnodes %" PRId64 ":%" PRId64
                            " --max-restarts %" PRId64 ", this agent has --nnodes %" PRId64
                            ":%" PRId64 " --max-restarts %" PRId64
                            "; start every agent with the same values",
                         jn.run_id, j->min, j->max, j->max_restarts, jn.min, jn.max,
                         jn.max_restarts);
        return -EINVAL;
    }
    if (jn.node_rank >= jn.max) {
        send_frame_error(c, "node rank %" PRId64 " is out of range: job '%s' has at most %" PRId64
                            " nodes (ranks 0..%" PRId64 ")",
                         jn.node_rank, jn.run_id, jn.max, jn.max - 1);
        return -ERANGE;
    }
    if (j && jn.node_rank >= 0 && j->by_rank[jn.node_rank]) {
        send_frame_error(c, "node rank %" PRId64 " of job '%s' is already taken by %s (%s); give "
                            "each node its own --node-rank, or run one agent per node",
                         jn.node_rank, jn.run_id, j->by_rank[jn.node_rank]->join.host,
                         j->by_rank[jn.node_rank]->join.node_id);
        return -EEXIST;
    }
    if (j) {
        if (member_by_id(j, jn.node_id)) {
            send_frame_error(c, "node id '%s' has already joined job '%s'", jn.node_id,
                             jn.run_id);
            return -EEXIST;
        }
        if (j->nmembers >= j->max) {
            send_frame_error(c, "job '%s' already has its %" PRId64 " nodes", jn.run_id, j->max);
            return -EBUSY;
        }
    }
    if (!j && !(j = job_new(srv, &jn))) {
        send_frame_error(c, "rdzvd is out of memory");
        return -ENOMEM;
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        send_frame_error(c, "rdzvd is out of memory");
        if (j->nmembers == 0)
            job_free(j);
        return -ENOMEM;
    }
    m->job = j;
    m->conn = c;
    m->join = jn;
    if (member_index(j, m) < 0) {
        free(m);
        send_frame_error(c, "rdzvd is out of memory");
        if (j->nmembers == 0)
            job_free(j);
        return -ENOMEM;
    }
    m->node_rank = -1;
    m->last_hb_ms = rdzv_now_ms();
    rdzv_list_add_tail(&j->members, &m->node);
    j->nmembers++;
    if (jn.node_rank >= 0)
        j->by_rank[jn.node_rank] = m;
    rdzvd_conn_set_member(c, m);
    log_info("job %s: %s (node id %s, %" PRId64 " workers, node rank %" PRId64
             " asked) joined, %" PRId64 " of %" PRId64 "..%" PRId64,
             j->run_id, jn.host, jn.node_id, jn.nproc, jn.node_rank, j->nmembers, j->min, j->max);
    out = rdzvd_conn_out(c);
    if (out)
        (void)rdzv_msg_put(out, RDZV_MSG_JOINED,
                           json_pack("{s:s, s:I}", "run_id", j->run_id, "waiting",
                                     (json_int_t)j->nmembers));
    if (j->nmembers >= j->max) {
        close_round(j);
    } else if (j->nmembers >= j->min && !j->timer_armed) {
        uv_timer_start(&j->timer, job_timer_cb, (uint64_t)j->last_call_ms, 0);
        j->timer_armed = true;
    }
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

    root = rdzv_msg_load(body, len, err, sizeof(err));
    if (!root) {
        send_frame_error(m->conn, "NCCL_ID: %s", err);
        return -EBADMSG;
    }
    if (json_unpack_ex(root, &jerr, 0, "{s:I, s?o, s?s}", "generation", &gen, "ids", &ids,
                       "error", &error) < 0) {
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
        rdzv_list_for_each_safe(pos, tmp, &j->members)
        {
            if (rdzv_container_of(pos, struct member, node)->join.nccl == RDZV_NCCL_REQUIRED)
                required = true;
        }
        if (required) {
            snprintf(err, sizeof(err), "this job needs NCCL, but node rank 0 (%s) cannot make "
                                       "an NCCL id: %s",
                     m->join.host, error);
            json_decref(root);
            job_end(j, "failed", 1, err);
            return 0;
        }
        log_info("job %s: no NCCL id (%s); workers get no RDZV_NCCL_UNIQUE_ID", j->run_id, error);
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
                send_frame_error(m->conn, "NCCL_ID: ids[%zu] is not %d lowercase hex characters",
                                 i, RDZV_NCCL_HEX_LEN);
                json_decref(root);
                return -EBADMSG;
            }
            memcpy(j->round.ids[i], json_string_value(v), RDZV_NCCL_HEX_LEN + 1);
        }
        j->round.n_ids = (unsigned)json_array_size(ids);
    }
    json_decref(root);
    if (j->timer_armed) {
        uv_timer_stop(&j->timer);
        j->timer_armed = false;
    }
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
    if (j->state != JOB_RUNNING || w.generation != j->generation)
        return 0; /* a late report from an earlier generation, or the job already ended */
    secs = (time_t)w.time;
    gmtime_r(&secs, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (w.signal > 0)
        snprintf(how, sizeof(how), "was killed by signal %" PRId64 " (%s)", w.signal,
                 strsignal((int)w.signal));
    else
        snprintf(how, sizeof(how), "exited with code %" PRId64, w.exit_code);
    snprintf(summary, sizeof(summary),
             "root cause: worker rank %" PRId64 " (local rank %" PRId64 ") on node rank %" PRId64
             " (%s) %s at %s",
             w.rank, w.local_rank, m->node_rank, m->join.host, how, when);
    job_end(j, "failed", w.exit_code ? w.exit_code : 1, summary);
    return 0;
}

static int handle_leave(struct member *m, const uint8_t *body, uint32_t len)
{
    struct job *j = m->job;
    struct rdzv_list *pos, *tmp;
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
    if (j->state == JOB_RUNNING && (uint64_t)gen == j->generation &&
        strcmp(status, "succeeded") == 0)
        m->left_ok = true;
    json_decref(root);
    if (j->state != JOB_RUNNING)
        return 0;
    rdzv_list_for_each_safe(pos, tmp, &j->members)
    {
        struct member *o = rdzv_container_of(pos, struct member, node);

        if (o->node_rank >= 0 && !o->left_ok)
            return 0;
    }
    job_end(j, "succeeded", 0, "every worker of every node exited 0");
    return 0;
}

int rdzvd_job_msg(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len)
{
    /* The member is looked up through the connection, never taken from the message. */
    struct member *m = rdzvd_conn_get_member(c);

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
        m->last_hb_ms = rdzv_now_ms();
        return 0;
    case RDZV_MSG_NCCL_ID:
        return handle_nccl_id(m, body, len);
    case RDZV_MSG_WORKER_EXIT:
        return handle_worker_exit(m, body, len);
    case RDZV_MSG_LEAVE:
        return handle_leave(m, body, len);
    default:
        send_frame_error(c, "unexpected %s from an agent", rdzv_msg_name(op));
        return -EPROTO;
    }
}

void rdzvd_job_conn_closed(struct rdzvd_conn *c, void *member)
{
    struct member *m = member;
    struct job *j = m->job;
    char why[RDZV_HOST_MAX + 128];

    m->conn = NULL;
    if ((j->state == JOB_RUNNING || j->state == JOB_NCCL) && m->node_rank >= 0 && !m->left_ok) {
        snprintf(why, sizeof(why),
                 "root cause: the agent of node rank %" PRId64 " (%s) disconnected", m->node_rank,
                 m->join.host);
        job_end(j, "failed", 1, why);
    }
    if (j->state == JOB_FORMING) {
        log_info("job %s: %s left before the round closed", j->run_id, m->join.host);
        if (j->nmembers - 1 < j->min && j->timer_armed) {
            uv_timer_stop(&j->timer);
            j->timer_armed = false;
        }
    }
    member_remove(m);
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
