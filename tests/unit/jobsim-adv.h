/* SPDX-License-Identifier: Apache-2.0 */
/* jobsim-adv.h: the simulator's adversary (jobsim.h's SC_ADV_* events) and its time passing
 * (SC_WAIT). A token holder under a new host name and node id each time: it JOINs and sends its
 * HEARTBEAT; placed, it may claim a step, send CANCEL and JOIN back at once with its secret and
 * a resume, or report a worker failure as it takes its ROUND. For jobsim.h only, which
 * includes it once, after newcomer_join and sim_join. */
#pragma once

/* Whether the adversary's JOIN is late (P7d): a generation of the job formed in this rdzvd, or
 * was rebuilt, before it. A JOIN that makes the job (none in memory) is never late. */
static void adv_late(struct sim *s)
{
    const struct rdzvd_job *j = the_job(&s->md);

    s->adv_late = j && (j->formed_ms || j->rebuilt);
}

/* The adversary of issue 71: a token holder that JOINs under a new host name and node id each
 * time and sends what an agent sends: its HEARTBEAT as JOINED comes (--scale-up now takes a
 * joiner in then), and nothing more. It answers no ROUND: it closes at it (apply_one). */
static int ev_adv_join(struct sim *s)
{
    struct agent *f = &s->adv;
    char err[512], id[32], host[32];
    int r;

    snprintf(id, sizeof(id), "adv-%d", s->adv_k);
    snprintf(host, sizeof(host), "hadv%d", s->adv_k++);
    adv_late(s);
    r = newcomer_join(s, f, id, host, err, sizeof(err));
    snprintf(s->adv_id, sizeof(s->adv_id), "%s", id);
    snprintf(s->adv_host, sizeof(s->adv_host), "%s", host);
    s->adv_resumable = s->adv_resumed = false;
    s->adv_answered = 0;
    s->adv_ev0 = 0;
    s->adv_rounds = 0;
    s->adv_below = false;
    say(&s->md, ": %s as %s%s%s", r ? "refused" : "joined, heartbeat", host, r ? ": " : "",
        r ? err : "");
    s->adv_in = !r && f->f.m && !f->f.closed;
    if (s->adv_in)
        jt_heartbeat(f->f.m);
    jt_run_pass();
    return r;
}

/* The adversary, as a node stopped from outside: it claims a step of its generation (placed)
 * and sends CANCEL (SIGTERM); its connection closes. It keeps its node id and secret. */
static void ev_adv_cancel(struct sim *s)
{
    struct agent *f = &s->adv;
    const struct rdzvd_job *j = the_job(&s->md);

    s->adv_gen = f->f.nrounds ? f->f.round.generation : j ? j->generation : 0;
    snprintf(s->adv_secret, sizeof(s->adv_secret), "%s", f->f.secret);
    s->adv_resumable = f->f.secret[0] && s->adv_gen;
    if (f->f.m && !f->f.closed && f->f.nrounds)
        fake_step(&f->f); /* a claim */
    if (f->f.m && !f->f.closed)
        jt_cancel(f->f.m, 15, "");
    if (f->f.m && !f->f.closed)
        jt_gone(f->f.m);
    jt_run_pass();
    s->adv_in = false;
    say(&s->md, ": %s claimed a step, CANCEL", s->adv_host);
}

static int ev_adv_resume(struct sim *s);

/* adv-cancel, and at once its JOIN back with a resume (adv-resume), as a token holder that
 * loops does: the rdzvd sees both before anything else happens. */
static void ev_adv_cancel_resume(struct sim *s)
{
    const struct rdzvd_job *j;

    ev_adv_cancel(s);
    if (s->adv_resumable && (j = the_job(&s->md)) && j->state != JOB_ENDED)
        ev_adv_resume(s); /* said after the CANCEL */
}

/* The adversary back with its node id and secret and a resume of the generation it was placed
 * in (its id proved, not a run), READY when the job stops, and its HEARTBEAT. */
static int ev_adv_resume(struct sim *s)
{
    struct agent *f = &s->adv;
    struct rdzv_join jn = join_of(0, s->c.v.min, s->c.v.max, s->c.v.max_restarts);
    const struct rdzvd_job *j;
    char err[512];
    int r;

    adv_late(s);
    snprintf(jn.secret, sizeof(jn.secret), "%s", s->adv_secret);
    jn.resume = (struct rdzv_resume){.generation = s->adv_gen, .node_rank = 0, .nnodes = 1,
                                     .world_size = jn.nproc, .master_port = 41000};
    r = sim_join(s, f, &jn, s->adv_id, s->adv_host, err, sizeof(err));
    s->adv_resumable = false;
    s->adv_resumed = true;
    s->adv_rounds = 0;
    s->adv_answered = 0;
    s->adv_ev0 = f->f.nevents;
    say(&s->md, ": %s%s%s", r ? "refused: " : "resumed as ", r ? err : s->adv_host, "");
    s->adv_in = !r && f->f.m && !f->f.closed;
    if (s->adv_in && (j = the_job(&s->md)) && j->state == JOB_STOPPING)
        jt_ready(f->f.m, s->adv_gen);
    if (s->adv_in && f->f.m && !f->f.closed)
        jt_heartbeat(f->f.m);
    jt_run_pass();
    s->adv_in = s->adv_in && f->f.m && !f->f.closed;
    return r;
}

/* The adversary, placed in the running generation: it answers its ROUND (the HEARTBEAT naming
 * the generation) and at once reports a worker failure of its rank, exit code 1 (issue 71:
 * within the start-up window, a claim when it joined late, P7d). Told to restart, it exits. */
static void ev_adv_exit(struct sim *s)
{
    struct agent *f = &s->adv;
    struct rdzv_worker_exit w = {.generation = f->f.round.generation, .exit_code = 1};
    static struct rdzv_heartbeat hb;

    if (s->adv_answered != f->f.round.generation) {
        s->adv_answered = f->f.round.generation;
        hb = (struct rdzv_heartbeat){.generation = s->adv_answered};
        jt_progress(f->f.m, &hb);
    }
    if (f->f.m && !f->f.closed)
        jt_worker_exit(&f->f, &w);
    jt_run_pass();
    say(&s->md, ": %s took its ROUND and reported a worker failure", s->adv_host);
}

/* A minute passes while the job runs: every connected agent heartbeats (the adversary too), so
 * no timer but the job's fires. Scale-ups are spaced in time (P8a): without it, time passed
 * only to a timer. */
static void ev_wait(struct sim *s)
{
    for (uint64_t left = 60000; left;) {
        uint64_t step = left < HB_MS - 1 ? left : HB_MS - 1;

        for (int i = 0; i < NODES; i++)
            if (s->md.a[i].st == A_IN && s->md.a[i].f.m && !s->md.a[i].f.closed)
                jt_heartbeat(s->md.a[i].f.m);
        if (s->adv_in && s->adv.f.m && !s->adv.f.closed)
            jt_heartbeat(s->adv.f.m);
        jt_advance(step);
        jt_run_pass();
        left -= step;
    }
    say(&s->md, ": a minute passed, the agents heartbeating");
}

/* The adversary's connection closes (at once when a ROUND came: it never answers one). The
 * job's end it made (its last node) is seen, as check_step sees one: wherever it goes (a drain
 * too), an agent of the run told so later is told the truth. */
static void adv_gone(struct sim *s)
{
    const struct rdzvd_job *j;

    if (s->adv_in && s->adv.f.m && !s->adv.f.closed)
        jt_gone(s->adv.f.m);
    jt_run_pass();
    s->adv_in = false;
    j = the_job(&s->md);
    s->md.ended_seen |= g_freed_ended || (j && j->state == JOB_ENDED && this_run(j));
}
