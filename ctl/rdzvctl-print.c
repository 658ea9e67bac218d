/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvctl-print.c: rdzvctl status's views (rdzvctl-print.h). */
#include "ctl/rdzvctl-print.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"

/* Up to STATUS_RANKS_ALL ranks are listed; past it, the step range and the FEW oldest reports. */
#define STATUS_RANKS_ALL 16
#define STATUS_RANKS_FEW 8

/* s with control characters and other non-printables escaped (rdzv_escape), into buf: the
 * daemon's strings come from its peers (run ids, hosts, event texts), and a terminal must not
 * take them for control sequences or line breaks. */
static const char *esc(char *buf, size_t len, const char *s)
{
    rdzv_escape(buf, len, s);
    return buf;
}

/* Each rank's last step and its age: all of them for a few ranks, else the range of steps and
 * the ranks that reported longest ago (a hung one is among them). */
static void print_ranks(const struct rdzv_status_job *job)
{
    const struct rdzv_status_rank **oldest = NULL;
    size_t n = job->n_ranks;
    char host[4 * RDZV_HOST_MAX + 1];
    int64_t lo, hi;
    bool tmo = false, cms = false;

    if (n == 0)
        return;
    rdzv_status_step_range(job, &lo, &hi);
    printf("  progress: %zu rank(s) reported, step %lld..%lld", n, (long long)lo, (long long)hi);
    if (job->ranks_left_out > 0)
        printf(" (%lld more not listed)", (long long)job->ranks_left_out);
    if (n > STATUS_RANKS_ALL) {
        oldest = rdzv_status_ranks_oldest(job);
        n = oldest ? STATUS_RANKS_FEW : 0;
        printf("; the %zu oldest reports", n);
    }
    /* The TIMEOUT column (each rank's --progress-timeout, auto: its own) when any has one. */
    for (size_t k = 0; k < job->n_ranks && !tmo; k++)
        tmo = job->ranks[k].timeout_s > 0;
    /* The COMPUTE_MS column (the median of its last steps' compute times) likewise. */
    for (size_t k = 0; k < job->n_ranks && !cms; k++)
        cms = job->ranks[k].compute_ms >= 0;
    printf("\n  %6s %9s %-24s %12s %9s%s%s\n", "RANK", "NODE_RANK", "HOST", "STEP", "AGE",
           tmo ? "   TIMEOUT" : "", cms ? "  COMPUTE_MS" : "");
    for (size_t k = 0; k < n; k++) {
        const struct rdzv_status_rank *rk = oldest ? oldest[k] : &job->ranks[k];

        printf("  %6lld %9lld %-24.24s %12lld %8.1fs", (long long)rk->rank,
               (long long)rk->node_rank, esc(host, sizeof(host), rk->host), (long long)rk->step,
               rk->age_s);
        if (tmo && rk->timeout_s > 0)
            printf(" %8.1fs", rk->timeout_s);
        else if (tmo)
            printf(" %9s", "-");
        if (cms && rk->compute_ms >= 0)
            printf(" %11lld", (long long)rk->compute_ms);
        else if (cms)
            printf(" %11s", "-");
        printf("\n");
    }
    free(oldest);
}

/* The job's steps per second as a one-line sparkline: the last STATUS_SPARK_MAX samples of its
 * timeline, scaled to the peak (rdzv_status_rate_peak: theirs, or the rate now when higher), a
 * sample with a failure, a node lost or put aside (or, in color, any mark) shown as 'x'; then
 * the rate now and the peak. Nothing when it has no samples. */
#define STATUS_SPARK_MAX 60

static void print_sparkline(const struct rdzv_status_job *job, bool color)
{
    static const char *const bars[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                        "\u2585", "\u2586", "\u2587", "\u2588"};
    const struct rdzv_status_timeline *tl = job->timeline;
    unsigned first, n;
    double peak;

    if (!tl || tl->n_rates == 0 || !(tl->rate_interval_s > 0))
        return;
    n = tl->n_rates < STATUS_SPARK_MAX ? tl->n_rates : STATUS_SPARK_MAX;
    first = tl->n_rates - n;
    peak = rdzv_status_rate_peak(job, n);
    printf("  steps/s  ");
    for (unsigned i = first; i < tl->n_rates; i++) {
        double from = tl->rate_start + i * tl->rate_interval_s;
        bool hit = false;
        int level = peak > 0 ? (int)(tl->rates[i] / peak * 7.999) : 0;

        for (unsigned k = 0; k < tl->n_marks; k++) {
            const struct rdzv_status_mark *m = &tl->marks[k];

            if (m->time >= from && m->time < from + tl->rate_interval_s &&
                (m->kind == RDZV_MARK_FAILURE || m->kind == RDZV_MARK_NODE_LOST ||
                 m->kind == RDZV_MARK_PUT_ASIDE))
                hit = true;
        }
        if (hit)
            printf(color ? "\033[31mx\033[0m" : "x");
        else
            printf("%s", bars[level < 0 ? 0 : level > 7 ? 7 : level]);
    }
    printf("  ");
    if (job->rate_known)
        printf("%.3g now, ", job->steps_per_second);
    printf("peak %.3g (each %.0f s; x: a failure, node lost or put aside)\n", peak,
           tl->rate_interval_s);
}

/* What failures cost the job, as rdzvd computed it: to its end, or so far. Nothing when rdzvd
 * sent none (no timeline, no start yet, or an rdzvd before it). */
static void print_cost(const struct rdzv_status_job *job)
{
    if (job->timeline && job->timeline->cost[0])
        printf("  what failures cost%s: %s\n", job->ended ? "" : " so far", job->timeline->cost);
}

/* The job's recoveries: each phase summed over those that completed it, then the newest few,
 * phase by phase ("-": not reached). Nothing when it had none. */
#define STATUS_RECOVERIES_SHOWN 3

static void print_recoveries(const struct rdzv_status_job *job)
{
    const struct rdzv_status_timeline *tl = job->timeline;
    unsigned first;

    if (!tl || tl->recoveries_total == 0)
        return;
    printf("  recoveries: %lld, time in each phase summed: stop %.2f s, rendezvous %.2f s, "
           "nccl %.2f s, first step %.2f s (total %.2f s)\n",
           (long long)tl->recoveries_total, tl->phase_sum_s[0], tl->phase_sum_s[1],
           tl->phase_sum_s[2], tl->phase_sum_s[3], tl->phase_sum_s[RDZV_RECOVERY_TOTAL]);
    first = tl->n_recoveries > STATUS_RECOVERIES_SHOWN ? tl->n_recoveries - STATUS_RECOVERIES_SHOWN
                                                       : 0;
    printf("    %-10s %-12s %8s %10s %8s %10s %8s\n", "GENERATION", "CAUSE", "STOP", "RENDEZVOUS",
           "NCCL", "FIRST_STEP", "TOTAL");
    for (unsigned i = first; i < tl->n_recoveries; i++) {
        const struct rdzv_status_recovery *rc = &tl->recoveries[i];
        char cause[24], col[_RDZV_RECOVERY_PHASES][16];

        snprintf(cause, sizeof(cause), "%s%s",
                 (unsigned)rc->kind < _RDZV_MARK_MAX ? rdzv_mark_names[rc->kind] : "?",
                 rc->inplace ? "*" : "");
        for (unsigned ph = 0; ph < _RDZV_RECOVERY_PHASES; ph++) {
            double x = rdzv_recovery_phase_s(rc, ph);

            snprintf(col[ph], sizeof(col[ph]), x < 0 ? "-" : "%.3fs", x);
        }
        printf("    %-10llu %-12s %8s %10s %8s %10s %8s\n", (unsigned long long)rc->generation,
               cause, col[0], col[1], col[2], col[3], col[4]);
    }
    if (tl->n_recoveries > 0 && tl->recoveries[tl->n_recoveries - 1].inplace)
        printf("    (*: in place)\n");
}

/* The GPUs put aside with a node, one line: "      GPUs: GPU-..., GPU-... (N more)". */
static void print_aside_gpus(const struct rdzv_status_aside *a)
{
    char text[RDZV_GPU_UUID_LEN + 1];

    if (!a->n_gpus)
        return;
    printf("      GPUs:");
    for (unsigned g = 0; g < a->n_gpus && g < RDZV_STATUS_ASIDE_GPUS; g++) {
        rdzv_gpu_uuid_format(&a->gpus[g], text);
        printf("%s %s", g ? "," : "", text);
    }
    if (a->gpus_left_out > 0)
        printf(" (%lld more)", (long long)a->gpus_left_out);
    printf("\n");
}

/* The columns an ended job's line is cut to: the terminal's, else $COLUMNS, else 100. */
static unsigned status_width(void)
{
    struct winsize ws;
    const char *cols = getenv("COLUMNS");
    uint64_t n;

    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
        return ws.ws_col;
    if (cols && rdzv_parse_u64(cols, &n) == 0 && n >= 40 && n <= 1000)
        return (unsigned)n;
    return 100;
}

/* An ended job in one line: its run id (whole), outcome, exit code, how long ago it ended and
 * its summary cut to the width (ASCII: rdzv_escape's). */
static void print_ended_line(const struct rdzv_status_job *job, unsigned width)
{
    char id[4 * RDZV_ID_MAX + 1], out[4 * RDZV_STATUS_TEXT_MAX + 1], ago[24] = "-";
    double a = job->ended_age_s;
    unsigned avail;
    int used;

    if (a >= 0)
        snprintf(ago, sizeof(ago), a < 120 ? "%.0fs ago" : a < 7200 ? "%.0fm ago"
                                   : a < 172800 ? "%.0fh ago" : "%.0fd ago",
                 a < 120 ? a : a < 7200 ? a / 60 : a < 172800 ? a / 3600 : a / 86400);
    used = printf("  %-24s %-10s %4lld %9s  ", esc(id, sizeof(id), job->run_id),
                  esc(out, sizeof(out), job->outcome_type), (long long)job->outcome_exit_code, ago);
    /* What the line leaves, 20 at least (a long run id, a narrow terminal). */
    avail = used >= 0 && (unsigned)used + 20 < width ? width - (unsigned)used : 20;
    if (rdzv_escape(out, sizeof(out), job->outcome_summary) > avail) {
        rdzv_escape(out, avail - 3 + 1, job->outcome_summary);
        printf("%s...\n", out);
    } else {
        printf("%s\n", out);
    }
}

void rdzvctl_print_status(const struct rdzv_status *st, const struct rdzvctl_view *v)
{
    char e1[4 * RDZV_STATUS_TEXT_MAX + 1], e2[4 * RDZV_HOST_MAX + 1];
    bool color = v->color;
    size_t n_ended = 0;

    printf("rdzvd %s on port %lld, up %.0f s, %lld connections\n", esc(e1, sizeof(e1), st->version),
           (long long)st->port, st->uptime_s, (long long)st->connections);
    if (st->jobs_limit > 0) {
        printf("jobs: %lld held of --max-jobs %lld", (long long)st->jobs_held,
               (long long)st->jobs_limit);
        if (st->jobs_waiting > 0)
            printf(", %lld of them waiting for their nodes with no agent connected (each ends as "
                   "abandoned after --abandon-after, or by rdzvctl cancel JOB)",
                   (long long)st->jobs_waiting);
        printf("\n");
    }
    if (st->n_jobs == 0 && st->jobs_left_out == 0)
        printf("no jobs\n");
    for (size_t i = 0; i < st->n_jobs; i++) {
        const struct rdzv_status_job *job = &st->jobs[i];

        if (job->ended && !v->ended_in_full) { /* one line each, after the live jobs */
            n_ended++;
            continue;
        }
        printf("\njob %s: %s, generation %lld, restarts %lld of %lld, nodes %lld (%lld..%lld), "
               "world size %lld\n",
               esc(e1, sizeof(e1), job->run_id), esc(e2, sizeof(e2), job->state),
               (long long)job->generation, (long long)job->restart_count,
               (long long)job->max_restarts, (long long)job->nodes_in_generation,
               (long long)job->min_nodes, (long long)job->max_nodes, (long long)job->world_size);
        if (job->ended) {
            printf("  outcome: %s, exit code %lld", esc(e1, sizeof(e1), job->outcome_type),
                   (long long)job->outcome_exit_code);
            if (job->duration_s >= 0)
                printf(", ran %.1f s", job->duration_s);
            if (job->ended_age_s >= 0)
                printf(", ended %.0f s ago", job->ended_age_s);
            printf(": %s\n", esc(e1, sizeof(e1), job->outcome_summary));
        }
        /* The STRAGGLER column when rdzvd scored any node: its score, '!' once called one. The
         * LOOP_STALL column when an agent's loop stalled for 1 s or more (its longest). */
        bool scored = false, stalled = false, checked = false;

        for (size_t k = 0; k < job->n_nodes; k++) {
            checked = checked || job->nodes[k].preflight_mbps >= 0;
            scored = scored || job->nodes[k].straggler_score > 0;
            stalled = stalled || job->nodes[k].loop_stall_max_s >= 1;
        }
        if (job->n_nodes > 0 || !job->ended)
            printf("  %-24s %9s %-9s %9s %7s %8s%s%s%s\n", "HOST", "NODE_RANK", "STATE",
                   "HEARTBEAT", "WORKERS", "FAILURES", scored ? " STRAGGLER" : "",
                   stalled ? " LOOP_STALL" : "", checked ? " NETWORK" : "");
        for (size_t k = 0; k < job->n_nodes; k++) {
            const struct rdzv_status_node *n = &job->nodes[k];
            char rk[24], score[24] = "", stall[24] = "", net[32] = "";

            snprintf(rk, sizeof(rk), n->node_rank < 0 ? "-" : "%lld", (long long)n->node_rank);
            if (scored && n->straggler_score > 0)
                snprintf(score, sizeof(score), " %8.2fx%s", n->straggler_score,
                         n->straggler ? "!" : "");
            else if (scored)
                snprintf(score, sizeof(score), " %9s", "-");
            if (stalled && n->loop_stall_max_s >= 0)
                snprintf(stall, sizeof(stall), " %9.1fs", n->loop_stall_max_s);
            else if (stalled)
                snprintf(stall, sizeof(stall), " %10s", "-");
            if (checked && n->preflight_mbps >= 0) /* its fastest link in the pre-flight */
                snprintf(net, sizeof(net), " %6.0f MB/s", n->preflight_mbps);
            else if (checked)
                snprintf(net, sizeof(net), " %11s", "-");
            printf("  %-24.24s %9s %-9s %8.1fs %7lld %8lld%s%s%s\n",
                   esc(e2, sizeof(e2), n->host), rk, esc(e1, sizeof(e1), n->state),
                   n->last_heartbeat_age_s, (long long)n->workers, (long long)n->failures, score,
                   stall, net);
        }
        if (job->members_left_out > 0)
            printf("  (%lld more members not listed)\n", (long long)job->members_left_out);
        if (job->aside_total > 0)
            printf("  put aside:\n");
        for (unsigned k = 0; k < job->n_aside; k++) {
            printf("    %s%s%s%s (%lld failures): %s\n", esc(e2, sizeof(e2), job->aside[k].host),
                   job->aside[k].node_id[0] ? " (node id " : "", job->aside[k].node_id,
                   job->aside[k].node_id[0] ? ")" : "",
                   (long long)job->aside[k].failures, esc(e1, sizeof(e1), job->aside[k].reason));
            print_aside_gpus(&job->aside[k]);
        }
        if (job->aside_total > job->n_aside)
            printf("    (%lld more not listed)\n", (long long)(job->aside_total - job->n_aside));
        print_sparkline(job, color);
        print_cost(job);
        print_recoveries(job);
        print_ranks(job);
        printf("  recent events:\n");
        for (unsigned k = 0; k < job->n_events; k++) {
            time_t t = (time_t)job->events[k].time;
            struct tm tm;
            char when[32];

            gmtime_r(&t, &tm);
            strftime(when, sizeof(when), "%H:%M:%SZ", &tm);
            printf("    %s %s\n", when, esc(e1, sizeof(e1), job->events[k].text));
        }
    }
    if (n_ended > 0) {
        printf("\n%zu ended job%s (rdzvctl status --ended shows each in full):\n  %-24s %-10s "
               "%4s %9s  %s\n", n_ended, n_ended == 1 ? "" : "s", "RUN_ID", "OUTCOME", "EXIT",
               "ENDED", "SUMMARY");
        unsigned width = status_width();

        for (size_t i = 0; i < st->n_jobs; i++)
            if (st->jobs[i].ended)
                print_ended_line(&st->jobs[i], width);
    }
    if (st->jobs_left_out > 0)
        printf("\n(%lld more jobs not listed: the STATUS reply is limited to %u bytes)\n",
               (long long)st->jobs_left_out, RDZV_STATUS_JSON_MAX);
}

/* status --json: the document as the daemon sent it (re-encoded from the struct). */
int rdzvctl_print_status_json(const struct rdzv_status *st)
{
    json_t *o = rdzv_status_to_json(st);
    int r;

    if (!o)
        return -ENOMEM;
    r = json_dumpf(o, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    putchar('\n');
    return r < 0 ? -EIO : 0;
}

