/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http.c: --metrics-port: Prometheus metrics, status JSON and a plain HTML status page. */
#include "daemon/front/rdzvd-http.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/front/rdzvd-http-page.h"
#include "daemon/job/rdzvd-job.h"

struct http_body;

struct rdzvd_http {
    uv_tcp_t tcp; /* first: the listen callback recovers h from the handle */
    uv_idle_t idle; /* while requests wait in queue */
    const struct rdzvd_jobs *jobs;
    struct rdzv_list conns; /* oldest first */
    struct rdzv_list queue; /* connections with a whole request, not answered yet */
    unsigned nconns;
    unsigned turn_accepts; /* this turn (RDZVD_HTTP_TURN_ACCEPTS) */
    size_t turn_bytes;     /* answered this turn (RDZVD_HTTP_TURN_BYTES) */
    bool accept_waiting;   /* a connection left in the backlog until the next turn */
    int closes;
    bool stopping;
    struct http_body *page; /* the status page last made, at page_ms */
    uint64_t page_ms;
    struct rdzvd_ratelimit bad; /* log lines about refused requests (anyone can send them) */
};

enum http_state {
    HTTP_READING, /* its request (RDZVD_HTTP_TIMEOUT_MS) */
    HTTP_QUEUED,  /* a whole request, in h->queue */
    HTTP_WRITING, /* its answer (RDZVD_HTTP_WRITE_TIMEOUT_MS), then closed */
};

struct http_conn {
    uv_tcp_t tcp; /* first */
    uv_timer_t timer;
    uv_write_t wr;
    struct rdzv_list node;  /* in h->conns */
    struct rdzv_list qnode; /* in h->queue while HTTP_QUEUED */
    struct rdzvd_http *h;
    enum http_state state;
    uint64_t since_ms; /* accepted */
    char req[RDZVD_HTTP_MAX_REQ];
    size_t len;
    struct rdzv_buf out; /* the answer's header */
    struct http_body *body;
    int closes;
    bool head; /* a HEAD request: the reply has no body (RFC 9110 9.3.2) */
};

/* ---- bodies ---- */

/* Per rank of each job's current generation that reported progress: its last step and the age
 * of that report. Nonzero when out of memory. */
/* Job i is one that ended and is kept for status (--keep-ended): its metrics are the
 * rdzvd_job_ended_* ones, so that a new job of the same run id has the live ones to itself. */
static bool kept_ended(const struct rdzv_status *st, size_t i)
{
    return st->jobs[i].ended && st->jobs[i].ended_age_s >= 0;
}

static size_t live_jobs(const struct rdzv_status *st)
{
    size_t n = 0;

    for (size_t i = 0; i < st->n_jobs; i++)
        n += !kept_ended(st, i);
    return n;
}

/* Jobs that ended and are kept: the newest of each run id (a run id used again within
 * --keep-ended would repeat a series). */
/* rdzvd_recovery_phase_seconds: each recovery's phases since rdzvd started, by cause. */
static int put_recovery_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    static const enum rdzv_mark_kind causes[] = {RDZV_MARK_FAILURE, RDZV_MARK_NODE_LOST,
                                                 RDZV_MARK_PUT_ASIDE, RDZV_MARK_RESTART};
    int r = rdzv_buf_printf(b, "# HELP rdzvd_recovery_phase_seconds Each recovery's phases, by "
                               "cause: stop (detected to workers stopped), rendezvous, nccl "
                               "(ranks and NCCL ids sent), first_step, total.\n"
                               "# TYPE rdzvd_recovery_phase_seconds histogram\n");

    for (unsigned c = 0; c < RDZV_ARRAY_SIZE(causes); c++)
        for (unsigned ph = 0; ph < _RDZV_RECOVERY_PHASES; ph++) {
            const struct rdzv_hist *h = &st->recovery[causes[c]][ph];
            char labels[96];
            uint64_t n = 0;

            snprintf(labels, sizeof(labels), "cause=\"%s\",phase=\"%s\"",
                     rdzv_mark_names[causes[c]], rdzv_recovery_phase_names[ph]);
            for (unsigned i = 0; i <= RDZV_HIST_BUCKETS; i++) {
                n += h->in[i];
                if (i < RDZV_HIST_BUCKETS)
                    r |= rdzv_buf_printf(b, "rdzvd_recovery_phase_seconds_bucket{%s,le=\"%g\"} "
                                            "%llu\n", labels, rdzv_hist_bounds_s[i],
                                         (unsigned long long)n);
                else
                    r |= rdzv_buf_printf(b, "rdzvd_recovery_phase_seconds_bucket{%s,le=\"+Inf\"} "
                                            "%llu\n", labels, (unsigned long long)n);
            }
            r |= rdzv_buf_printf(b, "rdzvd_recovery_phase_seconds_sum{%s} %.6f\n"
                                    "rdzvd_recovery_phase_seconds_count{%s} %llu\n",
                                 labels, h->sum, labels, (unsigned long long)h->count);
        }
    return r;
}

static int put_ended_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    static const char *const names[] = {"rdzvd_job_ended_exit_code",
                                        "rdzvd_job_ended_duration_seconds",
                                        "rdzvd_job_ended_age_seconds",
                                        "rdzvd_job_ended_restarts",
                                        "rdzvd_job_ended_generation"};
    static const char *const helps[] = {
        "Exit code of a job that ended (0: succeeded), kept for --keep-ended.",
        "How long a job that ended ran, from its first JOIN to its end.",
        "Seconds since a job ended.", "Restarts a job that ended used.",
        "The last generation of a job that ended."};
    int r = 0;

    for (unsigned m = 0; m < RDZV_ARRAY_SIZE(names); m++) {
        r |= rdzv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", names[m], helps[m], names[m]);
        for (size_t i = 0; i < st->n_jobs; i++) {
            const struct rdzv_status_job *j = &st->jobs[i];
            bool newer = false;

            if (!kept_ended(st, i))
                continue;
            for (size_t k = i + 1; k < st->n_jobs && !newer; k++)
                newer = kept_ended(st, k) && strcmp(st->jobs[k].run_id, j->run_id) == 0;
            if (newer)
                continue;
            r |= rdzv_buf_printf(b, "%s{job=\"", names[m]);
            r |= rdzv_buf_put_escaped(b, j->run_id, false);
            r |= rdzv_buf_printf(b, "\",outcome=\"");
            r |= rdzv_buf_put_escaped(b, j->outcome_type, false);
            if (m == 0)
                r |= rdzv_buf_printf(b, "\"} %lld\n", (long long)j->outcome_exit_code);
            else if (m == 1)
                r |= rdzv_buf_printf(b, "\"} %.3f\n", j->duration_s);
            else if (m == 2)
                r |= rdzv_buf_printf(b, "\"} %.3f\n", j->ended_age_s);
            else if (m == 3)
                r |= rdzv_buf_printf(b, "\"} %lld\n", (long long)j->restart_count);
            else
                r |= rdzv_buf_printf(b, "\"} %llu\n", (unsigned long long)j->generation);
        }
    }
    return r;
}

static int put_rank_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"rdzvd_rank_last_step", "The last step the rank reported (RDZV_PROGRESS_FD)."},
        {"rdzvd_rank_progress_age_seconds", "Seconds since the rank last reported progress."},
    };
    int r = 0;

    for (unsigned g = 0; g < RDZV_ARRAY_SIZE(gauges); g++) {
        r |= rdzv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g].name, gauges[g].help,
                     gauges[g].name);
        for (size_t i = 0; i < st->n_jobs; i++)
            for (size_t k = 0; k < st->jobs[i].n_ranks; k++) {
                const struct rdzv_status_rank *rk = &st->jobs[i].ranks[k];

                r |= rdzv_buf_printf(b, "%s{job=\"", gauges[g].name);
                r |= rdzv_buf_put_escaped(b, st->jobs[i].run_id, false);
                r |= rdzv_buf_printf(b, "\",rank=\"%lld\",node_rank=\"%lld\",host=\"", (long long)rk->rank,
                             (long long)rk->node_rank);
                r |= rdzv_buf_put_escaped(b, rk->host, false);
                if (g == 0)
                    r |= rdzv_buf_printf(b, "\"} %lld\n", (long long)rk->step);
                else
                    r |= rdzv_buf_printf(b, "\"} %.3f\n", rk->age_s);
            }
    }
    return r;
}

static const char *const job_states[] = {"forming", "nccl", "running", "stopping", "ended",
                                         "waiting"};

char *rdzvd_http_metrics(const struct rdzvd_jobs *jobs)
{
    struct rdzv_buf b = {0};
    struct rdzv_status st;
    int r = 0;

    if (rdzvd_jobs_status(jobs, &st) < 0)
        return NULL;
    rdzv_status_hide_node_ids(&st); /* nobody proves a token on the metrics port */
    r |=
        rdzv_buf_printf(&b,
                "# HELP rdzvd_uptime_seconds Seconds since rdzvd started.\n"
                "# TYPE rdzvd_uptime_seconds gauge\nrdzvd_uptime_seconds %.3f\n"
                "# HELP rdzvd_connections Open client connections (agents and stores).\n"
                "# TYPE rdzvd_connections gauge\nrdzvd_connections %lld\n"
                "# HELP rdzvd_connections_accepted_total Connections accepted.\n"
                "# TYPE rdzvd_connections_accepted_total counter\n"
                "rdzvd_connections_accepted_total %lld\n"
                "# HELP rdzvd_connections_rejected_total Connections refused at accept.\n"
                "# TYPE rdzvd_connections_rejected_total counter\n"
                "rdzvd_connections_rejected_total %lld\n"
                "# HELP rdzvd_protocol_errors_total Connections closed for a protocol error.\n"
                "# TYPE rdzvd_protocol_errors_total counter\nrdzvd_protocol_errors_total %lld\n"
                "# HELP rdzvd_requests_total Store requests served.\n"
                "# TYPE rdzvd_requests_total counter\nrdzvd_requests_total %lld\n"
                "# HELP rdzvd_store_keys Keys in the main store.\n"
                "# TYPE rdzvd_store_keys gauge\nrdzvd_store_keys{store=\"main\"} %lld\n"
                "# HELP rdzvd_jobs Jobs known to rdzvd (not those that ended and are only kept).\n# TYPE rdzvd_jobs gauge\nrdzvd_jobs %zu\n",
                st.uptime_s, (long long)st.connections, (long long)st.accepted,
                (long long)st.rejected, (long long)st.protocol_errors, (long long)st.requests,
                (long long)st.main_store_keys, live_jobs(&st));
    /* Each an int64_t (generation: uint64_t) of struct rdzv_status_job. */
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } per_job[] = {
        {"rdzvd_job_generation", "gauge", "Current generation of the job.",
         offsetof(struct rdzv_status_job, generation)},
        {"rdzvd_job_restarts_total", "counter", "Restarts used from the job's budget.",
         offsetof(struct rdzv_status_job, restart_count)},
        {"rdzvd_job_max_restarts", "gauge", "The job's restart budget.",
         offsetof(struct rdzv_status_job, max_restarts)},
        {"rdzvd_job_nodes", "gauge", "Nodes in the job's current generation.",
         offsetof(struct rdzv_status_job, nodes_in_generation)},
        {"rdzvd_job_world_size", "gauge", "Workers in the job's current generation.",
         offsetof(struct rdzv_status_job, world_size)},
        {"rdzvd_job_members_not_listed", "gauge",
         "The job's members (spares included) left out of the per-node metrics and the status.",
         offsetof(struct rdzv_status_job, members_left_out)},
    };
    for (unsigned m = 0; m < RDZV_ARRAY_SIZE(per_job); m++) {
        r |= rdzv_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", per_job[m].name, per_job[m].help,
                     per_job[m].name, per_job[m].type);
        for (size_t i = 0; i < st.n_jobs; i++) {
            const int64_t *v = (const int64_t *)((const char *)&st.jobs[i] + per_job[m].off);

            if (kept_ended(&st, i))
                continue;
            r |= rdzv_buf_printf(&b, "%s{job=\"", per_job[m].name);
            r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
            r |= rdzv_buf_printf(&b, "\"} %lld\n", (long long)*v);
        }
    }
    r |= rdzv_buf_printf(&b, "# HELP rdzvd_job_state 1 for the job's current state.\n"
                     "# TYPE rdzvd_job_state gauge\n");
    for (size_t i = 0; i < st.n_jobs; i++) {
        if (kept_ended(&st, i))
            continue;
        for (unsigned s = 0; s < RDZV_ARRAY_SIZE(job_states); s++) {
            r |= rdzv_buf_printf(&b, "rdzvd_job_state{job=\"");
            r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
            r |= rdzv_buf_printf(&b, "\",state=\"%s\"} %d\n", job_states[s],
                         strcmp(st.jobs[i].state, job_states[s]) == 0);
        }
    }
    r |= rdzv_buf_printf(&b, "# HELP rdzvd_node_heartbeat_age_seconds Seconds since the node's agent "
                     "was last heard.\n# TYPE rdzvd_node_heartbeat_age_seconds gauge\n");
    for (size_t i = 0; i < st.n_jobs; i++) {
        for (size_t k = 0; k < st.jobs[i].n_nodes; k++) {
            const struct rdzv_status_node *n = &st.jobs[i].nodes[k];

            r |= rdzv_buf_printf(&b, "rdzvd_node_heartbeat_age_seconds{job=\"");
            r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
            r |= rdzv_buf_printf(&b, "\",node_id=\"");
            r |= rdzv_buf_put_escaped(&b, n->node_id, false);
            r |= rdzv_buf_printf(&b, "\",host=\"");
            r |= rdzv_buf_put_escaped(&b, n->host, false);
            r |= rdzv_buf_printf(&b, "\",node_rank=\"%lld\"} %.3f\n", (long long)n->node_rank,
                         n->last_heartbeat_age_s);
        }
    }
    r |= rdzv_buf_printf(&b, "# HELP rdzvd_node_compute_ms The compute time (ms) of the node's "
                             "slowest rank: the median of its last steps'.\n"
                             "# TYPE rdzvd_node_compute_ms gauge\n");
    for (size_t i = 0; i < st.n_jobs; i++)
        for (size_t k = 0; k < st.jobs[i].n_nodes; k++) {
            const struct rdzv_status_node *n = &st.jobs[i].nodes[k];

            if (n->compute_ms < 0)
                continue;
            r |= rdzv_buf_printf(&b, "rdzvd_node_compute_ms{job=\"");
            r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
            r |= rdzv_buf_printf(&b, "\",node_id=\"");
            r |= rdzv_buf_put_escaped(&b, n->node_id, false);
            r |= rdzv_buf_printf(&b, "\",host=\"");
            r |= rdzv_buf_put_escaped(&b, n->host, false);
            r |= rdzv_buf_printf(&b, "\",node_rank=\"%lld\"} %lld\n", (long long)n->node_rank,
                                 (long long)n->compute_ms);
        }
    r |= rdzv_buf_printf(&b,
                 "# HELP rdzvd_nodes_put_aside_total Nodes put aside by their jobs since rdzvd "
                 "started, by reason.\n# TYPE rdzvd_nodes_put_aside_total counter\n"
                 "rdzvd_nodes_put_aside_total{reason=\"failures\"} %lld\n"
                 "rdzvd_nodes_put_aside_total{reason=\"check\"} %lld\n",
                 (long long)st.put_aside_failures, (long long)st.put_aside_check);
    r |= rdzv_buf_printf(&b, "# HELP rdzvd_job_steps_per_second Rank 0's training steps per "
                             "second over rdzvd's last %.0f s (of the progress it reports).\n"
                             "# TYPE rdzvd_job_steps_per_second gauge\n",
                         RDZVD_TIMELINE_RATE_WINDOW_S);
    for (size_t i = 0; i < st.n_jobs; i++) {
        if (kept_ended(&st, i) || !st.jobs[i].rate_known)
            continue;
        r |= rdzv_buf_printf(&b, "rdzvd_job_steps_per_second{job=\"");
        r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
        r |= rdzv_buf_printf(&b, "\"} %.3f\n", st.jobs[i].steps_per_second);
    }
    r |= rdzv_buf_printf(&b, "# HELP rdzvd_job_nodes_put_aside Nodes the job put aside.\n"
                     "# TYPE rdzvd_job_nodes_put_aside gauge\n");
    for (size_t i = 0; i < st.n_jobs; i++) {
        if (kept_ended(&st, i))
            continue;
        r |= rdzv_buf_printf(&b, "rdzvd_job_nodes_put_aside{job=\"");
        r |= rdzv_buf_put_escaped(&b, st.jobs[i].run_id, false);
        r |= rdzv_buf_printf(&b, "\"} %lld\n", (long long)st.jobs[i].aside_total);
    }
    r |= put_rank_metrics(&b, &st);
    r |= put_ended_metrics(&b, &st);
    r |= put_recovery_metrics(&b, &st);
    rdzv_status_free(&st);
    return rdzv_buf_take_str(&b, r ? -ENOMEM : 0);
}

/* The status document (rdzv_status_to_json), indented: a malloc'd string or NULL. */
static char *status_json(const struct rdzvd_jobs *jobs)
{
    struct rdzv_status st;
    char *body;
    json_t *o;

    if (rdzvd_jobs_status(jobs, &st) < 0)
        return NULL;
    rdzv_status_hide_node_ids(&st); /* nobody proves a token on the metrics port */
    o = rdzv_status_to_json(&st);
    rdzv_status_free(&st);
    body = o ? json_dumps(o, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return body;
}

/* ---- answers ---- */

/* An answer's body, shared by the connections that write it (the cached status page). */
struct http_body {
    unsigned refs;
    bool owned; /* data is malloc'd (else a string literal) */
    size_t len;
    char *data;
};

static struct http_body *body_new(char *data, bool owned)
{
    struct http_body *b;

    if (!data)
        return NULL;
    b = calloc(1, sizeof(*b));
    if (!b) {
        if (owned)
            free(data);
        return NULL;
    }
    b->refs = 1;
    b->owned = owned;
    b->data = data;
    b->len = strlen(data);
    return b;
}

static struct http_body *body_ref(struct http_body *b)
{
    if (b)
        b->refs++;
    return b;
}

static void body_unref(struct http_body *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->owned)
        free(b->data);
    free(b);
}

/* ---- connections ---- */

static void http_conn_close_cb(uv_handle_t *hd)
{
    struct http_conn *c = hd->data;

    if (--c->closes > 0)
        return;
    rdzv_buf_free(&c->out);
    body_unref(c->body);
    free(c);
}

static void http_conn_close(struct http_conn *c)
{
    if (c->closes)
        return;
    c->closes = 2;
    if (c->state == HTTP_QUEUED)
        rdzv_list_del(&c->qnode);
    rdzv_list_del(&c->node);
    c->h->nconns--;
    uv_close((uv_handle_t *)&c->timer, http_conn_close_cb);
    uv_close((uv_handle_t *)&c->tcp, http_conn_close_cb);
}

static void http_write_cb(uv_write_t *req, int status)
{
    (void)status;
    http_conn_close(req->data);
}

/* A request refused (400, 405, 413), cut off (no whole request in time) or an answer its client
 * did not read: one warning with the peer's address, rate-limited like every log line a stranger
 * can cause. */
static void http_note_bad(struct http_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void http_note_bad(struct http_conn *c, const char *fmt, ...)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char addr[INET6_ADDRSTRLEN] = "?", more[64] = "", what[128];
    uint64_t suppressed = 0;
    int port = 0;
    va_list ap;

    if (!rdzvd_ratelimit_ok(&c->h->bad, uv_now(c->tcp.loop), &suppressed))
        return;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            (void)uv_ip6_name((struct sockaddr_in6 *)&ss, addr, sizeof(addr));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else if (ss.ss_family == AF_INET) {
            (void)uv_ip4_name((struct sockaddr_in *)&ss, addr, sizeof(addr));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    if (suppressed)
        snprintf(more, sizeof(more), " (%" PRIu64 " similar lines suppressed)", suppressed);
    log_warn("status page: %s port %d: %s; closed%s", addr, port, what, more);
}

static void http_timeout_cb(uv_timer_t *t);

/* Answer with body (its reference taken; NULL: out of memory, a 500), then close. The client has
 * RDZVD_HTTP_WRITE_TIMEOUT_MS to read it. */
static void http_respond(struct http_conn *c, int code, const char *ctype, struct http_body *body)
{
    const char *reason = code == 200   ? "OK"
                         : code == 404 ? "Not Found"
                         : code == 405 ? "Method Not Allowed"
                         : code == 400 ? "Bad Request"
                         : code == 413 ? "Content Too Large"
                                       : "Internal Server Error";
    uv_buf_t ub[2];
    int r;

    if (!body) {
        code = 500;
        reason = "Internal Server Error";
        ctype = "text/plain; charset=utf-8";
        body = body_new("out of memory\n", false);
        if (!body) {
            http_conn_close(c);
            return;
        }
    }
    c->body = body;
    c->state = HTTP_WRITING;
    uv_read_stop((uv_stream_t *)&c->tcp);
    r = rdzv_buf_printf(&c->out,
                "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                "Connection: close\r\n\r\n",
                code, reason, ctype, body->len);
    if (r < 0 || uv_timer_start(&c->timer, http_timeout_cb, RDZVD_HTTP_WRITE_TIMEOUT_MS, 0) < 0) {
        http_conn_close(c);
        return;
    }
    c->h->turn_bytes += c->out.len + (c->head ? 0 : body->len);
    ub[0] = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
    ub[1] = uv_buf_init(body->data, (unsigned)body->len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, ub, c->head ? 1 : 2, http_write_cb) < 0)
        http_conn_close(c);
}

static void http_respond_text(struct http_conn *c, int code, const char *text)
{
    http_respond(c, code, "text/plain; charset=utf-8", body_new((char *)text, false));
}

/* The status page, made at most once per RDZVD_PAGE_TTL_MS (a new reference), or NULL when out
 * of memory; -EAGAIN in *err when it would have to be made and may_render is false. */
static struct http_body *http_page(struct rdzvd_http *h, bool may_render, int *err)
{
    uint64_t now = uv_now(h->tcp.loop);

    if (h->page && now - h->page_ms < RDZVD_PAGE_TTL_MS)
        return body_ref(h->page);
    if (!may_render) {
        *err = -EAGAIN;
        return NULL;
    }
    body_unref(h->page);
    h->page = body_new(rdzvd_http_page(h->jobs), true);
    h->page_ms = now;
    return body_ref(h->page);
}

/* The run id of path "/job/ID" (percent-decoded) into id: 0, -EINVAL (bad encoding) or -ENOENT
 * (no run id can be this: too long, or a NUL). */
static int job_path_run_id(const char *enc, char *id, size_t size)
{
    size_t n = 0;

    for (; *enc; enc++) {
        unsigned v;
        char hex[3];

        if (n + 1 >= size)
            return -ENOENT;
        if (*enc != '%') {
            id[n++] = *enc;
            continue;
        }
        if (!isxdigit((unsigned char)enc[1]) || !isxdigit((unsigned char)enc[2]))
            return -EINVAL;
        memcpy(hex, enc + 1, 2);
        hex[2] = '\0';
        v = (unsigned)strtoul(hex, NULL, 16);
        if (v == 0)
            return -ENOENT;
        id[n++] = (char)v;
        enc += 2;
    }
    id[n] = '\0';
    return n > 0 ? 0 : -ENOENT;
}

static void http_serve_job(struct http_conn *c, const char *enc)
{
    char id[RDZV_ID_MAX + 1], *page = NULL;
    int r = job_path_run_id(enc, id, sizeof(id));

    if (r == -EINVAL) {
        http_note_bad(c, "a job path with a bad percent-encoding (400)");
        http_respond_text(c, 400, "bad request: a run id is percent-encoded\n");
        return;
    }
    if (r == 0)
        r = rdzvd_http_job_page(c->h->jobs, id, &page);
    if (r == -ENOENT) {
        http_respond_text(c, 404, "no such job: / lists the jobs rdzvd knows\n");
        return;
    }
    http_respond(c, 200, "text/html; charset=utf-8", r == 0 ? body_new(page, true) : NULL);
}

/* Answer c's request: 1 when it made a page (the expensive part), 0 when not, -EAGAIN (nothing
 * done) when it would have to and may_render is false. */
static int http_serve(struct http_conn *c, bool may_render)
{
    char method[8], path[512];
    struct http_body *body = NULL;
    const char *ctype = "text/plain; version=0.0.4; charset=utf-8";
    int err = 0;

    if (sscanf(c->req, "%7s %511s HTTP/1.%*c", method, path) != 2) {
        http_note_bad(c, "not an HTTP request line (400)");
        http_respond_text(c, 400, "bad request\n");
        return 0;
    }
    c->head = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") && !c->head) {
        http_note_bad(c, "a method other than GET or HEAD (405)");
        http_respond_text(c, 405, "only GET\n");
        return 0;
    }
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        body = http_page(c->h, may_render, &err);
        if (err == -EAGAIN)
            return err;
        http_respond(c, 200, "text/html; charset=utf-8", body);
        return 1;
    }
    if (strlen(path) >= sizeof(path) - 1 ||
        (strcmp(path, "/metrics") && strcmp(path, "/status.json") && strncmp(path, "/job/", 5))) {
        http_respond_text(c, 404, "not found: try /, /metrics or /status.json (a job: "
                                  "/job/RUN_ID)\n");
        return 0;
    }
    if (!may_render)
        return -EAGAIN;
    if (strncmp(path, "/job/", 5) == 0) {
        http_serve_job(c, path + 5);
        return 1;
    }
    if (strcmp(path, "/metrics") == 0) {
        body = body_new(rdzvd_http_metrics(c->h->jobs), true);
    } else {
        body = body_new(status_json(c->h->jobs), true);
        ctype = "application/json";
    }
    http_respond(c, 200, ctype, body);
    return 1;
}

static void http_listen_cb(uv_stream_t *s, int status);

/* Once per turn of the loop while requests or a connection wait: accept the connection, and
 * answer the requests in order until RDZVD_HTTP_TURN_BYTES are written, making at most one page
 * (the store's clients wait for no more than that); the others wait for the next turn. */
static void http_idle_cb(uv_idle_t *idle)
{
    struct rdzvd_http *h = idle->data;
    bool may_render = true;

    h->turn_accepts = 0;
    h->turn_bytes = 0;
    if (h->accept_waiting) {
        h->accept_waiting = false;
        http_listen_cb((uv_stream_t *)&h->tcp, 0); /* its uv_accept() resumes the listener */
    }
    while (!rdzv_list_empty(&h->queue) && h->turn_bytes < RDZVD_HTTP_TURN_BYTES) {
        struct http_conn *c = rdzv_container_of(h->queue.next, struct http_conn, qnode);
        int r;

        rdzv_list_del(&c->qnode);
        c->state = HTTP_WRITING;
        r = http_serve(c, may_render);
        if (r == -EAGAIN) { /* back at the head, for the next turn */
            c->state = HTTP_QUEUED;
            rdzv_list_add_tail(h->queue.next, &c->qnode);
            return;
        }
        may_render = may_render && r == 0;
    }
    if (rdzv_list_empty(&h->queue) && !h->accept_waiting)
        uv_idle_stop(&h->idle);
}

static void http_alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = hd->data;

    (void)suggested;
    *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void http_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = s->data;

    (void)buf;
    if (nread < 0) {
        http_conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    c->req[c->len] = '\0';
    if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
        uv_read_stop(s);
        c->state = HTTP_QUEUED;
        rdzv_list_add_tail(&c->h->queue, &c->qnode);
        if (uv_idle_start(&c->h->idle, http_idle_cb) < 0)
            http_conn_close(c);
    } else if (c->len >= sizeof(c->req) - 1) {
        http_note_bad(c, "a request past %d bytes (413)", RDZVD_HTTP_MAX_REQ);
        http_respond_text(c, 413, "request too large\n");
    }
}

static void http_timeout_cb(uv_timer_t *t)
{
    struct http_conn *c = t->data;

    if (c->state == HTTP_WRITING)
        http_note_bad(c, "its answer not read within %d ms", RDZVD_HTTP_WRITE_TIMEOUT_MS);
    else
        http_note_bad(c, "no whole request within %d ms", RDZVD_HTTP_TIMEOUT_MS);
    http_conn_close(c);
}

/* At RDZVD_HTTP_MAX_CONNS, the slot a newcomer may take: the oldest connection whose client does
 * not read its answer, or that has sent no whole request for RDZVD_HTTP_EVICT_AFTER_MS. NULL:
 * none (the newcomer is refused). */
static struct http_conn *http_victim(struct rdzvd_http *h, uint64_t now)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &h->conns)
    {
        struct http_conn *c = rdzv_container_of(pos, struct http_conn, node);

        if (c->state == HTTP_WRITING ||
            (c->state == HTTP_READING && now - c->since_ms >= RDZVD_HTTP_EVICT_AFTER_MS))
            return c;
    }
    return NULL;
}

static void http_listen_cb(uv_stream_t *s, int status)
{
    struct rdzvd_http *h = (struct rdzvd_http *)s;
    struct http_conn *c, *victim;

    if (status < 0 || h->stopping)
        return;
    if (h->turn_accepts >= RDZVD_HTTP_TURN_ACCEPTS) {
        /* Not accepted: libuv stops watching the listener until the idle callback accepts. */
        h->accept_waiting = true;
        if (uv_idle_start(&h->idle, http_idle_cb) == 0)
            return;
    }
    h->turn_accepts++;
    c = calloc(1, sizeof(*c));
    if (!c || uv_tcp_init(s->loop, &c->tcp) < 0) {
        free(c);
        return;
    }
    c->h = h;
    c->tcp.data = c;
    if (uv_timer_init(s->loop, &c->timer) < 0) {
        c->closes = 1; /* only the TCP handle to close; c is freed in its close callback */
        uv_close((uv_handle_t *)&c->tcp, http_conn_close_cb);
        return;
    }
    c->timer.data = c;
    c->since_ms = uv_now(s->loop);
    if (h->nconns >= RDZVD_HTTP_MAX_CONNS && (victim = http_victim(h, c->since_ms))) {
        http_note_bad(victim, "its slot given to a new connection (%d at once)",
                      RDZVD_HTTP_MAX_CONNS);
        http_conn_close(victim);
    }
    rdzv_list_add_tail(&h->conns, &c->node);
    h->nconns++;
    if (uv_accept(s, (uv_stream_t *)&c->tcp) < 0 || h->nconns > RDZVD_HTTP_MAX_CONNS) {
        http_conn_close(c);
        return;
    }
    if (uv_timer_start(&c->timer, http_timeout_cb, RDZVD_HTTP_TIMEOUT_MS, 0) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, http_alloc_cb, http_read_cb) < 0)
        http_conn_close(c);
}

static void http_free_cb(uv_handle_t *hd)
{
    struct rdzvd_http *h = hd->data;

    if (--h->closes > 0)
        return;
    body_unref(h->page);
    free(h);
}

int rdzvd_http_start(uv_loop_t *loop, const struct rdzvd_jobs *jobs, const char *addr,
                     uint16_t port, uint16_t *ret_port, struct rdzvd_http **ret)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), r;
    struct rdzvd_http *h;

    if (uv_ip4_addr(addr, port, (struct sockaddr_in *)&ss) < 0 &&
        uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&ss) < 0)
        return -EINVAL;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->jobs = jobs;
    rdzv_list_init(&h->conns);
    rdzv_list_init(&h->queue);
    r = uv_idle_init(loop, &h->idle);
    if (r < 0) {
        free(h);
        return r;
    }
    h->idle.data = h;
    r = uv_tcp_init(loop, &h->tcp);
    if (r < 0) {
        h->closes = 1;
        uv_close((uv_handle_t *)&h->idle, http_free_cb);
        return r;
    }
    h->tcp.data = h;
    h->closes = 2;
    r = uv_tcp_bind(&h->tcp, (const struct sockaddr *)&ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&h->tcp, 64, http_listen_cb);
    if (r == 0)
        r = uv_tcp_getsockname(&h->tcp, (struct sockaddr *)&ss, &len);
    if (r < 0) {
        h->stopping = true;
        uv_close((uv_handle_t *)&h->idle, http_free_cb);
        uv_close((uv_handle_t *)&h->tcp, http_free_cb);
        return r;
    }
    *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *ret = h;
    return 0;
}

void rdzvd_http_stop(struct rdzvd_http *h)
{
    if (!h || h->stopping)
        return;
    h->stopping = true;
    while (!rdzv_list_empty(&h->conns))
        http_conn_close(rdzv_container_of(h->conns.next, struct http_conn, node));
    uv_close((uv_handle_t *)&h->idle, http_free_cb);
    uv_close((uv_handle_t *)&h->tcp, http_free_cb);
}
