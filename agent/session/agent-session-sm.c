/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-sm.c: the session's decisions as a step machine (agent-session-sm.h): a ROUND
 * starts the workers, a worker's failure is reported and stops the others (or, in place, only
 * itself), an EVENT restart stops them and READY follows once they are gone, the job's outcome
 * gives the exit code. No libuv, no system call, no clock (tests/layers.txt: pure). */
#include "agent/session/agent-session-sm.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"

static void finish(struct agent_sm *sm, struct agent_ready *r);

/* A line to log: the Ready keeps it for the adapter, which writes it before the effects (the
 * machine writes no log itself). Past AGENT_READY_LOGS lines, counted as lost. */
static void __attribute__((format(printf, 3, 4)))
say(struct agent_ready *r, enum rdzv_log_level level, const char *fmt, ...)
{
    struct agent_log *l;
    va_list ap;

    if (r->nlog == AGENT_READY_LOGS) {
        r->lost++;
        return;
    }
    l = &r->log[r->nlog++];
    l->level = level;
    va_start(ap, fmt);
    (void)vsnprintf(l->text, sizeof(l->text), fmt, ap);
    va_end(ap);
}

static const char *const state_names[] = {
    [AG_JOINING] = "JOINING", [AG_RUNNING] = "RUNNING",   [AG_LEFT] = "LEFT",
    [AG_RESTARTING] = "RESTARTING", [AG_STOPPING] = "STOPPING", [AG_DONE] = "DONE"};

static struct agent_effect *add(struct agent_ready *r, enum agent_effect_kind kind)
{
    struct agent_effect *fx;

    assert(r->n < AGENT_READY_MAX); /* a step decides a handful of things */
    fx = &r->fx[r->n++];
    *fx = (struct agent_effect){.kind = kind};
    return fx;
}

static void add_gen(struct agent_ready *r, enum agent_effect_kind kind, uint64_t gen)
{
    add(r, kind)->gen = gen;
}

static void add_stop(struct agent_sm *sm, struct agent_ready *r, int sig)
{
    sm->stop_sent = true;
    add(r, AGENT_DO_STOP)->sig = sig;
}

static void add_timer(struct agent_ready *r, enum agent_timer t, int64_t due_ms)
{
    struct agent_effect *fx = add(r, AGENT_DO_TIMER);

    fx->timer = t;
    fx->due_ms = due_ms;
}

/* VERDICT, LEADERLESS, OWN_END: armed unless they are (ms from now), or cancelled if so. */
static void timer_arm(struct agent_sm *sm, enum agent_timer t, int64_t ms, struct agent_ready *r)
{
    if (sm->timer_on[t])
        return;
    sm->timer_on[t] = true;
    add_timer(r, t, sm->now_ms + ms);
}

static void timer_cancel(struct agent_sm *sm, enum agent_timer t, struct agent_ready *r)
{
    if (!sm->timer_on[t])
        return;
    sm->timer_on[t] = false;
    add_timer(r, t, -1);
}

/* Whether the start-up grace was on; it is over now (its timer cancelled in ready). */
static bool grace_end(struct agent_sm *sm, struct agent_ready *ready)
{
    bool was = sm->grace_on;

    sm->grace_on = false;
    if (was)
        add_timer(ready, AGENT_TIMER_GRACE, -1);
    return was;
}

/* The one place the state changes: leaving RUNNING drops a held report and a start-up grace,
 * whose timers ready then cancels. */
static void set_state(struct agent_sm *sm, enum agent_state st, struct agent_ready *ready)
{
    assert((unsigned)st < _AG_STATE_MAX);
    if (sm->state != st)
        say(ready, RDZV_LOG_DEBUG, "session: %s -> %s", state_names[sm->state], state_names[st]);
    if (st != AG_RUNNING && sm->held.on) { /* the generation it died in is over anyway */
        add_timer(ready, AGENT_TIMER_HOLD, -1);
        sm->held.on = false;
    }
    if (st != AG_RUNNING)
        (void)grace_end(sm, ready); /* a start-up grace holds a RUNNING generation */
    sm->state = st;
}

void agent_sm_resume(const struct agent_sm *sm, uint64_t incarnation, struct rdzv_resume *rs)
{
    bool running = sm->state == AG_RUNNING || sm->state == AG_LEFT || sm->state == AG_RESTARTING;

    memset(rs, 0, sizeof(*rs));
    if (!running || !sm->round.generation)
        return;
    rs->generation = sm->round.generation;
    rs->node_rank = sm->round.node_rank;
    rs->nnodes = sm->round.nnodes;
    rs->rank_offset = sm->round.rank_offset;
    rs->world_size = sm->round.world_size;
    rs->restart_count = sm->round.restart_count;
    rs->master_port = sm->round.master_port;
    rs->left = sm->state == AG_LEFT;
    rs->incarnation = incarnation;
}

bool agent_sm_has_survivors(const struct agent_sm *sm, unsigned running)
{
    return sm->state == AG_JOINING && running > 0;
}

/* --recovery inplace, and this generation's workers here stay to re-form in place. */
static bool in_place(const struct agent_sm *sm)
{
    return sm->inplace && !sm->dropped && !sm->plain;
}

/* READY for gen, once a health check passed when our own workers failed. */
static void send_ready(struct agent_sm *sm, const struct agent_facts *f, uint64_t gen,
                       struct agent_ready *r)
{
    unsigned n = sm->inplace ? f->running : 0;

    /* Our own workers failed: the node is checked before it offers itself again (the check
     * for gen runs: HEALTH_OK sends it). */
    if (sm->has_health && sm->local_failure && gen && sm->ready_waiting == gen)
        return;
    if (sm->has_health && sm->local_failure && sm->health_ready_gen != gen) {
        sm->health_ready_gen = gen;
        sm->ready_waiting = gen;
        add_gen(r, AGENT_DO_HEALTH, gen); /* HEALTH_OK sends it */
        return;
    }
    if (n)
        say(r, RDZV_LOG_INFO,
            "%u worker%s of generation %" PRIu64 " keep%s running (--recovery inplace); "
            "ready for the next round", n, rdzv_plural(n), gen, n == 1 ? "s" : "");
    else
        say(r, RDZV_LOG_INFO, "workers of generation %" PRIu64 " stopped; ready for the next round",
            gen);
    set_state(sm, AG_JOINING, r);
    sm->restart_pending = false;
    add_gen(r, AGENT_DO_READY, gen);
}

/* A failure (here or elsewhere) in a running generation: whether the workers here keep running
 * to re-form in place. Not before one of them said it follows the control channel: told a new
 * generation, a plain DDP script's survivor would not re-form (it blocks or dies on its lost
 * peer, and the next generation would mix it with new workers), so the generation restarts here
 * as under --recovery restart; said once. */
static bool keep_in_place(struct agent_sm *sm, const struct agent_facts *f,
                          struct agent_ready *r)
{
    if (!in_place(sm))
        return false;
    if (sm->follows || f->following > 0) {
        sm->follows = true;
        return true;
    }
    sm->plain = true;
    if (!sm->plain_said)
        say(r, RDZV_LOG_WARN,
            "--recovery inplace: no worker here has said it follows rdzv's control channel "
            "(a script does once it makes rdzv.torch's Job; rdzv-train does at start), so "
            "this failure restarts the whole generation here, as --recovery restart does");
    sm->plain_said = true;
    return false;
}

/* local_rank failed here (or hung: being killed), and rdzvd has been told. Restart: stop the
 * other workers at once (fail fast). In place: they keep running, and READY goes out once the
 * daemon's EVENT restart came and every failed rank is reaped. */
static void fail_local(struct agent_sm *sm, const struct agent_facts *f, unsigned local_rank,
                       struct agent_ready *r)
{
    bool keep = keep_in_place(sm, f, r), held = grace_end(sm, r);

    set_state(sm, AG_RESTARTING, r);
    sm->stopping_gen = sm->round.generation;
    sm->restart_pending = held; /* held by a start-up grace: its EVENT restart came already */
    if (keep)
        sm->failed[local_rank] = true;
    else
        add_stop(sm, r, SIGTERM);
}

static void ready_in_place(struct agent_sm *sm, const struct agent_facts *f,
                           struct agent_ready *r)
{
    if (sm->state != AG_RESTARTING || !sm->restart_pending || !in_place(sm))
        return;
    for (unsigned i = 0; i < (unsigned)sm->nproc; i++)
        if (sm->failed[i] && f->rank_running && f->rank_running[i])
            return;
    send_ready(sm, f, sm->stopping_gen, r);
}

/* The signals a scheduler or a terminal sends to every process of a job step (held above). */
static bool step_signal(int sig)
{
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/* A worker of this node failed (exited non-zero, or was killed): report it and stop the others,
 * unless the node is not running a generation any more. */
static void worker_failed(struct agent_sm *sm, const struct agent_facts *f, unsigned local_rank,
                          int64_t status, int sig, struct agent_ready *r)
{
    struct agent_effect *fx;

    if (sm->state != AG_RUNNING) {
        /* A consequence, not a cause: stopping anyway, or (in place) a failed rank is gone or
         * a survivor died between generations: the next ROUND starts it again. */
        if (sm->inplace)
            ready_in_place(sm, f, r);
        return;
    }
    sm->local_failure = true;
    /* Report first, then stop the rest of our workers at once (fail fast); the daemon answers
     * with a restart or the job's end. In place, only this one is gone. The workers' last
     * steps go just before: the steps a restart from a checkpoint will do again are counted
     * from them (what failures cost the job). */
    add_gen(r, AGENT_DO_HEARTBEAT, sm->round.generation);
    fx = add(r, AGENT_DO_WORKER_EXIT);
    fx->local_rank = local_rank;
    fx->code = sig ? 128 + sig : status;
    fx->sig = sig;
    fail_local(sm, f, local_rank, r);
    if (in_place(sm))
        say(r, RDZV_LOG_INFO, "the other workers keep running (--recovery inplace)");
}

/* A worker's death by a signal that a scheduler or a terminal sends to the whole step. */
static bool step_death(int64_t status, int sig)
{
    return step_signal(sig) || (sig == 0 && status > 128 && step_signal((int)(status - 128)));
}

static void hold(struct agent_sm *sm, const struct agent_input *in, bool for_signal,
                 struct agent_ready *r)
{
    add_timer(r, AGENT_TIMER_HOLD,
              sm->now_ms + (for_signal ? AGENT_SIGNAL_HOLD_MS : AGENT_EXIT_HOLD_MS));
    sm->held.on = true;
    sm->held.for_signal = for_signal;
    sm->held.local_rank = in->local_rank;
    sm->held.status = in->status;
    sm->held.sig = in->sig;
}

/* The one rule of a failed worker's report while its generation runs: a death by a step-wide
 * signal waits AGENT_SIGNAL_HOLD_MS for the agent's own copy of it (on_signal); any other failure
 * waits for the end of its stderr (on_output_closed), AGENT_EXIT_HOLD_MS at most. A hold is
 * of the first failure: the failures after it are reported only when their stderr closes
 * first (one not held for a signal), and are else consequences. */
static void on_worker_exit(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    int64_t status = in->status;
    int sig = in->sig;

    sm->done[in->local_rank] |= sm->inplace && !sm->stop_sent && !status && !sig; /* A3a */
    if (sm->inplace && sm->state == AG_RUNNING && sm->late[in->local_rank] &&
        !in->replace_failed && !sm->done[in->local_rank]) {
        struct agent_effect *fx = add(r, AGENT_DO_REPLACE); /* failed: WORKER_EXIT again */

        sm->late[in->local_rank] = false;
        fx->local_rank = in->local_rank;
        fx->code = status;
        fx->sig = sig;
        return;
    }
    if (status == 0 && sig == 0)
        return; /* the group logged the exit, once */
    if (sm->state == AG_RUNNING && sm->held.on &&
        (sm->held.for_signal || step_death(status, sig) || in->output_open))
        return; /* the same signal as the held one's, most likely, or after the held one */
    if (sm->state == AG_RUNNING && !sm->have_outcome && step_death(status, sig)) {
        hold(sm, in, true, r);
        return;
    }
    if (sm->state == AG_RUNNING && in->output_open) {
        hold(sm, in, false, r);
        return;
    }
    worker_failed(sm, &in->facts, in->local_rank, status, sig, r);
}

/* An exited worker's stderr is read to its end: its held failure goes now, and so does the
 * failure of one that exited after the held one (its stderr closed first). */
static void on_output_closed(struct agent_sm *sm, const struct agent_input *in,
                             struct agent_ready *r)
{
    if (sm->state != AG_RUNNING || !sm->held.on || sm->held.for_signal ||
        (in->status == 0 && in->sig == 0) || step_death(in->status, in->sig))
        return;
    sm->held.on = false;
    add_timer(r, AGENT_TIMER_HOLD, -1);
    worker_failed(sm, &in->facts, in->local_rank, in->status, in->sig, r);
}

static void on_hold_due(struct agent_sm *sm, const struct agent_facts *f, struct agent_ready *r)
{
    if (!sm->held.on)
        return;
    sm->held.on = false;
    if (sm->held.for_signal)
        say(r, RDZV_LOG_INFO,
            "the signal that killed worker local rank %u did not reach this agent within "
            "%d ms: reporting its failure", sm->held.local_rank, AGENT_SIGNAL_HOLD_MS);
    else
        say(r, RDZV_LOG_DEBUG,
            "worker local rank %u: its stderr still open %d ms after its exit, reporting it",
            sm->held.local_rank, AGENT_EXIT_HOLD_MS);
    worker_failed(sm, f, sm->held.local_rank, sm->held.status, sm->held.sig, r);
}

static void on_round(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r);

static void on_all_exited(struct agent_sm *sm, const struct agent_facts *f, struct agent_ready *r)
{
    sm->workers_gone = true;
    if (sm->have_outcome) {
        finish(sm, r);
        return;
    }
    if (sm->state == AG_RESTARTING && sm->round_pending) {
        /* Placed while they stopped: the ROUND is the answer a READY would have asked for. */
        struct agent_input next = {.kind = AGENT_IN_ROUND, .facts = *f, .round = &sm->next_round};

        sm->round_pending = false;
        sm->restart_pending = false;
        set_state(sm, AG_JOINING, r);
        on_round(sm, &next, r);
        return;
    }
    if (sm->state == AG_RUNNING && !sm->local_failure && !sm->held.on && !sm->grace_on) {
        /* All ours exited 0: wait for the job's outcome (no long exit barrier: a failure
         * elsewhere arrives as an EVENT at once). */
        say(r, RDZV_LOG_INFO, "%s %" PRId64 " local worker%s exited 0%s",
            sm->nproc == 1 ? "the" : "all", sm->nproc, rdzv_plural((uint64_t)sm->nproc),
            sm->round.nnodes > 1 ? "; waiting for the other nodes" : "");
        add_gen(r, AGENT_DO_LEAVE, sm->round.generation);
        set_state(sm, AG_LEFT, r);
    } else if ((sm->state == AG_RESTARTING || (sm->state == AG_RUNNING && sm->grace_on)) &&
               sm->restart_pending) {
        send_ready(sm, f, sm->stopping_gen, r); /* held by a start-up grace: all gone, the same */
    }
}

static void on_round(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    const struct rdzv_round *rd = in->round;
    bool keep;

    if (sm->state == AG_RESTARTING && !sm->have_outcome) {
        /* rdzvd placed this node while its last workers stop: they stop first. */
        if (rd != &sm->next_round)
            sm->next_round = *rd;
        sm->round_pending = true;
        say(r, RDZV_LOG_INFO, "ROUND for generation %" PRIu64 " while the last workers stop: "
            "taken once they are gone", rd->generation);
        return;
    }
    if (sm->state != AG_JOINING) {
        say(r, RDZV_LOG_WARN, "ROUND for generation %" PRIu64 " while workers still run: ignored",
            rd->generation);
        return;
    }
    sm->round_pending = false;
    if (!in_place(sm) || rd->generation <= sm->round.generation) /* A3a: stopped, or a new job */
        memset(sm->done, 0, (size_t)sm->nproc * sizeof(*sm->done));
    sm->round = *rd;
    keep = agent_sm_has_survivors(sm, in->facts.running);
    add_gen(r, AGENT_DO_ROUND_BEGIN, rd->generation);
    set_state(sm, AG_RUNNING, r);
    sm->workers_gone = false;
    sm->local_failure = false;
    sm->dropped = sm->plain = sm->stop_sent = false;
    memset(sm->late, 0, (size_t)sm->nproc * sizeof(*sm->late));
    memset(sm->failed, 0, (size_t)sm->nproc * sizeof(*sm->failed));
    /* Tell the daemon that this node took its round before any worker starts: a node lost from
     * here on ran in the generation, and its loss is the job's failure, not its host's. Sent
     * after the start, a worker could be seen running before the daemon heard of it. */
    add_gen(r, AGENT_DO_ROUND_ACK, rd->generation);
    if (!keep && sm->inplace && !memchr(sm->done, 0, (size_t)sm->nproc)) {
        on_all_exited(sm, &in->facts, r); /* in place, every rank here is done: LEAVE (A3a) */
        return;
    }
    /* In place without survivors: READY went out once the failed ranks exited, not once the
     * group drained: what they left (a descendant holding their output) may still be open. A
     * partial start of every rank not done kills it, then spawns each once its handles closed. */
    add(r, AGENT_DO_START)->mode = keep ? AGENT_START_IN_PLACE
                                 : sm->inplace ? AGENT_START_RANKS
                                               : AGENT_START_ALL;
    /* Tell the daemon at once that we are alive and past the start (ends its start grace). */
    add_gen(r, AGENT_DO_BARE_BEAT, rd->generation);
}

static void on_start_failed(struct agent_sm *sm, struct agent_ready *r)
{
    struct agent_effect *fx;

    sm->local_failure = true;
    set_state(sm, AG_RESTARTING, r);
    sm->stopping_gen = sm->round.generation;
    fx = add(r, AGENT_DO_WORKER_EXIT);
    fx->local_rank = 0;
    fx->code = 127;
}

/* Another node's worker failed at start-up (EVENT restart's startup_grace_ms, 1.17), and no
 * worker here made a first step either. Stopped at once, they could never show that they fail
 * alike (a script bug fails on every node, a few milliseconds apart): the faster node would be
 * judged a bad node and put aside. So the stop waits up to startup_grace_ms: a worker that fails
 * meanwhile is reported as any failure, all exiting means READY, and at the end the rest are
 * stopped (AGENT_TIMER_GRACE). */
static bool grace_begin(struct agent_sm *sm, const struct agent_facts *f,
                        const struct rdzv_event *e, int64_t now_ms, struct agent_ready *r)
{
    if (e->startup_grace_ms <= 0 || sm->grace_on || sm->state != AG_RUNNING ||
        f->running == 0 || f->stepped)
        return false;
    add_timer(r, AGENT_TIMER_GRACE, now_ms + e->startup_grace_ms);
    sm->grace_on = true;
    sm->stopping_gen = e->generation;
    sm->restart_pending = true;
    say(r, RDZV_LOG_WARN,
        "restarting: %s; the workers here have not made a first step either: they get "
        "%.1f s to show whether they fail the same way (the job's own failure, as a script "
        "bug, puts no node aside)", e->summary, (double)e->startup_grace_ms / 1000);
    return true;
}

static void on_grace_due(struct agent_sm *sm, struct agent_ready *r)
{
    if (!sm->grace_on)
        return;
    sm->grace_on = false;
    /* Leaving RUNNING ends the hold: a generation of its own, all the same. */
    if (sm->state != AG_RUNNING || sm->round.generation != sm->stopping_gen)
        return;
    say(r, RDZV_LOG_INFO, "workers still starting after the grace: stopping them for the restart");
    set_state(sm, AG_RESTARTING, r);
    add_stop(sm, r, SIGTERM);
}

/* The daemon says: stop the workers of generation e->generation, a new round follows. */
static void on_restart(struct agent_sm *sm, const struct agent_facts *f,
                       const struct rdzv_event *e, int64_t now_ms, struct agent_ready *r)
{
    switch (sm->state) {
    case AG_RUNNING:
        if (sm->round.generation != e->generation)
            break;
        add_gen(r, AGENT_DO_HEARTBEAT, sm->round.generation); /* last steps, as worker_failed */
        if (keep_in_place(sm, f, r)) {
            say(r, RDZV_LOG_WARN, "re-forming in place: %s", e->summary);
            send_ready(sm, f, e->generation, r);
            return;
        }
        if (grace_begin(sm, f, e, now_ms, r))
            return;
        say(r, RDZV_LOG_WARN, "restarting: %s", e->summary);
        set_state(sm, AG_RESTARTING, r);
        sm->stopping_gen = e->generation;
        sm->restart_pending = true;
        if (sm->workers_gone) { /* all exited while a failure's report was held */
            send_ready(sm, f, e->generation, r);
            return;
        }
        add_stop(sm, r, SIGTERM);
        return;
    case AG_RESTARTING:
        if (sm->stopping_gen != e->generation)
            break;
        /* Said here too when the root cause is ours: every agent of the job says the same. */
        say(r, RDZV_LOG_WARN, "%s: %s", in_place(sm) ? "re-forming in place" : "restarting",
            e->summary);
        sm->restart_pending = true;
        if ((sm->dropped || sm->plain) && !sm->workers_gone && !sm->stop_sent)
            add_stop(sm, r, SIGTERM); /* in place, the survivors too; once, if EVENTs repeat */
        if (in_place(sm))
            ready_in_place(sm, f, r);
        else if (sm->workers_gone)
            send_ready(sm, f, e->generation, r);
        return;
    case AG_LEFT:
        if (sm->round.generation != e->generation)
            break;
        say(r, RDZV_LOG_WARN, "restarting (our workers had finished): %s", e->summary);
        send_ready(sm, f, e->generation, r);
        return;
    case AG_JOINING:
        send_ready(sm, f, e->generation, r); /* nothing runs here */
        return;
    default:
        return;
    }
    say(r, RDZV_LOG_DEBUG, "restart of generation %" PRIu64 " ignored (state %d)", e->generation,
        sm->state);
}

/* The job's outcome: its exit code, and the workers stopped unless they are gone. */
static void on_outcome(struct agent_sm *sm, const struct agent_facts *f,
                       const struct rdzv_event *e, struct agent_ready *r)
{
    bool verdict = sm->awaiting_verdict, survivors = agent_sm_has_survivors(sm, f->running);

    sm->awaiting_verdict = false;
    timer_cancel(sm, AGENT_TIMER_VERDICT, r);
    sm->outcome = *e;
    sm->have_outcome = true;
    sm->put_aside = strcmp(e->type, "put_aside") == 0;
    if (strcmp(e->type, "succeeded") == 0) {
        sm->exit_code = 0;
    } else if (sm->put_aside) {
        sm->exit_code = RDZV_EXIT_PUT_ASIDE; /* whatever the event says: the man page's status */
        say(r, RDZV_LOG_ERROR, "this node is put aside by job %s: %s", sm->run_id, e->summary);
    } else if (strcmp(e->type, "cancelled") == 0 || strcmp(e->type, "left") == 0) {
        /* left (1.7): this agent was signalled and the job goes on without its node */
        sm->exit_code = e->exit_code > 128 && e->exit_code < 256 ? (int)e->exit_code : 143;
    } else {
        sm->exit_code = e->exit_code ? (int)e->exit_code : 1;
    }
    if (!sm->workers_gone && sm->exit_code == 0 &&
        (sm->state == AG_RUNNING || (sm->state == AG_RESTARTING && f->running > 0))) {
        /* A19a: fresh workers beside survivors that are done (R17a), or kept after a failure */
        set_state(sm, AG_STOPPING, r);
        if (sm->stop_sent)
            return; /* they are being stopped already */
        say(r, RDZV_LOG_WARN, "job %s succeeded on its other nodes; this node's workers have %d s "
            "to end on their own", sm->run_id, RDZV_NEWCOMER_WAIT_MS / 1000);
        timer_arm(sm, AGENT_TIMER_OWN_END, RDZV_NEWCOMER_WAIT_MS, r);
        return;
    }
    if (!sm->workers_gone && (survivors || sm->state == AG_RUNNING ||
                              (sm->exit_code != 0 && sm->state == AG_RESTARTING))) {
        if (sm->put_aside)
            say(r, RDZV_LOG_WARN,
                "stopping local workers: this node takes no further part in the job");
        else if (strcmp(e->type, "cancelled") == 0)
            say(r, RDZV_LOG_WARN, "job cancelled: stopping local workers (%s)", e->summary);
        else if (strcmp(e->type, "left") == 0)
            say(r, RDZV_LOG_WARN, "stopping local workers: %s", e->summary);
        else
            say(r, RDZV_LOG_WARN, "job %s on another node; stopping local workers",
                sm->exit_code ? "failed" : "succeeded");
        set_state(sm, AG_STOPPING, r);
        add_stop(sm, r, SIGTERM);
        return;
    }
    if (sm->workers_gone || sm->state == AG_JOINING || (verdict && sm->state != AG_STOPPING))
        finish(sm, r);
}

static void on_health_ok(struct agent_sm *sm, const struct agent_input *in,
                         struct agent_ready *r)
{
    uint64_t gen = sm->ready_waiting;

    sm->ready_waiting = 0;
    if (in->unchecked) /* READY all the same (the adapter said why) */
        send_ready(sm, &in->facts, gen, r);
    else if (gen && sm->state == AG_RESTARTING && !sm->have_outcome)
        send_ready(sm, &in->facts, gen, r);
}

/* The session is over, once rdzvd's word on a CANCEL came or its wait ran out. */
static void finish(struct agent_sm *sm, struct agent_ready *r)
{
    if (sm->state == AG_DONE)
        return;
    if (sm->awaiting_verdict) { /* rdzvd's word on this node's leaving first (EVENT) */
        timer_arm(sm, AGENT_TIMER_VERDICT, AGENT_VERDICT_MS, r);
        return;
    }
    timer_cancel(sm, AGENT_TIMER_VERDICT, r);
    timer_cancel(sm, AGENT_TIMER_OWN_END, r);
    set_state(sm, AG_DONE, r);
    add(r, AGENT_DO_FINISH);
}

static void on_verdict_due(struct agent_sm *sm, struct agent_ready *r)
{
    sm->timer_on[AGENT_TIMER_VERDICT] = false;
    say(r, RDZV_LOG_WARN, "rdzvd did not answer this node's leaving within %d ms",
        AGENT_VERDICT_MS);
    sm->awaiting_verdict = false;
    finish(sm, r);
}

/* A19a's wait is over: the workers still running wait for peers that are done. */
static void on_own_end_due(struct agent_sm *sm, struct agent_ready *r)
{
    sm->timer_on[AGENT_TIMER_OWN_END] = false;
    if (sm->workers_gone || sm->state != AG_STOPPING || sm->stop_sent)
        return;
    say(r, RDZV_LOG_WARN,
        "this node's workers did not end within %d s of the job's success (they wait for "
        "peers that are done): stopping them", RDZV_NEWCOMER_WAIT_MS / 1000);
    add_stop(sm, r, SIGTERM);
}

/* What a signal to the agent from outside means, for its log and its last line. */
static const char *signal_meaning(int signum)
{
    return signum == SIGTERM  ? "the scheduler or someone stopped this node"
           : signum == SIGINT ? "a Ctrl-C, or the scheduler stopped this node"
           : signum == SIGHUP ? "the terminal or session it ran in closed"
                              : "someone asked it to quit";
}

/* The session ends from here: the workers stop with sig, or, gone already, it is over. */
static void stop_or_finish(struct agent_sm *sm, const struct agent_facts *f, int sig,
                           struct agent_ready *r)
{
    if (!sm->workers_gone && (sm->state == AG_RUNNING || sm->state == AG_RESTARTING ||
                              sm->state == AG_STOPPING || agent_sm_has_survivors(sm, f->running))) {
        set_state(sm, AG_STOPPING, r);
        add_stop(sm, r, sig);
    } else {
        finish(sm, r);
    }
}

/* The outcome of a signal from outside (ended: the scheduler ends the whole job, text says how
 * it knows); then the CANCEL, or the workers stopped with that signal. */
static void signal_outcome(struct agent_sm *sm, const struct agent_facts *f, int signum,
                           bool ended, const char *text, struct agent_ready *r)
{
    bool cancel = signum == SIGTERM || signum == SIGINT;
    char buf[16];
    const char *name = rdzv_signal_name(signum, buf, sizeof(buf));

    snprintf(sm->outcome.type, sizeof(sm->outcome.type),
             ended ? "cancelled" : cancel ? "left" : "failed");
    if (ended)
        snprintf(sm->outcome.summary, sizeof(sm->outcome.summary),
                 "cancelled: the agent of node %s received %s from outside (%s)", sm->host, name,
                 text ? text : "");
    else
        snprintf(sm->outcome.summary, sizeof(sm->outcome.summary),
                 cancel ? "this node left job %s: its agent received %s from outside (%s)"
                        : "the agent%.0s received %s from outside (%s)",
                 sm->run_id, name, signal_meaning(signum));
    sm->have_outcome = true;
    sm->exit_code = 128 + signum;
    /* Stopped from outside: this node leaves, or the scheduler ends the job (cancelled even when
     * no rdzvd answers: its replicas got the signal too); rdzvd answers (EVENT). What follows
     * waits for AGENT_IN_CANCEL_SENT. */
    if (cancel && f->connected) {
        add(r, AGENT_DO_CANCEL)->sig = signum;
        return;
    }
    stop_or_finish(sm, f, signum, r);
}

static void on_signal(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    int signum = in->sig;
    char buf[16];
    const char *name = rdzv_signal_name(signum, buf, sizeof(buf));

    if (signum == SIGUSR1 || signum == SIGUSR2) {
        /* Slurm's --signal=USR1@T warns of the time limit: pass it on, keep running. */
        say(r, RDZV_LOG_INFO, "forwarding %s to the workers", name);
        add(r, AGENT_DO_SIGNAL)->sig = signum;
        return;
    }
    say(r, RDZV_LOG_WARN,
        "received %s from outside (%s): stopping the workers (grace %.0f s, then SIGKILL)", name,
        signal_meaning(signum), sm->grace_s);
    /* The worker died of this signal: the agent reports it, not the worker. */
    if (sm->held.on && sm->held.for_signal) {
        add_timer(r, AGENT_TIMER_HOLD, -1);
        sm->held.on = false;
        say(r, RDZV_LOG_INFO, "worker local rank %u was killed by the same signal",
            sm->held.local_rank);
    }
    sm->signal = signum;
    if (sm->have_outcome)
        stop_or_finish(sm, &in->facts, signum, r);
    else if (signum == SIGTERM || signum == SIGINT) /* does the scheduler end the job? R15a */
        add(r, AGENT_DO_ASK_SCHEDULER)->sig = signum;
    else
        signal_outcome(sm, &in->facts, signum, false, NULL, r);
}

/* Put aside by its own health check, rdzvd not told: the outcome is here. */
static void put_aside_here(struct agent_sm *sm, const struct agent_facts *f,
                           struct agent_ready *r)
{
    snprintf(sm->outcome.type, sizeof(sm->outcome.type), "put_aside");
    snprintf(sm->outcome.summary, sizeof(sm->outcome.summary),
             "this node failed its health check: %s", sm->reason);
    sm->have_outcome = sm->put_aside = true;
    sm->exit_code = RDZV_EXIT_PUT_ASIDE;
    if (!sm->workers_gone && f->running > 0) {
        set_state(sm, AG_STOPPING, r);
        add_stop(sm, r, SIGTERM);
    } else {
        finish(sm, r);
    }
}

/* A check failed while this node takes part: rdzvd is told (UNHEALTHY), puts the node aside and
 * answers EVENT put_aside (the outcome stops the workers, exit 69); without a connection, here. */
static void on_unhealthy(struct agent_sm *sm, const struct agent_input *in,
                         struct agent_ready *r)
{
    struct agent_effect *fx;

    if (sm->unhealthy || sm->have_outcome)
        return;
    sm->unhealthy = true;
    say(r, RDZV_LOG_ERROR, "this node failed its health check: %s", in->text);
    snprintf(sm->reason, sizeof(sm->reason), "%s", in->text);
    if (!in->facts.connected) {
        put_aside_here(sm, &in->facts, r);
        return;
    }
    fx = add(r, AGENT_DO_UNHEALTHY);
    fx->text = sm->reason;
}

/* Fatal: the daemon refused us, or could not be reached (again) in time. A refused JOIN while
 * the node waits for its first ROUND, no survivors kept, may be answered by a new node id. */
static void on_error(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    if (in->renewable && sm->state == AG_JOINING &&
        !agent_sm_has_survivors(sm, in->facts.running)) {
        struct agent_effect *fx = add(r, AGENT_DO_RENEW);

        fx->text = in->text;
        fx->code = in->status;
        return;
    }
    say(r, RDZV_LOG_ERROR, "%s", in->text);
    if (sm->have_outcome)
        return;
    snprintf(sm->outcome.type, sizeof(sm->outcome.type), "failed");
    snprintf(sm->outcome.summary, sizeof(sm->outcome.summary), "%s", in->text);
    sm->have_outcome = true;
    if (sm->exit_code == 0) /* no rdzvd answered: its own status (the man page's) */
        sm->exit_code = (int)in->status;
    if (!sm->workers_gone && sm->state != AG_DONE &&
        (sm->state != AG_JOINING || agent_sm_has_survivors(sm, in->facts.running))) {
        set_state(sm, AG_STOPPING, r);
        add_stop(sm, r, SIGTERM);
    } else {
        finish(sm, r);
    }
}

/* A30: how long the workers go on with no rdzvd reached. Replicas: a heartbeat timeout (a new
 * leader goes on without this node). One rdzvd: the window a restarted rdzvd waits for its
 * nodes (2 heartbeat timeouts and a reconnect wait); one that saw the loss went on at once. */
_Static_assert(RDZV_RECONNECT_WAIT_MAX_MS == 3000, "on_leaderless_due says 3 s");
static int64_t leaderless_ms(const struct agent_sm *sm, const struct agent_facts *f)
{
    int64_t hb = (int64_t)(sm->heartbeat_timeout_s * 1000);

    return f->endpoints > 1 ? hb : 2 * hb + RDZV_RECONNECT_WAIT_MAX_MS;
}

/* The connection to rdzvd broke: keep the workers for a while, reconnect and re-register. */
static void on_lost(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    const struct agent_facts *f = &in->facts;

    sm->round_pending = false; /* a ROUND of the connection lost: rdzvd places the node again */

    if (sm->have_outcome) { /* leaving anyway (signalled, put aside, the job over): stay gone */
        sm->awaiting_verdict = false;
        if (sm->workers_gone || sm->state != AG_STOPPING)
            finish(sm, r);
        return;
    }
    say(r, RDZV_LOG_WARN, "%s; %s (for up to %.0f s%s)", in->text,
        f->running ? "workers keep running, reconnecting" : "reconnecting", sm->connect_timeout_s,
        f->endpoints > 1 ? "; stopped if no leader answers within --heartbeat-timeout"
                         : "; stopped if rdzvd stays away past its rebuild window");
    if (f->endpoints > 1)
        add(r, AGENT_DO_NEXT_ENDPOINT);
    timer_arm(sm, AGENT_TIMER_LEADERLESS, leaderless_ms(sm, f), r);
    add(r, AGENT_DO_CONNECT);
}

/* No rdzvd was reached for leaderless_ms since the connection was lost (A32). With replicas this
 * node may be on the minority side of a partition, while the majority's leader goes on without
 * it; with one rdzvd, rdzvd went on without it, or a restarted one lost it. Its workers stop
 * rather than train a copy of the model that may diverge; the failure is reported once rdzvd
 * answers, and the job goes on as after any failure. */
static void on_leaderless_due(struct agent_sm *sm, const struct agent_facts *f,
                              struct agent_ready *r)
{
    bool one = f->endpoints <= 1;
    double s = (double)leaderless_ms(sm, f) / 1000;

    sm->timer_on[AGENT_TIMER_LEADERLESS] = false;
    if (f->running == 0)
        return;
    snprintf(sm->reason, sizeof(sm->reason), "its node reached no rdzvd%s for %.1f s (%s): "
             "stopped rather than train a copy that may diverge", one ? "" : " leader", s,
             one ? "2 x --heartbeat-timeout + 3 s" : "--heartbeat-timeout");
    say(r, RDZV_LOG_ERROR,
        one ? "rdzvd unreachable for %.1f s (2 x --heartbeat-timeout + 3 s): the job may have "
              "gone on without this node; stopping the workers; reconnecting"
            : "no rdzvd leader reachable for %.1f s (a partition, or most replicas down): "
              "stopping the workers rather than train a copy that may diverge; reconnecting", s);
    if (sm->state == AG_RUNNING) {
        bool held = grace_end(sm, r); /* its EVENT restart came already */
        struct agent_effect *fx;

        sm->local_failure = true;
        fx = add(r, AGENT_DO_WORKER_EXIT);
        fx->local_rank = 0;
        fx->code = 128 + SIGTERM;
        fx->sig = SIGTERM;
        fx->text = sm->reason;
        set_state(sm, AG_RESTARTING, r);
        sm->stopping_gen = sm->round.generation;
        sm->restart_pending = held;
    }
    add_stop(sm, r, SIGTERM);
}

static void on_joined(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    const struct agent_facts *f = &in->facts;

    timer_cancel(sm, AGENT_TIMER_LEADERLESS, r);
    if (in->resumed)
        say(r, RDZV_LOG_INFO, "reconnected to rdzvd: generation %" PRIu64 " goes on",
            sm->round.generation);
    else if (in->spare)
        say(r, RDZV_LOG_INFO, "the job runs without this node for now: waiting as a spare");
    /* Our generation is over without us: the EVENT restart that follows stops every worker. */
    if (in->spare && !in->resumed && f->running > 0 &&
        (sm->state == AG_RUNNING || sm->state == AG_RESTARTING))
        sm->dropped = true;
    if (in->spare && !in->resumed) /* a new member: every rank starts again (A3a) */
        memset(sm->done, 0, (size_t)sm->nproc * sizeof(*sm->done));
    /* An unsent WORKER_EXIT goes now, and again one that a deposed leader took (resumed, no
     * EVENT restart: it was lost); rdzvd ignores a repeat (its generation stopping or over). */
    if (f->pending_exit || (in->resumed && sm->local_failure && sm->state == AG_RESTARTING &&
                            !sm->restart_pending && f->exit_gen == sm->stopping_gen))
        add(r, AGENT_DO_RESEND_EXIT);
    if (sm->unhealthy && !sm->have_outcome) /* not let go yet: its UNHEALTHY may be lost */
        add(r, AGENT_DO_UNHEALTHY)->text = sm->reason;
    if (in->spare && !in->resumed) /* at once: --scale-up now takes a joiner in at its first
                                    * HEARTBEAT */
        add(r, AGENT_DO_HEARTBEAT);
    add(r, AGENT_DO_REPLICA_JOINED);
    /* Our workers all exited 0 while we were reconnecting: the LEAVE then went nowhere, and the
     * resume (made when the connection was lost) does not say it. (A duplicate is harmless.) */
    if (in->resumed && sm->state == AG_LEFT)
        add_gen(r, AGENT_DO_LEAVE, sm->round.generation);
}

/* A hung worker (its stacks logged, or none could be had) is failed as if it had crashed: its
 * process group killed now (a hung process may ignore SIGTERM), rdzvd told why, and the other
 * workers stopped as after any failure. Its exit, when it comes, is a consequence (the state is
 * no longer RUNNING). */
static void on_hung(struct agent_sm *sm, const struct agent_input *in, struct agent_ready *r)
{
    const bool *running = in->facts.rank_running;
    struct agent_effect *fx;

    if (sm->state != AG_RUNNING || sm->round.generation != in->gen || !running ||
        !running[in->local_rank])
        return; /* its generation is over, or it is gone: nothing hangs any more */
    say(r, RDZV_LOG_ERROR,
        "worker rank %" PRId64 " (local rank %u) %s: failing it (--progress-timeout)",
        sm->round.rank_offset + in->local_rank, in->local_rank, in->text);
    sm->local_failure = true;
    add(r, AGENT_DO_KILL)->local_rank = in->local_rank;
    snprintf(sm->reason, sizeof(sm->reason), "%s", in->text);
    fx = add(r, AGENT_DO_WORKER_EXIT);
    fx->local_rank = in->local_rank;
    fx->code = 128 + SIGKILL;
    fx->sig = SIGKILL;
    fx->text = sm->reason;
    fail_local(sm, &in->facts, in->local_rank, r);
}

/* The check before the JOIN: a node that fails it never joins. */
static void on_start_checked(struct agent_sm *sm, const struct agent_input *in,
                             struct agent_ready *r)
{
    if (in->ok) {
        if (sm->state != AG_DONE) /* else a signal ended it meanwhile */
            add(r, AGENT_DO_JOIN);
        return;
    }
    say(r, RDZV_LOG_ERROR, "this node failed its health check: %s; it does not join job %s",
        in->text, sm->run_id);
    snprintf(sm->outcome.type, sizeof(sm->outcome.type), "put_aside");
    snprintf(sm->outcome.summary, sizeof(sm->outcome.summary),
             "this node failed its health check before joining: %s", in->text);
    sm->have_outcome = sm->put_aside = sm->unhealthy = true;
    sm->exit_code = RDZV_EXIT_PUT_ASIDE;
    finish(sm, r);
}

int agent_session_step(struct agent_sm *sm, const struct agent_input *in, int64_t now_ms,
                       struct agent_ready *ready)
{
    ready->n = ready->nlog = ready->lost = 0;
    sm->now_ms = now_ms;
    switch (in->kind) {
    case AGENT_IN_ROUND:
        on_round(sm, in, ready);
        return 0;
    case AGENT_IN_START_FAILED:
        on_start_failed(sm, ready);
        return 0;
    case AGENT_IN_EVENT:
        if (strcmp(in->event->type, "restart") == 0)
            on_restart(sm, &in->facts, in->event, now_ms, ready);
        else
            on_outcome(sm, &in->facts, in->event, ready);
        return 0;
    case AGENT_IN_WORKER_EXIT:
        on_worker_exit(sm, in, ready);
        return 0;
    case AGENT_IN_HUNG:
        on_hung(sm, in, ready);
        return 0;
    case AGENT_IN_ALL_EXITED:
        on_all_exited(sm, &in->facts, ready);
        return 0;
    case AGENT_IN_HEALTH_OK:
        on_health_ok(sm, in, ready);
        return 0;
    case AGENT_IN_TIMER:
        if (in->timer == AGENT_TIMER_HOLD)
            on_hold_due(sm, &in->facts, ready);
        else if (in->timer == AGENT_TIMER_GRACE)
            on_grace_due(sm, ready);
        else if (in->timer == AGENT_TIMER_VERDICT)
            on_verdict_due(sm, ready);
        else if (in->timer == AGENT_TIMER_LEADERLESS)
            on_leaderless_due(sm, &in->facts, ready);
        else if (in->timer == AGENT_TIMER_OWN_END)
            on_own_end_due(sm, ready);
        else
            return -EINVAL;
        return 0;
    case AGENT_IN_SIGNAL:
        on_signal(sm, in, ready);
        return 0;
    case AGENT_IN_SCHEDULER:
        signal_outcome(sm, &in->facts, sm->signal, in->ended, in->text, ready);
        return 0;
    case AGENT_IN_CANCEL_SENT:
        sm->awaiting_verdict = in->ok;
        stop_or_finish(sm, &in->facts, sm->signal, ready);
        return 0;
    case AGENT_IN_UNHEALTHY:
        sm->ready_waiting = 0;
        on_unhealthy(sm, in, ready);
        return 0;
    case AGENT_IN_UNHEALTHY_UNSENT:
        put_aside_here(sm, &in->facts, ready);
        return 0;
    case AGENT_IN_ERROR:
        on_error(sm, in, ready);
        return 0;
    case AGENT_IN_LOST:
        on_lost(sm, in, ready);
        return 0;
    case AGENT_IN_JOINED:
        on_joined(sm, in, ready);
        return 0;
    case AGENT_IN_START_CHECKED:
        on_start_checked(sm, in, ready);
        return 0;
    case AGENT_IN_OUTPUT_CLOSED:
        on_output_closed(sm, in, ready);
        return 0;
    case AGENT_IN_HEALTH_DUE: /* while the node takes part, unless a check failed */
        if (!sm->unhealthy && !sm->have_outcome && in->facts.connected &&
            (sm->state == AG_RUNNING || sm->state == AG_LEFT || sm->state == AG_JOINING))
            add(ready, AGENT_DO_CHECK);
        return 0;
    case AGENT_IN_SILENT: /* its stacks first, while its generation runs */
        if (sm->state == AG_RUNNING) {
            struct agent_effect *fx = add(ready, AGENT_DO_STACKS);

            fx->local_rank = in->local_rank;
            fx->gen = sm->round.generation;
        }
        return 0;
    case AGENT_IN_UNCONNECTED:
        sm->exit_code = 1;
        finish(sm, ready);
        return 0;
    }
    return -EINVAL;
}
