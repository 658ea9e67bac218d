/* SPDX-License-Identifier: Apache-2.0 */
/* cluster-check.h: what the cluster simulator checks (test-cluster-sim.c lists C1 to C6): a
 * violation noted (the first of a run), what rdzvd tells the agents (the restarts for C5, each
 * job's end for C3), the agents' outcomes against it (C3), the word a hung job's violation says
 * of why (C4), and the races found and still open. For test-cluster-sim.c only, after
 * cluster-agent.h. */
#pragma once

enum { C1 = 1, C2, C3, C4, C5, C6, C_KINDS };
static const char *const cs_inv[C_KINDS] = {
    "", "C1 one world per generation", "C2 no older generation beside a newer one",
    "C3 every agent's outcome is rdzvd's", "C4 the job ends within its bound",
    "C5 the job's bounds (budget, scale-ups)", "C6 every message crosses the wire"};

static void cs_bad(int inv, const char *fmt, ...)
{
    va_list ap;

    if (W->bad_inv)
        return;
    W->bad_inv = inv;
    va_start(ap, fmt);
    vsnprintf(W->bad, sizeof(W->bad), fmt, ap);
    va_end(ap);
}

/* C5: a restart rdzvd tells (its first EVENT restart of the generation). Scale-ups are not
 * counted, and each needs two slots of the job's bound (P8a: one for itself, one for a re-form
 * around its joiners): at most RDZVD_JOB_UNCOUNTED_RESTARTS - 1 within
 * RDZVD_JOB_UNCOUNTED_WINDOW_MS. (The bound on every restart not counted, whose exceptions hang
 * on who is a newcomer, is test-job-sim's S7.) The bound goes with the job: a new run, or a job
 * rdzvd made again from its agents' word (no --state-dir kept its record). */
static void cs_note_restart(const struct rdzv_event *e)
{
    uint64_t key = (uint64_t)W->run << 40 | e->generation;

    if (key <= W->restart_gen)
        return;
    W->restart_gen = key;
    if (W->free_run != W->run || (!W->c.state_dir && W->free_epoch != W->epoch)) {
        W->nuncounted = 0;
        W->free_run = W->run;
        W->free_epoch = W->epoch;
    }
    if (!strstr(e->summary, "scale up"))
        return;
    while (W->nuncounted && NOW - W->uncounted_at[0] >= (uint64_t)RDZVD_JOB_UNCOUNTED_WINDOW_MS)
        memmove(&W->uncounted_at[0], &W->uncounted_at[1],
                --W->nuncounted * sizeof(W->uncounted_at[0]));
    if (W->nuncounted == RDZVD_JOB_UNCOUNTED_RESTARTS + 1)
        memmove(&W->uncounted_at[0], &W->uncounted_at[1],
                --W->nuncounted * sizeof(W->uncounted_at[0]));
    W->uncounted_at[W->nuncounted++] = NOW;
    if (W->nuncounted > RDZVD_JOB_UNCOUNTED_RESTARTS - 1)
        cs_bad(C5, "%u scale-ups within %.0f s (the bound: %d in %d min, P8a), the last of "
               "generation %" PRIu64, W->nuncounted, (double)(NOW - W->uncounted_at[0]) / 1000,
               RDZVD_JOB_UNCOUNTED_RESTARTS - 1, RDZVD_JOB_UNCOUNTED_WINDOW_MS / 60000,
               e->generation);
}

/* An end rdzvd told (C3): to the job's members, or to a JOIN or a resume refused as its job
 * ended, as an EVENT (job-policy X1, X5), which ends nothing. */
static void cs_note_told(const struct rdzv_event *e)
{
    for (int k = 0; k < W->nouts; k++)
        if (!strcmp(W->outs[k].summary, e->summary) && !strcmp(W->outs[k].type, e->type))
            return;
    if (W->nouts < 8)
        W->outs[W->nouts++] = *e;
}

/* What rdzvd tells the agents: the restarts (C5), and each of the job's ends (C3). */
static void cs_note_outcome(const struct rdzv_event *e)
{
    if (!strcmp(e->type, "restart")) {
        cs_note_restart(e);
        return;
    }
    if (strcmp(e->type, "succeeded") && strcmp(e->type, "failed") && strcmp(e->type, "cancelled"))
        return;
    W->run_ended = true;
    if (!strcmp(e->type, "failed"))
        W->end_forgot_t = 0; /* a rebuilt job that ended, ended again (cs_end_forgotten) */
    cs_note_told(e);
}

/* Without --state-dir (nor replicas) a restarted rdzvd keeps no job's end, and a straggler's
 * resume rebuilds a job that ended (job-policy W5). That is the documented outcome only as R26a
 * bounds it: the rebuilt generation forms no other, and the job ends failed within its rebuild
 * window (two heartbeat timeouts; 5 s of margin). At the window's end R26a says --state-dir is
 * what keeps an end; a failure before it (a worker's, the progress timeout) ends it as well.
 * Anything else is the job that ended running again (C3). */
#define CS_END_FORGOT_MS (2 * (uint64_t)W->c.hb_timeout_ms + 5000)

static void cs_end_forgotten(int a, uint64_t gen)
{
    if (!W->c.state_dir && !W->c.replicas) {
        W->end_forgot_t = NOW;
        W->end_forgot_a = a;
        return;
    }
    cs_bad(C3, "node-%d's resume of generation %" PRIu64 " rebuilt the job after rdzvd told its "
           "end (%s): a job that ended runs again", a, gen,
           W->outs[W->nouts ? W->nouts - 1 : 0].type);
}

static void cs_end_forgotten_round(uint64_t gen)
{
    if (W->end_forgot_t)
        cs_bad(C3, "generation %" PRIu64 " formed after node-%d's resume rebuilt the job rdzvd "
               "had ended: a job that ended runs again", gen, W->end_forgot_a);
}

static void cs_end_forgotten_check(bool at_end)
{
    if (W->end_forgot_t && (at_end || NOW - W->end_forgot_t > CS_END_FORGOT_MS))
        cs_bad(C3, "node-%d's resume rebuilt the job rdzvd had ended, and it did not end failed "
               "within %.0f s: a job that ended runs again", W->end_forgot_a,
               (double)CS_END_FORGOT_MS / 1000);
}

/* The exit code an agent owes the job's end e (agent-session-sm.c's on_outcome). */
static int cs_exit_of(const struct rdzv_event *e)
{
    if (!strcmp(e->type, "succeeded"))
        return 0;
    if (!strcmp(e->type, "cancelled"))
        return e->exit_code > 128 && e->exit_code < 256 ? (int)e->exit_code : 143;
    return e->exit_code ? (int)e->exit_code : 1;
}

/* C3: each agent that ended with a job's end (succeeded, failed, cancelled) ended with one that
 * rdzvd told, and the exit code it owes; none succeeded that rdzvd did not say so. */
static void cs_check_outcomes(void)
{
    for (int a = 0; a < W->c.nagents; a++) {
        const struct cs_agent *ag = &W->ag[a];
        const struct rdzv_event *e = NULL;

        if (!ag->started || !ag->done)
            continue;
        for (int k = 0; k < W->nouts; k++)
            if (!strcmp(ag->summary, W->outs[k].summary))
                e = &W->outs[k];
        if (!e) {
            if (!strcmp(ag->outcome, "succeeded"))
                cs_bad(C3, "node-%d ended succeeded, which rdzvd never said: %s", a,
                       ag->summary);
            continue;
        }
        if (strcmp(ag->outcome, e->type))
            cs_bad(C3, "node-%d ended %s, rdzvd said %s: %s", a, ag->outcome, e->type,
                   e->summary);
        else if (ag->exit_code != cs_exit_of(e))
            cs_bad(C3, "node-%d's job %s (exit code %" PRId64 "), the agent's exit code is %d",
                   a, e->type, e->exit_code, ag->exit_code);
    }
}

/* The race of issue 62's note: a worker waits in a generation that is not whole, and another
 * node left it, its workers done (exit 0: LEAVE sent). */
static bool cs_waits_for_done(void)
{
    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++) {
            const struct cs_worker *w = &W->ag[a].w[k];

            if (!w->alive || w->exiting || cs_gen_whole(w->gen))
                continue;
            for (int b = 0; b < W->c.nagents; b++)
                if (b != a && W->ag[b].left_key == w->gen)
                    return true;
        }
    return false;
}

/* The races found and still open (issue 74): a violation that says one of these is counted,
 * its first trace printed, and it fails no test; its replay (cluster-traces/) keeps it found.
 * A node rdzvd lost that trains beside a newer generation is none: C2 allows it within
 * cs_stale_bound (cluster-agent.h), the bound its agent keeps (agent-policy A30, A32). */
static const char *const cs_open[] = {
    NULL, /* the end mark: a race found goes above it */
};
#define CS_OPEN (sizeof(cs_open) / sizeof(cs_open[0])) /* the end mark counted */
static uint64_t g_open[CS_OPEN];

static int cs_open_race(const char *bad)
{
    for (unsigned k = 0; cs_open[k]; k++)
        if (strstr(bad, cs_open[k]))
            return (int)k;
    return -1;
}

