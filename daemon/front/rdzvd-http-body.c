/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http-body.c: the bodies of /metrics (Prometheus text) and /status.json, each made from
 * one struct rdzv_status (rdzvd_jobs_status()) on the store's loop (rdzvd-http.h). */
#include "daemon/front/rdzvd-http.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job.h"

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

/* rdzvd_job_cost_seconds: what failures cost each live job so far (rdzv_cost, from its
 * timeline, to now): its wall time, and the parts that add up to it (startup + trained + lost),
 * with lost by phase (detect, stop, rendezvous, nccl, first_step, cut) and trained's redo. */
static int put_cost_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    int r = rdzv_buf_printf(b, "# HELP rdzvd_job_cost_seconds What failures cost the job so "
                               "far: wall = startup + trained + lost; lost by phase (detect, "
                               "stop, rendezvous, nccl, first_step, cut); redo, of trained; "
                               "startup, trained, redo and first_step absent while no step was "
                               "reported (not known).\n"
                               "# TYPE rdzvd_job_cost_seconds gauge\n");
    double now = rdzv_wall_s();

    for (size_t i = 0; i < st->n_jobs; i++) {
        struct rdzv_cost c;

        if (kept_ended(st, i) || !st->jobs[i].timeline ||
            rdzv_cost_of(st->jobs[i].timeline, now, &c) < 0)
            continue;
        /* Not seen (no step reported: rdzv_cost.no_steps): no sample rather than a made-up one. */
        bool guess = c.no_steps, first = c.no_steps && c.recoveries > 0;
        const struct {
            const char *part;
            double s;
            bool unknown;
        } parts[] = {{"wall", c.wall_s, false},         {"startup", c.startup_s, guess},
                     {"trained", c.trained_s, guess},   {"redo", c.redo_s, guess},
                     {"lost", c.lost_s, false},         {"detect", c.detect_s, false},
                     {"stop", c.phase_s[0], false},     {"rendezvous", c.phase_s[1], false},
                     {"nccl", c.phase_s[2], false},     {"first_step", c.phase_s[3], first},
                     {"cut", c.cut_s, false}};

        for (unsigned k = 0; k < RDZV_ARRAY_SIZE(parts); k++) {
            if (parts[k].unknown)
                continue;
            r |= rdzv_buf_printf(b, "rdzvd_job_cost_seconds{job=\"");
            r |= rdzv_buf_put_escaped(b, st->jobs[i].run_id, false);
            r |= rdzv_buf_printf(b, "\",part=\"%s\"} %.3f\n", parts[k].part, parts[k].s);
        }
    }
    return r;
}

/* rdzvd_recovery_phase_seconds: each recovery's phases since rdzvd started, by cause. */
static int put_recovery_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    static const enum rdzv_mark_kind causes[] = {RDZV_MARK_FAILURE, RDZV_MARK_NODE_LOST,
                                                 RDZV_MARK_PUT_ASIDE, RDZV_MARK_STRAGGLER,
                                                 RDZV_MARK_RESTART};
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

/* Jobs that ended and are kept: the newest of each run id (a run id used again within
 * --keep-ended would repeat a series). */
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

/* The per-node gauges, each labelled {job, node_id, host, node_rank} (node_id only when known:
 * the metrics port hides it); a value below 0 (a compute time none said, a node not scored) is
 * left out. */
static int put_node_metrics(struct rdzv_buf *b, const struct rdzv_status *st)
{
    enum { AGE, COMPUTE, SCORE, STRAGGLER, STALL, _NODE_GAUGES };
    static const char *const gauges[_NODE_GAUGES][2] = {
        [AGE] = {"rdzvd_node_heartbeat_age_seconds", "Seconds since the node's agent was last "
                                                     "heard."},
        [COMPUTE] = {"rdzvd_node_compute_ms", "The compute time (ms) of the node's slowest "
                                              "rank: the median of its last steps'."},
        [SCORE] = {"rdzvd_node_straggler_score", "The node's compute time over the job's "
                                                 "median (scored nodes only)."},
        [STRAGGLER] = {"rdzvd_node_straggler", "1 when rdzvd called the node a straggler in "
                                               "this generation (scored nodes only)."},
        [STALL] = {"rdzvd_node_loop_stall_max_seconds", "The longest the node's agent's event "
                                                        "loop ran without waiting (its "
                                                        "HEARTBEATs wait behind it)."},
    };
    int r = 0;

    for (unsigned g = 0; g < _NODE_GAUGES; g++) {
        r |= rdzv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", gauges[g][0], gauges[g][1],
                             gauges[g][0]);
        for (size_t i = 0; i < st->n_jobs; i++)
            for (size_t k = 0; k < st->jobs[i].n_nodes; k++) {
                const struct rdzv_status_node *n = &st->jobs[i].nodes[k];
                double v = g == AGE       ? n->last_heartbeat_age_s
                           : g == COMPUTE ? (double)n->compute_ms
                           : g == SCORE   ? (n->straggler_score > 0 ? n->straggler_score : -1)
                           : g == STALL   ? n->loop_stall_max_s
                                          : (n->straggler_score > 0 ? n->straggler : -1);

                if (v < 0)
                    continue;
                r |= rdzv_buf_printf(b, "%s{job=\"", gauges[g][0]);
                r |= rdzv_buf_put_escaped(b, st->jobs[i].run_id, false);
                if (n->node_id[0]) { /* none on the metrics port: no empty label */
                    r |= rdzv_buf_printf(b, "\",node_id=\"");
                    r |= rdzv_buf_put_escaped(b, n->node_id, false);
                }
                r |= rdzv_buf_printf(b, "\",host=\"");
                r |= rdzv_buf_put_escaped(b, n->host, false);
                r |= rdzv_buf_printf(b, g == AGE || g == SCORE || g == STALL
                                            ? "\",node_rank=\"%lld\"} %.3f\n"
                                            : "\",node_rank=\"%lld\"} %.0f\n",
                                     (long long)n->node_rank, v);
            }
    }
    return r;
}

/* Per rank of each job's current generation that reported progress: its last step and the age
 * of that report. Nonzero when out of memory. */
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
                r |= rdzv_buf_printf(b, "\",rank=\"%lld\",node_rank=\"%lld\",host=\"",
                                     (long long)rk->rank, (long long)rk->node_rank);
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
                "# HELP rdzvd_outbuf_closes_total Connections closed with more output due "
                "than twice --max-outbuf (a client that does not read).\n"
                "# TYPE rdzvd_outbuf_closes_total counter\nrdzvd_outbuf_closes_total %lld\n"
                "# HELP rdzvd_requests_total Store requests served.\n"
                "# TYPE rdzvd_requests_total counter\nrdzvd_requests_total %lld\n"
                "# HELP rdzvd_store_keys Keys in the main store.\n"
                "# TYPE rdzvd_store_keys gauge\nrdzvd_store_keys{store=\"main\"} %lld\n"
                "# HELP rdzvd_jobs Jobs known to rdzvd (not those that ended and are only "
                "kept).\n# TYPE rdzvd_jobs gauge\nrdzvd_jobs %zu\n",
                st.uptime_s, (long long)st.connections, (long long)st.accepted,
                (long long)st.rejected, (long long)st.protocol_errors,
                (long long)st.outbuf_closes, (long long)st.requests,
                (long long)st.main_store_keys, live_jobs(&st));
    if (st.store_limit > 0)
        r |= rdzv_buf_printf(&b,
                "# HELP rdzvd_store_held_bytes What all stores hold for clients: keys, values, "
                "queue items and WAIT registrations, each with its overhead.\n"
                "# TYPE rdzvd_store_held_bytes gauge\nrdzvd_store_held_bytes %lld\n"
                "# HELP rdzvd_store_held_bytes_limit --max-store-bytes.\n"
                "# TYPE rdzvd_store_held_bytes_limit gauge\nrdzvd_store_held_bytes_limit %lld\n",
                (long long)st.store_held, (long long)st.store_limit);
    if (st.fds_limit > 0)
        r |= rdzv_buf_printf(&b,
                "# HELP rdzvd_descriptors_held Descriptors held for clients: connections, and "
                "each job generation's store socket and journal.\n"
                "# TYPE rdzvd_descriptors_held gauge\nrdzvd_descriptors_held %lld\n"
                "# HELP rdzvd_descriptors_held_limit --max-conns.\n"
                "# TYPE rdzvd_descriptors_held_limit gauge\nrdzvd_descriptors_held_limit %lld\n"
                "# HELP rdzvd_input_held_bytes Input buffered for requests not served yet.\n"
                "# TYPE rdzvd_input_held_bytes gauge\nrdzvd_input_held_bytes %lld\n"
                "# HELP rdzvd_input_held_bytes_limit --max-input-bytes.\n"
                "# TYPE rdzvd_input_held_bytes_limit gauge\nrdzvd_input_held_bytes_limit %lld\n",
                (long long)st.fds_held, (long long)st.fds_limit, (long long)st.input_held,
                (long long)st.input_limit);
    if (st.jobs_limit > 0)
        r |= rdzv_buf_printf(&b,
                "# HELP rdzvd_jobs_held Jobs rdzvd holds: in memory, and waiting for their "
                "nodes in their records.\n"
                "# TYPE rdzvd_jobs_held gauge\nrdzvd_jobs_held %lld\n"
                "# HELP rdzvd_jobs_waiting Of them, jobs no agent is connected to (each ends "
                "as abandoned after --abandon-after).\n"
                "# TYPE rdzvd_jobs_waiting gauge\nrdzvd_jobs_waiting %lld\n"
                "# HELP rdzvd_jobs_held_limit --max-jobs.\n"
                "# TYPE rdzvd_jobs_held_limit gauge\nrdzvd_jobs_held_limit %lld\n",
                (long long)st.jobs_held, (long long)st.jobs_waiting, (long long)st.jobs_limit);
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
    r |= put_node_metrics(&b, &st);
    r |= put_cost_metrics(&b, &st);
    r |= rdzv_buf_printf(&b,
                 "# HELP rdzvd_nodes_put_aside_total Nodes put aside by their jobs since rdzvd "
                 "started, by reason.\n# TYPE rdzvd_nodes_put_aside_total counter\n"
                 "rdzvd_nodes_put_aside_total{reason=\"failures\"} %lld\n"
                 "rdzvd_nodes_put_aside_total{reason=\"check\"} %lld\n"
                 "rdzvd_nodes_put_aside_total{reason=\"straggler\"} %lld\n"
                 "rdzvd_nodes_put_aside_total{reason=\"network\"} %lld\n",
                 (long long)st.put_aside_failures, (long long)st.put_aside_check,
                 (long long)st.put_aside_straggler, (long long)st.put_aside_network);
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

char *rdzvd_http_status_json(const struct rdzvd_jobs *jobs)
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
