/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status.c: struct rdzv_status <-> the status JSON (STATUS_REPLY, /status.json). */
#include "proto/rdzv-status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg-priv.h"

int rdzv_status_alloc_jobs(struct rdzv_status *st, size_t n)
{
    struct rdzv_status_job *jobs;

    jobs = calloc(n ? n : 1, sizeof(*jobs));
    if (!jobs)
        return -ENOMEM;
    for (size_t i = 0; i < st->n_jobs; i++)
        rdzv_status_job_free_arrays(&st->jobs[i]);
    free(st->jobs);
    st->jobs = jobs;
    st->n_jobs = n;
    return 0;
}

int rdzv_status_alloc_nodes(struct rdzv_status_job *j, size_t n)
{
    struct rdzv_status_node *nodes;

    nodes = calloc(n ? n : 1, sizeof(*nodes));
    if (!nodes)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        nodes[i].compute_ms = -1, nodes[i].loop_stall_max_s = -1, /* none said */
            nodes[i].preflight_mbps = -1;
    free(j->nodes);
    j->nodes = nodes;
    j->n_nodes = n;
    return 0;
}

int rdzv_status_alloc_ranks(struct rdzv_status_job *j, size_t n)
{
    struct rdzv_status_rank *ranks;

    ranks = calloc(n ? n : 1, sizeof(*ranks));
    if (!ranks)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        ranks[i].compute_ms = -1; /* none said */
    free(j->ranks);
    j->ranks = ranks;
    j->n_ranks = n;
    return 0;
}

int rdzv_status_alloc_timeline(struct rdzv_status_job *j)
{
    struct rdzv_status_timeline *tl = calloc(1, sizeof(*tl));

    if (!tl)
        return -ENOMEM;
    free(j->timeline);
    j->timeline = tl;
    return 0;
}

void rdzv_status_job_free_arrays(struct rdzv_status_job *j)
{
    free(j->nodes);
    free(j->ranks);
    free(j->timeline);
    j->nodes = NULL;
    j->ranks = NULL;
    j->timeline = NULL;
    j->n_nodes = j->n_ranks = 0;
}

void rdzv_status_free(struct rdzv_status *st)
{
    for (size_t i = 0; i < st->n_jobs; i++)
        rdzv_status_job_free_arrays(&st->jobs[i]);
    free(st->jobs);
    memset(st, 0, sizeof(*st));
}

void rdzv_status_step_range(const struct rdzv_status_job *j, int64_t *lo, int64_t *hi)
{
    *lo = j->n_ranks ? INT64_MAX : 0;
    *hi = 0;
    for (size_t k = 0; k < j->n_ranks; k++) {
        *lo = j->ranks[k].step < *lo ? j->ranks[k].step : *lo;
        *hi = j->ranks[k].step > *hi ? j->ranks[k].step : *hi;
    }
}

static int rank_older_first(const void *a, const void *b)
{
    const struct rdzv_status_rank *x = *(const struct rdzv_status_rank *const *)a;
    const struct rdzv_status_rank *y = *(const struct rdzv_status_rank *const *)b;

    if (x->age_s != y->age_s)
        return x->age_s > y->age_s ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

const struct rdzv_status_rank **rdzv_status_ranks_oldest(const struct rdzv_status_job *j)
{
    const struct rdzv_status_rank **v;

    if (j->n_ranks == 0)
        return NULL;
    v = calloc(j->n_ranks, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t k = 0; k < j->n_ranks; k++)
        v[k] = &j->ranks[k];
    qsort(v, j->n_ranks, sizeof(*v), rank_older_first);
    return v;
}

/* ---- encode: the member names and order rdzvd has always written ---- */

/* "nodes_put_aside": "network" (1.23) only once one was, as before it. */
static json_t *aside_json(const struct rdzv_status *st)
{
    json_t *o = json_pack("{s:I, s:I, s:I}", "failures", (json_int_t)st->put_aside_failures,
                          "check", (json_int_t)st->put_aside_check, "straggler",
                          (json_int_t)st->put_aside_straggler);

    return st->put_aside_network
               ? rdzv_json_set(o, "network", json_integer((json_int_t)st->put_aside_network))
               : o;
}

static json_t *node_to_json(const struct rdzv_status_node *n)
{
    bool scored = n->straggler_score > 0;

    /* compute_ms only when a rank said one, the straggler's only when scored, the loop's stall
     * when the agent said one (s:o* leaves a NULL out) */
    return json_pack("{s:s, s:s, s:I, s:I, s:f, s:f, s:I, s:b, s:b, s:s, s:o*, s:o*, s:o*, "
                     "s:o*, s:o*}",
                     "host", n->host, "node_id", n->node_id, "node_rank",
                     (json_int_t)n->node_rank, "workers", (json_int_t)n->workers,
                     "last_heartbeat_age_s", n->last_heartbeat_age_s, "age_s", n->age_s,
                     "failures", (json_int_t)n->failures, "spare", n->spare, "connected",
                     n->connected, "state", n->state, "compute_ms",
                     n->compute_ms >= 0 ? json_integer(n->compute_ms) : NULL, "straggler_score",
                     scored ? json_real(n->straggler_score) : NULL, "straggler",
                     scored ? json_boolean(n->straggler) : NULL, "loop_stall_max_s",
                     n->loop_stall_max_s >= 0 ? json_real(n->loop_stall_max_s) : NULL,
                     "preflight_mbps",
                     n->preflight_mbps >= 0 ? json_real(n->preflight_mbps) : NULL);
}

static json_t *rank_to_json(const struct rdzv_status_rank *k)
{
    json_t *o = json_pack("{s:I, s:I, s:s, s:I, s:f}", "rank", (json_int_t)k->rank, "node_rank",
                          (json_int_t)k->node_rank, "host", k->host, "step", (json_int_t)k->step,
                          "age_s", k->age_s);

    if (o && ((k->timeout_s > 0 &&
               json_object_set_new(o, "timeout_s", json_real(k->timeout_s)) < 0) ||
              (k->compute_ms >= 0 &&
               json_object_set_new(o, "compute_ms", json_integer(k->compute_ms)) < 0))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static json_t *timeline_to_json(const struct rdzv_status_timeline *tl)
{
    json_t *bands = json_array(), *marks = json_array(), *rates = json_array();

    for (unsigned i = 0; i < tl->n_bands && i < RDZV_STATUS_BANDS; i++) {
        const struct rdzv_status_band *b = &tl->bands[i];

        json_array_append_new(bands, json_pack("{s:I, s:f, s:f, s:I, s:I}", "generation",
                                               (json_int_t)b->generation, "start", b->start, "end",
                                               b->end, "world_size", (json_int_t)b->world_size,
                                               "nodes", (json_int_t)b->nodes));
    }
    for (unsigned i = 0; i < tl->n_marks && i < RDZV_STATUS_MARKS; i++) {
        const struct rdzv_status_mark *m = &tl->marks[i];

        json_array_append_new(
            marks, json_pack("{s:f, s:I, s:s, s:s}", "time", m->time, "generation",
                             (json_int_t)m->generation, "kind",
                             (unsigned)m->kind < _RDZV_MARK_MAX ? rdzv_mark_names[m->kind] : "?",
                             "text", m->text));
    }
    for (unsigned i = 0; i < tl->n_rates && i < RDZV_STATUS_RATES; i++)
        json_array_append_new(rates, json_real(tl->rates[i]));
    return json_pack("{s:o, s:o, s:{s:f, s:f, s:o}, s:o}", "generations", bands, "marks", marks,
                     "steps_per_second", "start", tl->rate_start, "interval_s", tl->rate_interval_s,
                     "rates", rates, "recoveries", rdzv_status_recoveries_to_json(tl));
}

/* j as JSON; brief: without its nodes, ranks and timeline (counted as left out instead). */
static json_t *job_to_json(const struct rdzv_status_job *j, bool brief)
{
    json_t *nodes = json_array(), *events = json_array(), *ranks = json_array(), *o;
    size_t n_nodes = brief ? 0 : j->n_nodes, n_ranks = brief ? 0 : j->n_ranks;

    for (size_t i = 0; i < n_nodes; i++)
        json_array_append_new(nodes, node_to_json(&j->nodes[i]));
    for (size_t i = 0; i < n_ranks; i++)
        json_array_append_new(ranks, rank_to_json(&j->ranks[i]));
    for (unsigned i = 0; i < j->n_events && i < RDZV_STATUS_EVENTS; i++)
        json_array_append_new(
            events, json_pack("{s:f, s:s}", "time", j->events[i].time, "text", j->events[i].text));
    o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:o, s:o}", "run_id",
                  j->run_id, "state", j->state, "generation", (json_int_t)j->generation,
                  "restart_count", (json_int_t)j->restart_count, "max_restarts",
                  (json_int_t)j->max_restarts, "min_nodes", (json_int_t)j->min_nodes, "max_nodes",
                  (json_int_t)j->max_nodes, "nodes_in_generation",
                  (json_int_t)j->nodes_in_generation, "world_size", (json_int_t)j->world_size,
                  "age_s", j->age_s, "store_port", j->store_port, "nodes", nodes, "events", events);
    if (o) {
        json_object_set_new(o, "ranks", ranks);
        json_object_set_new(o, "ranks_left_out",
                            json_integer((json_int_t)(j->ranks_left_out + j->n_ranks - n_ranks)));
        json_object_set_new(o, "members_left_out",
                            json_integer((json_int_t)(j->members_left_out + j->n_nodes - n_nodes)));
    } else {
        json_decref(ranks);
    }
    if (o && j->aside_total > 0) {
        json_t *a = json_array();

        for (unsigned i = 0; a && i < j->n_aside && i < RDZV_STATUS_ASIDE; i++) {
            const struct rdzv_status_aside *x = &j->aside[i];
            json_t *e = json_pack("{s:s, s:s, s:I, s:s}", "node_id", x->node_id, "host",
                                  x->host, "failures", (json_int_t)x->failures, "reason",
                                  x->reason);

            if (e && x->n_gpus)
                json_object_set_new(e, "gpu_uuids",
                                    rdzv_gpu_uuids_to_json(x->gpus, x->n_gpus <
                                                           RDZV_STATUS_ASIDE_GPUS
                                                               ? x->n_gpus
                                                               : RDZV_STATUS_ASIDE_GPUS));
            if (e && x->gpus_left_out > 0)
                json_object_set_new(e, "gpu_uuids_left_out",
                                    json_integer((json_int_t)x->gpus_left_out));
            json_array_append_new(a, e);
        }
        json_object_set_new(o, "put_aside", a);
        json_object_set_new(o, "put_aside_total", json_integer((json_int_t)j->aside_total));
    }
    if (o && j->rate_known)
        json_object_set_new(o, "steps_per_second", json_real(j->steps_per_second));
    if (o && j->timeline && !brief)
        json_object_set_new(o, "timeline", timeline_to_json(j->timeline));
    if (o && j->timeline && !brief && j->timeline->cost[0])
        json_object_set_new(o, "cost", json_string(j->timeline->cost));
    if (o && j->ended)
        json_object_set_new(o, "outcome",
                            json_pack("{s:s, s:I, s:s, s:f, s:f}", "type", j->outcome_type,
                                      "exit_code", (json_int_t)j->outcome_exit_code, "summary",
                                      j->outcome_summary, "duration_s", j->duration_s,
                                      "ended_age_s", j->ended_age_s));
    return o;
}

/* The compact JSON size of o, with the comma that separates it from the one before. */
static size_t json_cost(const json_t *o)
{
    return json_dumpb(o, NULL, 0, JSON_COMPACT) + 1;
}

json_t *rdzv_status_to_json(const struct rdzv_status *st)
{
    json_t *jobs = json_array(), *root;
    int64_t left_out = st->jobs_left_out;
    size_t used;

    root =
        json_pack("{s:s, s:s, s:I, s:f, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}", "daemon",
                  st->daemon, "version", st->version, "port", (json_int_t)st->port, "uptime_s",
                  st->uptime_s, "stats", "connections", (json_int_t)st->connections, "accepted",
                  (json_int_t)st->accepted, "rejected", (json_int_t)st->rejected, "protocol_errors",
                  (json_int_t)st->protocol_errors, "requests", (json_int_t)st->requests,
                  "main_store_keys", (json_int_t)st->main_store_keys, "jobs", jobs);
    if (!root)
        return NULL;
    /* Written once there is one, as the limits are. */
    if (st->outbuf_closes > 0 &&
        json_object_set_new(json_object_get(root, "stats"), "outbuf_closes",
                            json_integer((json_int_t)st->outbuf_closes)) < 0) {
        json_decref(root);
        return NULL;
    }
    if (rdzv_status_limits_put(root, st) < 0) {
        json_decref(root);
        return NULL;
    }
    /* Absent while none was (an older reader never sees it, and the parse reads 0). */
    if ((st->put_aside_failures || st->put_aside_check || st->put_aside_straggler ||
         st->put_aside_network) &&
        json_object_set_new(root, "nodes_put_aside", aside_json(st)) < 0) {
        json_decref(root);
        return NULL;
    }
    /* The frame: what is there now, plus "jobs_left_out" with room for any count. */
    used = json_cost(root) + 40;
    for (size_t i = 0; i < st->n_jobs; i++) {
        json_t *o = job_to_json(&st->jobs[i], false);
        size_t cost = o ? json_cost(o) : 0;

        if (o && used + cost > RDZV_STATUS_JSON_MAX) {
            json_decref(o);
            o = job_to_json(&st->jobs[i], true);
            cost = o ? json_cost(o) : 0;
        }
        if (!o || used + cost > RDZV_STATUS_JSON_MAX) {
            json_decref(o);
            left_out++;
            continue;
        }
        json_array_append_new(jobs, o);
        used += cost;
    }
    json_object_set_new(root, "jobs_left_out", json_integer((json_int_t)left_out));
    return root;
}

int rdzv_status_put_reply(struct rdzv_buf *b, const struct rdzv_status *st)
{
    return rdzv_msg_put(b, RDZV_MSG_STATUS_REPLY, rdzv_status_to_json(st));
}

/* ---- decode: each helper leaves a reason in err; callers prefix where it was found ---- */

/* err = "<where>: <err>". Returns -EBADMSG. */
static int fail_at(char *err, size_t errlen, const char *where)
{
    char why[256];

    snprintf(why, sizeof(why), "%s", err);
    snprintf(err, errlen, "%s: %s", where, why);
    return -EBADMSG;
}

static int fail_at_index(char *err, size_t errlen, const char *array, size_t i)
{
    char where[48];

    snprintf(where, sizeof(where), "%s[%zu]", array, i);
    return fail_at(err, errlen, where);
}

static int unpack_fail(const json_error_t *jerr, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", jerr->text);
    return -EBADMSG;
}

/* Copy a borrowed string into a fixed field; refused if it does not fit. */
#define COPY(dst, src, name) rdzv_msg_copy_str((dst), sizeof(dst), (src), (name), err, errlen)

static int parse_node(json_t *o, struct rdzv_status_node *n, char *err, size_t errlen)
{
    json_int_t rank, workers, failures, cms = -1;
    const char *host, *node_id, *state;
    int spare, connected, straggler = 0;
    json_error_t jerr;

    n->straggler_score = 0;
    n->loop_stall_max_s = n->preflight_mbps = -1;
    if (json_unpack_ex(o, &jerr, 0,
                       "{s:s, s:s, s:I, s:I, s:F, s:F, s:I, s:b, s:b, s:s, s?I, s?F, s?b, s?F, "
                       "s?F}",
                       "host", &host, "node_id", &node_id, "node_rank", &rank, "workers",
                       &workers, "last_heartbeat_age_s", &n->last_heartbeat_age_s, "age_s",
                       &n->age_s, "failures", &failures, "spare", &spare, "connected", &connected,
                       "state", &state, "compute_ms", &cms, "straggler_score",
                       &n->straggler_score, "straggler", &straggler, "loop_stall_max_s",
                       &n->loop_stall_max_s, "preflight_mbps", &n->preflight_mbps) < 0)
        return unpack_fail(&jerr, err, errlen);
    if (!(n->straggler_score >= 0 && n->straggler_score < 1e6) ||
        (json_object_get(o, "preflight_mbps") &&
         !(n->preflight_mbps >= 0 && n->preflight_mbps <= RDZV_PF_MBPS_MAX)) ||
        (json_object_get(o, "loop_stall_max_s") &&
         !(n->loop_stall_max_s >= 0 && n->loop_stall_max_s <= RDZV_LOOP_STALL_MAX_MS / 1000))) {
        snprintf(err, errlen, "straggler_score, loop_stall_max_s or preflight_mbps out of range");
        return -EBADMSG;
    }
    n->straggler = straggler;
    if (json_object_get(o, "compute_ms") && (cms < 0 || cms > RDZV_COMPUTE_MS_MAX)) {
        snprintf(err, errlen, "compute_ms out of range (0..%d)", RDZV_COMPUTE_MS_MAX);
        return -EBADMSG;
    }
    n->compute_ms = cms;
    n->node_rank = rank;
    n->workers = workers;
    n->failures = failures;
    n->spare = spare != 0;
    n->connected = connected != 0;
    if (COPY(n->host, host, "host") < 0 || COPY(n->node_id, node_id, "node_id") < 0 ||
        COPY(n->state, state, "state") < 0)
        return -EBADMSG;
    return 0;
}

/* arr must be an array of at most max entries (name says which in err); then, unless alloc is
 * NULL, alloc(j, its size). 0, -EBADMSG or -ENOMEM. */
static int array_of_at_most(const json_t *arr, size_t max, const char *name,
                            int (*alloc)(struct rdzv_status_job *, size_t),
                            struct rdzv_status_job *j, char *err, size_t errlen)
{
    if (!json_is_array(arr) || json_array_size(arr) > max) {
        snprintf(err, errlen, "'%s' must be an array of at most %zu", name, max);
        return -EBADMSG;
    }
    if (alloc && alloc(j, json_array_size(arr)) < 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

static int parse_nodes(json_t *arr, struct rdzv_status_job *j, char *err, size_t errlen)
{
    json_t *n;
    size_t i;
    int r;

    r = array_of_at_most(arr, RDZV_STATUS_MAX_NODES, "nodes", rdzv_status_alloc_nodes, j, err,
                         errlen);
    if (r < 0)
        return r;
    json_array_foreach(arr, i, n)
    {
        if (parse_node(n, &j->nodes[i], err, errlen) < 0)
            return fail_at_index(err, errlen, "nodes", i);
    }
    return 0;
}

static int parse_ranks(json_t *arr, struct rdzv_status_job *j, char *err, size_t errlen)
{
    json_int_t rank, node_rank, step;
    const char *host;
    json_error_t jerr;
    json_t *o;
    size_t i;
    int r;

    r = array_of_at_most(arr, RDZV_STATUS_MAX_RANKS, "ranks", rdzv_status_alloc_ranks, j, err,
                         errlen);
    if (r < 0)
        return r;
    json_array_foreach(arr, i, o)
    {
        struct rdzv_status_rank *k = &j->ranks[i];

        json_int_t cms = -1;

        k->timeout_s = 0;
        if (json_unpack_ex(o, &jerr, 0, "{s:I, s:I, s:s, s:I, s:F, s?F, s?I}", "rank", &rank,
                           "node_rank", &node_rank, "host", &host, "step", &step, "age_s",
                           &k->age_s, "timeout_s", &k->timeout_s, "compute_ms", &cms) < 0)
            (void)unpack_fail(&jerr, err, errlen);
        else if (rank < 0 || node_rank < 0 || step < 0 || !(k->age_s >= 0 && k->age_s < 1e10) ||
                 !(k->timeout_s >= 0 && k->timeout_s < 1e10) ||
                 (json_object_get(o, "compute_ms") && (cms < 0 || cms > RDZV_COMPUTE_MS_MAX)))
            snprintf(err, errlen,
                     "rank, node_rank, step, age_s, timeout_s or compute_ms out of range");
        else if (COPY(k->host, host, "host") == 0) {
            k->rank = rank;
            k->node_rank = node_rank;
            k->step = step;
            k->compute_ms = cms;
            continue;
        }
        return fail_at_index(err, errlen, "ranks", i);
    }
    return 0;
}

static int parse_events(json_t *arr, struct rdzv_status_job *j, char *err, size_t errlen)
{
    const char *text;
    json_error_t jerr;
    json_t *e;
    size_t i;

    if (array_of_at_most(arr, RDZV_STATUS_EVENTS, "events", NULL, j, err, errlen) < 0)
        return -EBADMSG;
    json_array_foreach(arr, i, e)
    {
        if (json_unpack_ex(e, &jerr, 0, "{s:F, s:s}", "time", &j->events[i].time, "text", &text) <
            0)
            (void)unpack_fail(&jerr, err, errlen);
        else if (COPY(j->events[i].text, text, "text") == 0)
            continue;
        return fail_at_index(err, errlen, "events", i);
    }
    j->n_events = (unsigned)i;
    return 0;
}

static int parse_aside(json_t *arr, json_int_t total, struct rdzv_status_job *j, char *err,
                       size_t errlen)
{
    const char *id, *host, *reason;
    json_int_t failures, gpus_left_out;
    json_error_t jerr;
    json_t *e, *gpus;
    size_t i;

    if (array_of_at_most(arr, RDZV_STATUS_ASIDE, "put_aside", NULL, j, err, errlen) < 0)
        return -EBADMSG;
    if (total < (json_int_t)json_array_size(arr)) {
        snprintf(err, errlen, "'put_aside_total' is below the nodes listed");
        return -EBADMSG;
    }
    json_array_foreach(arr, i, e)
    {
        struct rdzv_status_aside *x = &j->aside[i];

        gpus = NULL;
        gpus_left_out = 0;
        x->n_gpus = 0;
        if (json_unpack_ex(e, &jerr, 0, "{s:s, s:s, s:I, s:s, s?o, s?I}", "node_id", &id,
                           "host", &host, "failures", &failures, "reason", &reason, "gpu_uuids",
                           &gpus, "gpu_uuids_left_out", &gpus_left_out) < 0)
            (void)unpack_fail(&jerr, err, errlen);
        else if (failures < 0 || gpus_left_out < 0 || gpus_left_out > RDZV_GPU_UUIDS_MAX)
            snprintf(err, errlen, "'failures' or 'gpu_uuids_left_out' out of range");
        else if (COPY(x->node_id, id, "node_id") == 0 && COPY(x->host, host, "host") == 0 &&
                 COPY(x->reason, reason, "reason") == 0 &&
                 (!gpus || rdzv_gpu_uuids_from_json(gpus, RDZV_STATUS_ASIDE_GPUS, "'gpu_uuids'",
                                                    x->gpus, &x->n_gpus, err, errlen) == 0)) {
            x->failures = failures;
            x->gpus_left_out = gpus_left_out;
            continue;
        }
        return fail_at_index(err, errlen, "put_aside", i);
    }
    j->n_aside = (unsigned)i;
    j->aside_total = total;
    return 0;
}

/* A time or a rate from a peer: finite, not negative, below 1e12. */
static bool sane(double v)
{
    return v >= 0 && v < 1e12;
}

/* The index of a mark kind's name, or -1. */
static int mark_kind(const char *name)
{
    int k = 0;

    while (k < _RDZV_MARK_MAX && strcmp(name, rdzv_mark_names[k]) != 0)
        k++;
    return k < _RDZV_MARK_MAX ? k : -1;
}

static int parse_bands(json_t *arr, struct rdzv_status_timeline *tl, char *err, size_t errlen)
{
    json_int_t gen, world, nodes;
    json_error_t jerr;
    json_t *e;
    size_t i;

    if (array_of_at_most(arr, RDZV_STATUS_BANDS, "generations", NULL, NULL, err, errlen) < 0)
        return -EBADMSG;
    json_array_foreach(arr, i, e)
    {
        struct rdzv_status_band *b = &tl->bands[i];

        if (json_unpack_ex(e, &jerr, 0, "{s:I, s:F, s:F, s:I, s:I}", "generation", &gen, "start",
                           &b->start, "end", &b->end, "world_size", &world, "nodes", &nodes) < 0)
            (void)unpack_fail(&jerr, err, errlen);
        else if (gen < 0 || world < 0 || nodes < 0 || !sane(b->start) || !sane(b->end))
            snprintf(err, errlen, "a value out of range");
        else {
            b->generation = (uint64_t)gen;
            b->world_size = world;
            b->nodes = nodes;
            continue;
        }
        return fail_at_index(err, errlen, "generations", i);
    }
    tl->n_bands = (unsigned)i;
    return 0;
}

static int parse_marks(json_t *arr, struct rdzv_status_timeline *tl, char *err, size_t errlen)
{
    const char *kind, *text;
    json_error_t jerr;
    json_int_t gen;
    unsigned n = 0;
    json_t *e;
    size_t i;

    if (array_of_at_most(arr, RDZV_STATUS_MARKS, "marks", NULL, NULL, err, errlen) < 0)
        return -EBADMSG;
    json_array_foreach(arr, i, e)
    {
        struct rdzv_status_mark *m = &tl->marks[n];
        int k;

        if (json_unpack_ex(e, &jerr, 0, "{s:F, s:I, s:s, s:s}", "time", &m->time, "generation",
                           &gen, "kind", &kind, "text", &text) < 0) {
            (void)unpack_fail(&jerr, err, errlen);
            return fail_at_index(err, errlen, "marks", i);
        }
        if (gen < 0 || !sane(m->time)) {
            snprintf(err, errlen, "a value out of range");
            return fail_at_index(err, errlen, "marks", i);
        }
        if ((k = mark_kind(kind)) < 0)
            continue; /* a newer rdzvd's kind: left out */
        m->kind = (enum rdzv_mark_kind)k;
        m->generation = (uint64_t)gen;
        if (COPY(m->text, text, "text") < 0)
            return fail_at_index(err, errlen, "marks", i);
        n++;
    }
    tl->n_marks = n;
    return 0;
}

/* The timeline's "recoveries" (absent from an rdzvd before recovery phases: none). */
static int parse_recoveries(json_t *o, struct rdzv_status_timeline *tl, char *err, size_t errlen)
{
    json_t *sums, *list, *e, *v;
    json_int_t total, gen;
    json_error_t jerr;
    const char *kind;
    unsigned n = 0;
    int inplace, k;
    size_t i;

    if (!o)
        return 0;
    if (json_unpack_ex(o, &jerr, 0, "{s:I, s:o, s:o}", "total", &total, "phase_sum_s", &sums,
                       "list", &list) < 0)
        return unpack_fail(&jerr, err, errlen);
    if (total < 0 || !json_is_object(sums) ||
        array_of_at_most(list, RDZV_STATUS_RECOVERIES, "list", NULL, NULL, err, errlen) < 0) {
        snprintf(err, errlen, "'total' or 'phase_sum_s' out of range, or a bad 'list'");
        return -EBADMSG;
    }
    tl->recoveries_total = total;
    for (unsigned p = 0; p < _RDZV_RECOVERY_PHASES; p++) {
        v = json_object_get(sums, rdzv_recovery_phase_names[p]);
        tl->phase_sum_s[p] = v ? json_number_value(v) : 0;
        if ((v && !json_is_number(v)) || !sane(tl->phase_sum_s[p])) {
            snprintf(err, errlen, "'phase_sum_s' out of range");
            return -EBADMSG;
        }
    }
    json_array_foreach(list, i, e)
    {
        struct rdzv_status_recovery *rc = &tl->recoveries[n];
        bool ok = true;

        if (json_unpack_ex(e, &jerr, 0, "{s:I, s:s, s:b}", "generation", &gen, "kind", &kind,
                           "inplace", &inplace) < 0) {
            (void)unpack_fail(&jerr, err, errlen);
            return fail_at_index(err, errlen, "list", i);
        }
        rc->generation = (uint64_t)gen;
        rc->inplace = inplace;
        for (unsigned p = 0; p < _RDZV_RECOVERY_POINTS; p++) {
            v = json_object_get(e, rdzv_recovery_point_names[p]);
            rc->t[p] = v ? json_number_value(v) : 0;
            ok = ok && (!v || json_is_number(v)) && sane(rc->t[p]);
        }
        if (gen < 0 || !ok) {
            snprintf(err, errlen, "a value out of range");
            return fail_at_index(err, errlen, "list", i);
        }
        if ((k = mark_kind(kind)) < 0)
            continue; /* a newer rdzvd's cause: left out */
        rc->kind = (enum rdzv_mark_kind)k;
        n++;
    }
    tl->n_recoveries = n;
    return 0;
}

static int parse_timeline(json_t *o, struct rdzv_status_job *j, char *err, size_t errlen)
{
    json_t *bands, *marks, *rates, *v;
    struct rdzv_status_timeline *tl;
    json_error_t jerr;
    size_t i;

    if (rdzv_status_alloc_timeline(j) < 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    tl = j->timeline;
    if (json_unpack_ex(o, &jerr, 0, "{s:o, s:o, s:{s:F, s:F, s:o}}", "generations", &bands,
                       "marks", &marks, "steps_per_second", "start", &tl->rate_start,
                       "interval_s", &tl->rate_interval_s, "rates", &rates) < 0)
        (void)unpack_fail(&jerr, err, errlen);
    else if (!sane(tl->rate_start) || !sane(tl->rate_interval_s))
        snprintf(err, errlen, "'steps_per_second' out of range");
    else if (parse_bands(bands, tl, err, errlen) == 0 && parse_marks(marks, tl, err, errlen) == 0 &&
             parse_recoveries(json_object_get(o, "recoveries"), tl, err, errlen) == 0 &&
             array_of_at_most(rates, RDZV_STATUS_RATES, "rates", NULL, NULL, err, errlen) == 0) {
        json_array_foreach(rates, i, v)
        {
            tl->rates[i] = json_number_value(v);
            if (!json_is_number(v) || !sane(tl->rates[i])) {
                snprintf(err, errlen, "rates[%zu] is not a rate", i);
                return fail_at(err, errlen, "timeline");
            }
        }
        tl->n_rates = (unsigned)i;
        return 0;
    }
    return fail_at(err, errlen, "timeline");
}

static int parse_outcome(json_t *o, struct rdzv_status_job *j, char *err, size_t errlen)
{
    const char *type, *summary;
    json_int_t code;
    json_error_t jerr;
    double duration = -1, ago = -1;

    if (json_unpack_ex(o, &jerr, 0, "{s:s, s:I, s:s, s?F, s?F}", "type", &type, "exit_code", &code,
                       "summary", &summary, "duration_s", &duration, "ended_age_s", &ago) < 0) {
        (void)unpack_fail(&jerr, err, errlen);
        return fail_at(err, errlen, "outcome");
    }
    if (!(duration >= -1 && duration < 1e10) || !(ago >= -1 && ago < 1e10)) {
        snprintf(err, errlen, "duration_s or ended_age_s out of range");
        return fail_at(err, errlen, "outcome");
    }
    j->duration_s = duration;
    j->ended_age_s = ago;
    j->ended = true;
    j->outcome_exit_code = code;
    if (COPY(j->outcome_type, type, "type") < 0 || COPY(j->outcome_summary, summary, "summary") < 0)
        return fail_at(err, errlen, "outcome");
    return 0;
}

static int parse_job(json_t *o, struct rdzv_status_job *j, char *err, size_t errlen)
{
    json_int_t gen, rc, mr, mn, mx, nin, ws, port, left_out = 0, members_left_out = 0;
    json_int_t aside_total = 0;
    json_t *nodes, *events, *outcome = NULL, *ranks = NULL, *aside = NULL, *timeline = NULL;
    const char *run_id, *state, *cost = NULL;
    json_error_t jerr;
    double rate = -1;
    int r;

    if (json_unpack_ex(
            o, &jerr, 0,
            "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:F, s:I, s:o, s:o, s?o, s?o, s?I, s?I, "
            "s?o, s?I, s?F, s?o, s?s}",
            "run_id", &run_id, "state", &state, "generation", &gen, "restart_count", &rc,
            "max_restarts", &mr, "min_nodes", &mn, "max_nodes", &mx, "nodes_in_generation", &nin,
            "world_size", &ws, "age_s", &j->age_s, "store_port", &port, "nodes", &nodes, "events",
            &events, "outcome", &outcome, "ranks", &ranks, "ranks_left_out", &left_out,
            "members_left_out", &members_left_out, "put_aside", &aside, "put_aside_total",
            &aside_total, "steps_per_second", &rate, "timeline", &timeline, "cost", &cost) < 0)
        return unpack_fail(&jerr, err, errlen);
    if (!(rate == -1 || sane(rate))) {
        snprintf(err, errlen, "'steps_per_second' out of range");
        return -EBADMSG;
    }
    j->rate_known = rate >= 0;
    j->steps_per_second = j->rate_known ? rate : 0;
    if (COPY(j->run_id, run_id, "run_id") < 0 || COPY(j->state, state, "state") < 0)
        return -EBADMSG;
    if (gen < 0 || port < 0 || port > 65535 || left_out < 0 || members_left_out < 0) {
        snprintf(err, errlen,
                 "'generation', 'store_port', 'ranks_left_out' or "
                 "'members_left_out' out of range");
        return -EBADMSG;
    }
    j->generation = (uint64_t)gen;
    j->restart_count = rc;
    j->max_restarts = mr;
    j->min_nodes = mn;
    j->max_nodes = mx;
    j->nodes_in_generation = nin;
    j->world_size = ws;
    j->store_port = (int)port;
    j->ranks_left_out = left_out;
    j->members_left_out = members_left_out;
    r = parse_nodes(nodes, j, err, errlen);
    if (r == 0 && ranks)
        r = parse_ranks(ranks, j, err, errlen);
    if (r < 0)
        return r;
    if (parse_events(events, j, err, errlen) < 0)
        return -EBADMSG;
    if (outcome && parse_outcome(outcome, j, err, errlen) < 0)
        return -EBADMSG;
    if (aside && parse_aside(aside, aside_total, j, err, errlen) < 0)
        return -EBADMSG;
    if (timeline && (r = parse_timeline(timeline, j, err, errlen)) < 0)
        return r;
    if (cost && j->timeline && COPY(j->timeline->cost, cost, "cost") < 0)
        return -EBADMSG;
    return 0;
}

int rdzv_status_parse(const uint8_t *body, size_t len, struct rdzv_status *st, char *err,
                      size_t errlen)
{
    json_int_t port, conns, acc, rej, perr, reqs, keys, jobs_left_out = 0, obuf = 0;
    const char *daemon, *version;
    json_t *root, *jobs, *o, *aside = NULL;
    json_int_t aside_failures = 0, aside_check = 0, aside_straggler = 0, aside_network = 0;
    json_error_t jerr;
    size_t i;
    int r = -EBADMSG;

    memset(st, 0, sizeof(*st));
    root = rdzv_msg_load(body, len, err, errlen);
    if (!root)
        return fail_at(err, errlen, "STATUS_REPLY");
    if (json_unpack_ex(root, &jerr, 0,
                       "{s:s, s:s, s:I, s:F, s:{s:I, s:I, s:I, s:I, s:I, s:I, s?I}, s:o, s?I, "
                       "s?o}",
                       "daemon",
                       &daemon, "version", &version, "port", &port, "uptime_s", &st->uptime_s,
                       "stats", "connections", &conns, "accepted", &acc, "rejected", &rej,
                       "protocol_errors", &perr, "requests", &reqs, "main_store_keys", &keys,
                       "outbuf_closes", &obuf, "jobs", &jobs, "jobs_left_out", &jobs_left_out,
                       "nodes_put_aside", &aside) < 0 ||
        (aside && json_unpack_ex(aside, &jerr, 0, "{s:I, s:I, s?I, s?I}", "failures",
                                 &aside_failures, "check", &aside_check, "straggler",
                                 &aside_straggler, "network", &aside_network) < 0)) {
        (void)unpack_fail(&jerr, err, errlen);
        goto out_free;
    }
    if (aside_failures < 0 || aside_check < 0 || aside_straggler < 0 || aside_network < 0) {
        snprintf(err, errlen, "'nodes_put_aside' out of range");
        goto out_free;
    }
    if (rdzv_status_limits_parse(root, st, err, errlen) < 0)
        goto out_free;
    st->put_aside_failures = aside_failures;
    st->put_aside_check = aside_check;
    st->put_aside_straggler = aside_straggler;
    st->put_aside_network = aside_network;
    if (jobs_left_out < 0) {
        snprintf(err, errlen, "'jobs_left_out' out of range");
        goto out_free;
    }
    st->jobs_left_out = jobs_left_out;
    if (COPY(st->daemon, daemon, "daemon") < 0 || COPY(st->version, version, "version") < 0)
        goto out_free;
    st->port = port;
    st->connections = conns;
    st->accepted = acc;
    st->rejected = rej;
    st->protocol_errors = perr;
    if (obuf < 0) {
        snprintf(err, errlen, "'outbuf_closes' out of range");
        goto out_free;
    }
    st->outbuf_closes = obuf;
    st->requests = reqs;
    st->main_store_keys = keys;
    if (!json_is_array(jobs) || json_array_size(jobs) > RDZV_STATUS_MAX_JOBS) {
        snprintf(err, errlen, "'jobs' must be an array of at most %d", RDZV_STATUS_MAX_JOBS);
        goto out_free;
    }
    r = rdzv_status_alloc_jobs(st, json_array_size(jobs));
    if (r < 0) {
        snprintf(err, errlen, "out of memory");
        goto out_free;
    }
    json_array_foreach(jobs, i, o)
    {
        r = parse_job(o, &st->jobs[i], err, errlen);
        if (r == -EBADMSG)
            (void)fail_at_index(err, errlen, "jobs", i);
        if (r < 0)
            goto out_free;
    }
    r = 0;
out_free:
    json_decref(root);
    if (r < 0)
        (void)fail_at(err, errlen, "STATUS_REPLY");
    return r;
}
