/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-http-page.c: the status page and a job's page (rdzvd-http-page.h), rendered from one
 * bounded struct rdzv_status (rdzvd_jobs_status_sel). */
#include "daemon/front/rdzvd-http-page.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/front/rdzvd-timeline-svg.h"
#include "daemon/job/rdzvd-job-status.h"
#include "daemon/job/rdzvd-job.h"

#define PAGE_RANKS_ALL 64 /* more: the step range and the PAGE_RANKS_FEW oldest reports */
#define PAGE_RANKS_FEW 16
/* Room kept under RDZVD_PAGE_MAX for what follows the last job listed: its counts, the links,
 * the end of the document. */
#define PAGE_TAIL 1024

/* An <a> to the job's page: its run id percent-encoded (all but RFC 3986's unreserved). */
static int put_job_link(struct rdzv_buf *b, const char *run_id)
{
    static const char hex[] = "0123456789ABCDEF";
    int r = rdzv_buf_printf(b, "<a href=\"/job/");

    for (const unsigned char *p = (const unsigned char *)run_id; *p && r == 0; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~';
        char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};

        r = plain ? rdzv_buf_put(b, p, 1) : rdzv_buf_put(b, e, sizeof(e));
    }
    return r | rdzv_buf_printf(b, "\">");
}

static int put_run_id(struct rdzv_buf *b, const char *run_id, bool link)
{
    int r = link ? put_job_link(b, run_id) : 0;

    r |= rdzv_buf_printf(b, "<span class=\"run-id\">");
    r |= rdzv_buf_put_escaped(b, run_id, true);
    return r | rdzv_buf_printf(b, link ? "</span></a>" : "</span>");
}

static int put_head(struct rdzv_buf *b, const struct rdzv_status *st, const char *run_id)
{
    int r = rdzv_buf_printf(b,
                            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                            "<meta http-equiv=\"refresh\" content=\"5\"><title>rdzvd %s",
                            run_id ? "job " : "status");

    r |= rdzv_buf_put_escaped(b, run_id, true);
    r |= rdzv_buf_printf(
        b, "</title><style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:"
           "collapse;margin:.5em 0 1.5em}td,th{border:1px solid #bbb;padding:.2em .6em;text-align:"
           "left}th{background:#eee}.failed{color:#a00}.running{color:#070}</style></head>"
           "<body><h1>rdzvd %s</h1>\n", st->version);
    return r;
}

static int put_tail(struct rdzv_buf *b)
{
    return rdzv_buf_printf(b, "<p><a href=\"/\">all jobs</a> &middot; <a href=\"/metrics\">metrics"
                              "</a> &middot; <a href=\"/status.json\">status.json</a></p></body>"
                              "</html>\n");
}

/* The job's ranks' progress as an HTML table (nothing when no rank reported). */
static int put_rank_table(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    const struct rdzv_status_rank **oldest = NULL;
    size_t n = job->n_ranks;
    int64_t lo, hi;
    int r = 0;

    if (n == 0)
        return 0;
    rdzv_status_step_range(job, &lo, &hi);
    r |= rdzv_buf_printf(b, "<p class=\"progress\">%zu rank(s) reported progress, step %lld..%lld",
                         n, (long long)lo, (long long)hi);
    if (job->ranks_left_out > 0)
        r |= rdzv_buf_printf(b, " (%lld more not listed)", (long long)job->ranks_left_out);
    if (n > PAGE_RANKS_ALL) {
        oldest = rdzv_status_ranks_oldest(job);
        n = oldest ? PAGE_RANKS_FEW : 0;
        r |= rdzv_buf_printf(b, "; the %zu oldest reports", n);
    }
    r |= rdzv_buf_printf(b, "</p>\n<table class=\"ranks\"><tr><th>rank</th><th>node rank</th>"
                    "<th>host</th><th>last step</th><th>reported</th></tr>\n");
    for (size_t k = 0; k < n; k++) {
        const struct rdzv_status_rank *rk = oldest ? oldest[k] : &job->ranks[k];

        r |= rdzv_buf_printf(b, "<tr><td>%lld</td><td>%lld</td><td>", (long long)rk->rank,
                     (long long)rk->node_rank);
        r |= rdzv_buf_put_escaped(b, rk->host, true);
        r |= rdzv_buf_printf(b, "</td><td>%lld</td><td>%.1f s ago</td></tr>\n", (long long)rk->step,
                     rk->age_s);
    }
    free(oldest);
    return r | rdzv_buf_printf(b, "</table>\n");
}

static int put_nodes(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    bool checked = false; /* a network column: each node's fastest link in the pre-flight */
    int r;

    for (size_t k = 0; k < job->n_nodes; k++)
        checked = checked || job->nodes[k].preflight_mbps >= 0;
    r = rdzv_buf_printf(b, "<table class=\"nodes\"><tr><th>host</th><th>node rank</th>"
                           "<th>state</th><th>last heartbeat</th><th>workers</th>"
                           "<th>failures</th>%s</tr>\n", checked ? "<th>network</th>" : "");
    for (size_t k = 0; k < job->n_nodes; k++) {
        const struct rdzv_status_node *n = &job->nodes[k];

        r |= rdzv_buf_printf(b, "<tr><td>");
        r |= rdzv_buf_put_escaped(b, n->host, true);
        if (n->node_rank >= 0)
            r |= rdzv_buf_printf(b, "</td><td>%lld", (long long)n->node_rank);
        else
            r |= rdzv_buf_printf(b, "</td><td>-");
        r |= rdzv_buf_printf(b, "</td><td>%s</td><td>%.1f s ago</td><td>%lld</td><td>%lld</td>",
                             n->state, n->last_heartbeat_age_s, (long long)n->workers,
                             (long long)n->failures);
        if (checked && n->preflight_mbps >= 0)
            r |= rdzv_buf_printf(b, "<td>%.0f MB/s</td>", n->preflight_mbps);
        else if (checked)
            r |= rdzv_buf_printf(b, "<td>-</td>");
        r |= rdzv_buf_printf(b, "</tr>\n");
    }
    r |= rdzv_buf_printf(b, "</table>\n");
    if (job->members_left_out > 0)
        r |= rdzv_buf_printf(b, "<p class=\"left-out\">%lld more member(s) not listed</p>\n",
                             (long long)job->members_left_out);
    return r;
}

static int put_timeline(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    int r = rdzv_buf_printf(b, "<h3>timeline</h3>\n");

    r |= rdzvd_timeline_svg(b, job, rdzv_wall_s());
    if (job->rate_known)
        r |= rdzv_buf_printf(b, "<p class=\"rate\">%.3g steps/s now</p>\n",
                             job->steps_per_second);
    return r | rdzvd_timeline_legend(b);
}

static int put_aside(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    int r = rdzv_buf_printf(b, "<h3>put aside</h3><table class=\"aside\"><tr><th>host</th>"
                               "<th>failures</th><th>why</th><th>GPUs</th></tr>\n");
    char text[RDZV_GPU_UUID_LEN + 1];

    for (unsigned k = 0; k < job->n_aside; k++) {
        const struct rdzv_status_aside *a = &job->aside[k];

        r |= rdzv_buf_printf(b, "<tr><td>");
        r |= rdzv_buf_put_escaped(b, a->host, true);
        r |= rdzv_buf_printf(b, "</td><td>%lld</td><td>", (long long)a->failures);
        r |= rdzv_buf_put_escaped(b, a->reason, true);
        r |= rdzv_buf_printf(b, "</td><td>");
        for (unsigned g = 0; g < a->n_gpus && g < RDZV_STATUS_ASIDE_GPUS; g++) {
            rdzv_gpu_uuid_format(&a->gpus[g], text); /* hex and dashes: nothing to escape */
            r |= rdzv_buf_printf(b, "%s%s", g ? "<br>" : "", text);
        }
        if (a->gpus_left_out > 0)
            r |= rdzv_buf_printf(b, "<br>(%lld more)", (long long)a->gpus_left_out);
        r |= rdzv_buf_printf(b, "</td></tr>\n");
    }
    r |= rdzv_buf_printf(b, "</table>\n");
    if (job->aside_total > job->n_aside)
        r |= rdzv_buf_printf(b, "<p class=\"left-out\">%lld more not listed</p>\n",
                             (long long)(job->aside_total - job->n_aside));
    return r;
}

/* One job in full: its nodes, timeline, nodes put aside, ranks' progress and recent events;
 * link: its run id links to its page. */
static int put_job_full(struct rdzv_buf *b, const struct rdzv_status_job *job, bool link)
{
    int r = rdzv_buf_printf(b, "<h2 class=\"job\">job ");

    r |= put_run_id(b, job->run_id, link);
    r |= rdzv_buf_printf(b,
                         ": <span class=\"%s\">%s</span></h2>\n<p>generation %lld, restarts "
                         "%lld of %lld, %lld node(s) (%lld..%lld), world size %lld</p>\n",
                         job->state, job->state, (long long)job->generation,
                         (long long)job->restart_count, (long long)job->max_restarts,
                         (long long)job->nodes_in_generation, (long long)job->min_nodes,
                         (long long)job->max_nodes, (long long)job->world_size);
    if (job->ended) {
        r |= rdzv_buf_printf(b, "<p class=\"outcome\">%s, exit code %lld",
                             job->outcome_type, (long long)job->outcome_exit_code);
        if (job->ended_age_s >= 0)
            r |= rdzv_buf_printf(b, ", %.0f s ago after %.0f s", job->ended_age_s,
                                 job->duration_s);
        r |= rdzv_buf_printf(b, ": ");
        r |= rdzv_buf_put_escaped(b, job->outcome_summary, true);
        r |= rdzv_buf_printf(b, "</p>\n");
    }
    r |= put_nodes(b, job);
    if (job->timeline)
        r |= put_timeline(b, job);
    if (job->aside_total > 0)
        r |= put_aside(b, job);
    r |= put_rank_table(b, job);
    r |= rdzv_buf_printf(b, "<h3>recent events</h3><ul class=\"events\">\n");
    for (unsigned k = 0; k < job->n_events; k++) {
        r |= rdzv_buf_printf(b, "<li>");
        r |= rdzv_buf_put_utc(b, job->events[k].time, true);
        r |= rdzv_buf_printf(b, " ");
        r |= rdzv_buf_put_escaped(b, job->events[k].text, true);
        r |= rdzv_buf_printf(b, "</li>\n");
    }
    return r | rdzv_buf_printf(b, "</ul>\n");
}

/* A live job as one row of the jobs table. */
static int put_live_row(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    int r = rdzv_buf_printf(b, "<tr class=\"job\"><td>");

    r |= put_run_id(b, job->run_id, true);
    r |= rdzv_buf_printf(b, "</td><td class=\"%s\">%s</td><td>%llu</td><td>%lld of %lld</td>"
                            "<td>%lld</td><td>%lld</td><td>", job->state, job->state,
                         (unsigned long long)job->generation, (long long)job->restart_count,
                         (long long)job->max_restarts, (long long)job->nodes_in_generation,
                         (long long)job->world_size);
    if (job->rate_known)
        r |= rdzv_buf_printf(b, "%.3g", job->steps_per_second);
    return r | rdzv_buf_printf(b, "</td></tr>\n");
}

/* A job that ended as one row of the ended table. */
static int put_ended_row(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    int r = rdzv_buf_printf(b, "<tr class=\"ended-job\"><td>");

    r |= put_run_id(b, job->run_id, true);
    r |= rdzv_buf_printf(b, "</td><td class=\"%s\">%s</td><td>%lld</td><td>%.0f s ago</td>"
                            "<td>%.0f s</td><td>%lld</td><td>",
                         strcmp(job->outcome_type, "succeeded") ? "failed" : "running",
                         job->outcome_type, (long long)job->outcome_exit_code, job->ended_age_s,
                         job->duration_s, (long long)job->restart_count);
    r |= rdzv_buf_put_escaped(b, job->outcome_summary, true);
    return r | rdzv_buf_printf(b, "</td></tr>\n");
}

/* Append what put(b, job) writes, unless b would pass the page's cap: then *full is set and b is
 * as it was. */
static int put_capped(struct rdzv_buf *b, bool *full,
                      int (*put)(struct rdzv_buf *, const struct rdzv_status_job *),
                      const struct rdzv_status_job *job)
{
    size_t mark = b->len;
    int r;

    if (*full)
        return 0;
    r = put(b, job);
    if (b->len > RDZVD_PAGE_MAX - PAGE_TAIL) {
        b->len = mark;
        *full = true;
    }
    return r;
}

static int put_job_full_linked(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    return put_job_full(b, job, true);
}

static int put_job_full_here(struct rdzv_buf *b, const struct rdzv_status_job *job)
{
    return put_job_full(b, job, false);
}

char *rdzvd_http_page(const struct rdzvd_jobs *jobs)
{
    struct rdzvd_status_sel sel = {.max_live = RDZVD_PAGE_FULL + RDZVD_PAGE_ROWS,
                                   .full = RDZVD_PAGE_FULL,
                                   .max_ended = RDZVD_PAGE_ENDED};
    size_t n_live, live_shown = 0, ended_shown = 0, i;
    struct rdzv_buf b = {0};
    struct rdzv_status st;
    bool full = false;
    int r = 0;

    if (rdzvd_jobs_status_sel(jobs, &sel, &st) < 0)
        return NULL;
    rdzv_status_hide_node_ids(&st); /* nobody proves a token on the metrics port */
    n_live = sel.n_live < sel.max_live ? sel.n_live : sel.max_live;
    r |= put_head(&b, &st, NULL);
    r |= rdzv_buf_printf(&b, "<p id=\"daemon\">port %lld, up %.0f s, %lld connections, %zu job(s), "
                             "%zu ended</p>\n", (long long)st.port, st.uptime_s,
                         (long long)st.connections, sel.n_live, sel.n_ended);
    for (i = 0; i < n_live && i < sel.full; i++) {
        r |= put_capped(&b, &full, put_job_full_linked, &st.jobs[i]);
        live_shown += !full;
    }
    if (i < n_live && !full) {
        r |= rdzv_buf_printf(&b, "<h2>more jobs</h2><table class=\"jobs\"><tr><th>job</th>"
                                 "<th>state</th><th>generation</th><th>restarts</th><th>nodes"
                                 "</th><th>world size</th><th>steps/s</th></tr>\n");
        for (; i < n_live; i++) {
            r |= put_capped(&b, &full, put_live_row, &st.jobs[i]);
            live_shown += !full;
        }
        r |= rdzv_buf_printf(&b, "</table>\n");
    }
    if (sel.n_live > live_shown)
        r |= rdzv_buf_printf(&b, "<p class=\"left-out\" id=\"jobs-left-out\">%zu more job(s) not "
                                 "listed: /status.json or rdzvctl status has them</p>\n",
                             sel.n_live - live_shown);
    if (sel.n_ended > 0 && !full) {
        r |= rdzv_buf_printf(&b, "<h2>ended</h2><table class=\"ended\"><tr><th>job</th><th>"
                                 "outcome</th><th>exit code</th><th>ended</th><th>ran</th><th>"
                                 "restarts</th><th>summary</th></tr>\n");
        for (i = n_live; i < st.n_jobs; i++) {
            r |= put_capped(&b, &full, put_ended_row, &st.jobs[i]);
            ended_shown += !full;
        }
        r |= rdzv_buf_printf(&b, "</table>\n");
    }
    if (sel.n_ended > ended_shown)
        r |= rdzv_buf_printf(&b, "<p class=\"left-out\" id=\"ended-left-out\">%zu more job(s) "
                                 "that ended not listed</p>\n", sel.n_ended - ended_shown);
    r |= put_tail(&b);
    rdzv_status_free(&st);
    return rdzv_buf_take_str(&b, r ? -ENOMEM : 0);
}

int rdzvd_http_job_page(const struct rdzvd_jobs *jobs, const char *run_id, char **ret)
{
    struct rdzvd_status_sel sel = {.run_id = run_id, .max_live = 1, .full = 1,
                                   .max_ended = RDZVD_PAGE_ENDED};
    struct rdzv_buf b = {0};
    struct rdzv_status st;
    size_t shown = 0;
    bool full = false;
    int r;

    r = rdzvd_jobs_status_sel(jobs, &sel, &st);
    if (r < 0)
        return r;
    rdzv_status_hide_node_ids(&st);
    if (st.n_jobs == 0) {
        rdzv_status_free(&st);
        return -ENOENT;
    }
    r = put_head(&b, &st, run_id);
    for (size_t i = 0; i < st.n_jobs; i++) {
        r |= put_capped(&b, &full, put_job_full_here, &st.jobs[i]);
        shown += !full;
    }
    if (sel.n_live + sel.n_ended > shown)
        r |= rdzv_buf_printf(&b, "<p class=\"left-out\">%zu more job(s) of this run id not "
                                 "listed</p>\n", sel.n_live + sel.n_ended - shown);
    r |= put_tail(&b);
    rdzv_status_free(&st);
    *ret = rdzv_buf_take_str(&b, r ? -ENOMEM : 0);
    return *ret ? 0 : -ENOMEM;
}
