/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session.c: the agent's rendezvous session, the adapter of its step machine
 * (agent-session-sm.h): the client's, the group's and the timers' callbacks become inputs, and
 * each step's Ready is carried out here (messages, workers, timers, the end). It still decides
 * itself a signal to the agent, a lost connection, rdzvd's refusal, no leader reached and a
 * failed health check (docs/design/agent-policy.md); NCCL ids, heartbeats, reconnecting. */
#include "agent/session/agent-session.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/session/agent-client.h"
#include "agent/group/agent-env.h"
#include "agent/session/agent-heartbeat.h"
#include "agent/session/agent-identity.h"
#include "agent/session/agent-sched.h"
#include "agent/session/agent-nccl.h"
#include "agent/session/agent-replica.h"
#include "agent/session/agent-session-impl.h"
#include "agent/group/agent-stacks.h"
#include "agent/session/agent-store.h"
#include "agent/group/agent-workers.h"

static void agent_finish(struct agent_session *a);
static int agent_connect(struct agent_session *a);
static void heartbeat_cb(uv_timer_t *t);
static void on_lost(struct agent_client *c, const char *msg, void *ud);
static void health_cb(void *ud, bool healthy, const char *reason);

/* --recovery inplace: READY went out while workers of the last generation keep running (without
 * it, JOINING means every worker has exited). */
static bool has_survivors(const struct agent_session *a)
{
    return agent_sm_has_survivors(&a->sm, a->group ? agent_group_running(a->group) : 0);
}

/* What the machine must know of the workers now. */
static void fill_facts(struct agent_session *a, struct agent_facts *f)
{
    *f = (struct agent_facts){0};
    if (!a->group)
        return;
    f->running = agent_group_running(a->group);
    f->following = agent_group_following(a->group);
    for (unsigned i = 0; i < (unsigned)a->cfg.nproc; i++) {
        uint64_t step, age_ms;

        a->rank_running[i] = agent_group_rank_running(a->group, i);
        if (agent_group_progress(a->group, i, &step, &age_ms) == 0)
            f->stepped = true;
    }
    f->rank_running = a->rank_running;
}

void agent_session_feed(struct agent_session *a, struct agent_input *in)
{
    struct agent_ready r;

    fill_facts(a, &in->facts);
    if (agent_session_step(&a->sm, in, (int64_t)uv_now(a->loop), &r) == 0)
        agent_session_apply(a, &r);
}

void agent_session_set_state(struct agent_session *a, enum agent_state st)
{
    struct agent_ready r = {.n = 0};

    agent_sm_set_state(&a->sm, st, &r);
    agent_session_apply(a, &r);
}

static void hold_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_TIMER,
                                                      .timer = AGENT_TIMER_HOLD});
}

static void grace_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_TIMER,
                                                      .timer = AGENT_TIMER_GRACE});
}

/* A machine's timer armed at due_ms (uv_now's clock), or stopped (due_ms < 0). */
static void arm_timer(struct agent_session *a, enum agent_timer t, int64_t due_ms)
{
    uv_timer_t *h = t == AGENT_TIMER_HOLD ? &a->hold_timer : &a->grace_timer;
    int64_t now = (int64_t)uv_now(a->loop);

    if (due_ms < 0) {
        (void)uv_timer_stop(h);
        return;
    }
    (void)uv_timer_start(h, t == AGENT_TIMER_HOLD ? hold_cb : grace_cb,
                         (uint64_t)(due_ms > now ? due_ms - now : 0), 0);
}

/* The ROUND taken (agent_session_step decided it): its store, front and log context. */
static void round_begin(struct agent_session *a)
{
    const struct rdzv_round *r = &a->sm.round;

    agent_store_round(a->store, r->generation);
    agent_session_round_assignment(a, &a->as);
    /* The last generation's front says what it did under that generation's name. */
    agent_session_front_close(a);
    if (!a->cfg.embedded)
        rdzv_log_set_context("job=%s gen=%" PRIu64 " node=%s", a->cfg.run_id, r->generation,
                             a->cfg.host);
    log_info("generation %" PRIu64 ": node rank %" PRId64 " of %" PRId64 ", ranks %" PRId64
             "..%" PRId64 " of %" PRId64 ", store %s:%" PRId64 ", restart %" PRId64 " of %" PRId64,
             r->generation, r->node_rank, r->nnodes, r->rank_offset,
             r->rank_offset + a->cfg.nproc - 1, r->world_size, r->master_addr, r->master_port,
             r->restart_count, r->max_restarts);
    agent_session_front_round(a, &a->as);
}

static void start_workers(struct agent_session *a, enum agent_start_mode mode)
{
    int e = mode == AGENT_START_IN_PLACE ? agent_session_round_in_place(a, &a->as)
            : mode == AGENT_START_RANKS  ? agent_group_start_ranks(a->group, &a->as, NULL)
                                         : agent_group_start(a->group, &a->as);

    if (e < 0) {
        log_error_errno(e, "cannot start the workers");
        agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_START_FAILED, .err = e});
    }
}

/* Our own workers failed: the node is checked before it offers itself again. */
static void check_before_ready(struct agent_session *a)
{
    int r = agent_health_run(a->health, health_cb, a);

    if (r == 0 || r == -EBUSY)
        return; /* health_cb sends it */
    log_warn_errno(r, "health: the node cannot be checked; ready all the same");
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_HEALTH_OK, .unchecked = true});
}

static void apply_one(struct agent_session *a, const struct agent_effect *fx)
{
    switch (fx->kind) {
    case AGENT_DO_HEARTBEAT:
        heartbeat_cb(&a->heartbeat);
        return;
    case AGENT_DO_BARE_BEAT:
        (void)agent_client_send_heartbeat(a->client,
                                          &(struct rdzv_heartbeat){.generation = fx->gen});
        return;
    case AGENT_DO_WORKER_EXIT:
        agent_session_report_failure(a, a->sm.round.rank_offset + fx->local_rank, fx->local_rank,
                                     fx->code, fx->sig, NULL);
        return;
    case AGENT_DO_READY:
        (void)agent_client_send_ready(a->client, &(struct rdzv_ready){.generation = fx->gen});
        return;
    case AGENT_DO_LEAVE:
        (void)agent_client_send_leave(
            a->client, &(struct rdzv_leave){.generation = fx->gen, .succeeded = true});
        return;
    case AGENT_DO_ROUND_BEGIN:
        round_begin(a);
        return;
    case AGENT_DO_ROUND_ACK:
        (void)agent_client_send_round_ack(a->client, fx->gen);
        return;
    case AGENT_DO_START:
        start_workers(a, fx->mode);
        return;
    case AGENT_DO_REPLACE:
        if (agent_session_replace_late(a, fx->local_rank) < 0) /* its exit as any other */
            agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_WORKER_EXIT,
                                                        .local_rank = fx->local_rank,
                                                        .status = fx->code, .sig = fx->sig,
                                                        .replace_failed = true});
        return;
    case AGENT_DO_STOP:
        agent_group_stop(a->group, fx->sig);
        return;
    case AGENT_DO_HEALTH:
        check_before_ready(a);
        return;
    case AGENT_DO_TIMER:
        arm_timer(a, fx->timer, fx->due_ms);
        return;
    case AGENT_DO_CANCEL_VERDICT:
        (void)uv_timer_stop(&a->verdict);
        return;
    case AGENT_DO_FINISH:
        agent_finish(a);
        return;
    }
}

void agent_session_apply(struct agent_session *a, const struct agent_ready *r)
{
    for (unsigned i = 0; i < r->n; i++)
        apply_one(a, &r->fx[i]);
}

void agent_session_fail_local(struct agent_session *a, unsigned local_rank)
{
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_FAIL_LOCAL,
                                                .local_rank = local_rank});
}

void agent_session_group_exit(struct agent_group *g, unsigned local_rank, int64_t status, int sig,
                              void *ud)
{
    (void)g;
    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_WORKER_EXIT,
                                                 .local_rank = local_rank, .status = status,
                                                 .sig = sig});
}

void agent_session_group_all_exited(struct agent_group *g, void *ud)
{
    (void)g;
    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_ALL_EXITED});
}

static void on_round(struct agent_client *c, const struct rdzv_round *r, void *ud)
{
    struct agent_session *a = ud;

    a->join.ran_incarnation = agent_client_incarnation(c); /* its rdzvd ran ours (1.20) */
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_ROUND, .round = r});
}

static void on_event(struct agent_client *c, const struct rdzv_event *e, void *ud)
{
    (void)c;
    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_EVENT, .event = e});
}

/* A check failed while this node takes part: rdzvd is told (UNHEALTHY), puts the node aside and
 * answers EVENT put_aside (on_event stops the workers, exit 69); without a connection, here. */
static void report_unhealthy(struct agent_session *a, const char *reason)
{
    struct rdzv_unhealthy u;

    if (a->unhealthy || a->sm.have_outcome)
        return;
    a->unhealthy = true;
    log_error("this node failed its health check: %s", reason);
    snprintf(u.reason, sizeof(u.reason), "%s", reason);
    rdzv_utf8_trim(u.reason);
    if (a->client && agent_client_send_unhealthy(a->client, &u) == 0)
        return;
    snprintf(a->sm.outcome.type, sizeof(a->sm.outcome.type), "put_aside");
    snprintf(a->sm.outcome.summary, sizeof(a->sm.outcome.summary),
             "this node failed its health check: %s", reason);
    a->sm.have_outcome = a->sm.put_aside = true;
    a->sm.exit_code = RDZV_EXIT_PUT_ASIDE;
    if (!a->sm.workers_gone && a->group && agent_group_running(a->group) > 0) {
        agent_session_set_state(a, AG_STOPPING);
        agent_group_stop(a->group, SIGTERM);
    } else {
        agent_finish(a);
    }
}

static void health_cb(void *ud, bool healthy, const char *reason)
{
    struct agent_session *a = ud;

    if (!healthy) {
        a->sm.ready_waiting = 0;
        report_unhealthy(a, reason);
        return;
    }
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_HEALTH_OK});
}

static void health_timer_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    if (a->unhealthy || a->sm.have_outcome || !a->client)
        return;
    if (a->sm.state != AG_RUNNING && a->sm.state != AG_LEFT && a->sm.state != AG_JOINING)
        return;
    (void)agent_health_run(a->health, health_cb, a); /* -EBUSY: the one running will say */
}

/* Fatal: the daemon refused us, or could not be reached (again) in time. */
static void on_error(struct agent_client *c, const char *msg, void *ud)
{
    struct agent_session *a = ud;

    if (c && agent_identity_renew(&a->join, a->sm.state == AG_JOINING && !has_survivors(a), msg)) {
        on_lost(c, msg, a); /* its JOINED was lost: join again as a new node id */
        return;
    }
    log_error("%s", msg);
    if (a->sm.have_outcome)
        return;
    snprintf(a->sm.outcome.type, sizeof(a->sm.outcome.type), "failed");
    snprintf(a->sm.outcome.summary, sizeof(a->sm.outcome.summary), "%s", msg);
    a->sm.have_outcome = true;
    if (a->sm.exit_code == 0) /* no rdzvd answered: its own status (the man page's) */
        a->sm.exit_code = c && agent_client_unanswered(c) ? AGENT_EXIT_NO_RDZVD : 1;
    if (!a->sm.workers_gone && a->sm.state != AG_DONE &&
        (a->sm.state != AG_JOINING || has_survivors(a))) {
        agent_session_set_state(a, AG_STOPPING);
        agent_group_stop(a->group, SIGTERM);
    } else {
        agent_finish(a);
    }
}

static void on_joined(struct agent_client *c, bool spare, bool resumed, const char *secret,
                      void *ud)
{
    struct agent_session *a = ud;

    /* Reconnect here first (with replicas: the leader, as far as we know). */
    a->ep_last = agent_client_endpoint(c);
    a->incarnation = agent_client_incarnation(c);
    if (resumed) /* this rdzvd runs our generation now (1.20) */
        a->join.ran_incarnation = a->incarnation;
    (void)uv_timer_stop(&a->leaderless);
    /* Our proof of who we are when we reconnect (a resume, or a spare back after a stall). */
    if (secret[0])
        snprintf(a->join.secret, sizeof(a->join.secret), "%s", secret);
    if (resumed)
        log_info("reconnected to rdzvd: generation %" PRIu64 " goes on", a->sm.round.generation);
    else if (spare)
        log_info("the job runs without this node for now: waiting as a spare");
    /* Our generation is over without us: the EVENT restart that follows stops every worker. */
    if (spare && !resumed && a->group && agent_group_running(a->group) > 0 &&
        (a->sm.state == AG_RUNNING || a->sm.state == AG_RESTARTING))
        a->sm.dropped = true;
    /* An unsent WORKER_EXIT goes now, and again one that a deposed leader took (resumed, no
     * EVENT restart: it was lost); rdzvd ignores a repeat (its generation stopping or over). */
    if (a->pending_exit || (resumed && a->sm.local_failure && a->sm.state == AG_RESTARTING &&
                            !a->sm.restart_pending && a->pexit.generation == a->sm.stopping_gen))
        a->pending_exit = agent_client_send_worker_exit(a->client, &a->pexit) < 0;
    if (spare && !resumed) /* at once: --scale-up now takes a joiner in at its first HEARTBEAT */
        heartbeat_cb(&a->heartbeat);
    agent_replica_joined(&a->rhost);
    /* Our workers all exited 0 while we were reconnecting: the LEAVE then went nowhere, and the
     * resume (made when the connection was lost) does not say it. (A duplicate is harmless.) */
    if (resumed && a->sm.state == AG_LEFT)
        (void)agent_client_send_leave(
            a->client,
            &(struct rdzv_leave){.generation = a->sm.round.generation, .succeeded = true});
}

/* With replicas, no leader was reached for --heartbeat-timeout since the connection was lost:
 * this node may be on the minority side of a partition, where no generation can form, while the
 * majority's leader goes on without it after the same timeout. Its workers stop rather than train
 * a copy of the model that may diverge; the failure is reported once a leader answers, and the
 * job goes on as after any failure. */
static void leaderless_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;
    char reason[RDZV_REASON_MAX + 1];

    if (!a->group || agent_group_running(a->group) == 0)
        return;
    snprintf(reason, sizeof(reason),
             "its node reached no rdzvd leader for %.1f s (--heartbeat-timeout): stopped rather "
             "than train a copy that may diverge",
             a->cfg.heartbeat_timeout_s);
    log_error("no rdzvd leader reachable for %.1f s (a partition, or most replicas down): "
              "stopping the workers rather than train a copy that may diverge; reconnecting",
              a->cfg.heartbeat_timeout_s);
    if (a->sm.state == AG_RUNNING) {
        struct agent_ready rd = {.n = 0};
        bool held = agent_sm_grace_end(&a->sm, &rd); /* its EVENT restart came already */

        agent_session_apply(a, &rd);
        a->sm.local_failure = true;
        agent_session_report_failure(a, a->sm.round.rank_offset, 0, 128 + SIGTERM, SIGTERM,
                                     reason);
        agent_session_set_state(a, AG_RESTARTING);
        a->sm.stopping_gen = a->sm.round.generation;
        a->sm.restart_pending = held;
    }
    agent_group_stop(a->group, SIGTERM);
}

/* The connection to rdzvd broke: keep the workers, reconnect and re-register. */
static void on_lost(struct agent_client *c, const char *msg, void *ud)
{
    struct agent_session *a = ud;
    int r;

    if (a->sm.have_outcome) { /* leaving anyway (signalled, put aside, the job over): stay gone */
        a->sm.awaiting_verdict = false;
        agent_client_close(c, NULL, NULL);
        a->client = NULL;
        if (a->sm.workers_gone || a->sm.state != AG_STOPPING)
            agent_finish(a);
        return;
    }
    log_warn("%s; %s (for up to %.0f s%s)", msg, a->group && agent_group_running(a->group) ?
             "workers keep running, reconnecting" : "reconnecting", a->cfg.connect_timeout_s,
             a->eps.n > 1 ? "; stopped if no leader answers within --heartbeat-timeout" : "");
    if (a->eps.n > 1) {
        /* The replica we lost is the last to try again: the leader is elsewhere now. */
        a->ep_last = (a->ep_last + 1) % a->eps.n;
        if (!uv_is_active((uv_handle_t *)&a->leaderless))
            (void)uv_timer_start(&a->leaderless, leaderless_cb,
                                 (uint64_t)(a->cfg.heartbeat_timeout_s * 1000), 0);
    }
    agent_client_close(c, NULL, NULL);
    a->client = NULL;
    r = agent_connect(a);
    if (r < 0)
        on_error(NULL, "cannot reconnect to rdzvd", a);
}

/* A worker reported a step: the node's first ones in this generation go to rdzvd at once (they
 * date the end of a recovery; the next heartbeat may be heartbeat_s away). As many as it has
 * workers, and one more: in place a survivor may first report the step it was in. */
void agent_session_group_step(struct agent_group *g, unsigned local_rank, void *ud)
{
    struct agent_session *a = ud;

    (void)g;
    (void)local_rank;
    if (a->sm.state != AG_RUNNING || !a->client)
        return;
    if (a->first_step_gen != a->sm.round.generation) {
        a->first_step_gen = a->sm.round.generation;
        a->first_steps_sent = 0;
    }
    if (a->first_steps_sent > (uint64_t)a->cfg.nproc)
        return;
    a->first_steps_sent++;
    heartbeat_cb(&a->heartbeat);
}

static void heartbeat_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;
    struct rdzv_heartbeat hb;

    if (!a->client || a->sm.state == AG_DONE)
        return;
    /* The workers' progress, while they run this generation (rdzvctl status shows it). */
    agent_heartbeat_fill(&hb, a->sm.round.generation, a->sm.state == AG_RUNNING ? a->group : NULL,
                         (unsigned)a->cfg.nproc, a->cfg.stall);
    (void)agent_client_send_heartbeat(a->client, &hb);
}

/* What a signal to the agent from outside means, for its log and its last line. */
static const char *signal_meaning(int signum)
{
    return signum == SIGTERM  ? "the scheduler or someone stopped this node"
           : signum == SIGINT ? "a Ctrl-C, or the scheduler stopped this node"
           : signum == SIGHUP ? "the terminal or session it ran in closed"
                              : "someone asked it to quit";
}

void agent_session_signal(struct agent_session *a, int signum)
{
    char buf[16];
    const char *name = rdzv_signal_name(signum, buf, sizeof(buf));

    if (signum == SIGUSR1 || signum == SIGUSR2) {
        /* Slurm's --signal=USR1@T warns of the time limit: pass it on, keep running. */
        log_info("forwarding %s to the workers", name);
        if (a->group)
            agent_group_signal(a->group, signum);
        return;
    }
    log_warn("received %s from outside (%s): stopping the workers (grace %.0f s, then SIGKILL)",
             name, signal_meaning(signum), a->cfg.grace_s);
    if (a->sm.held.on) { /* the worker died of this signal: the agent reports it, not the worker */
        arm_timer(a, AGENT_TIMER_HOLD, -1);
        a->sm.held.on = false;
        log_info("worker local rank %u was killed by the same signal", a->sm.held.local_rank);
    }
    if (!a->sm.have_outcome) {
        bool cancel = signum == SIGTERM || signum == SIGINT;
        struct rdzv_cancel cn = {.signal = signum};
        bool ended = cancel && agent_sched_cancel(&cn); /* the scheduler ends the job: R15a */

        snprintf(a->sm.outcome.type, sizeof(a->sm.outcome.type),
                 ended ? "cancelled" : cancel ? "left" : "failed");
        if (ended)
            snprintf(a->sm.outcome.summary, sizeof(a->sm.outcome.summary),
                     "cancelled: the agent of node %s received %s from outside (%s)",
                     a->join.host, name, cn.reason);
        else
            snprintf(a->sm.outcome.summary, sizeof(a->sm.outcome.summary),
                     cancel ? "this node left job %s: its agent received %s from outside (%s)"
                            : "the agent%.0s received %s from outside (%s)",
                     a->cfg.run_id, name, signal_meaning(signum));
        a->sm.have_outcome = true;
        a->sm.exit_code = 128 + signum;
        /* Stopped from outside: this node leaves, or the scheduler ends the job (cancelled even
         * when no rdzvd answers: its replicas got the signal too); rdzvd answers (on_event). */
        if (cancel && a->client)
            a->sm.awaiting_verdict = agent_client_send_cancel(a->client, &cn) == 0;
    }
    if (!a->sm.workers_gone && (a->sm.state == AG_RUNNING || a->sm.state == AG_RESTARTING ||
                             a->sm.state == AG_STOPPING || has_survivors(a))) {
        agent_session_set_state(a, AG_STOPPING);
        agent_group_stop(a->group, signum);
    } else {
        agent_finish(a);
    }
}

/* Everything is over: report and stop the loop (main() returns the exit code). */
static void verdict_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    log_warn("rdzvd did not answer this node's leaving within %d ms", AGENT_VERDICT_MS);
    a->sm.awaiting_verdict = false;
    agent_finish(a);
}

static void agent_finish(struct agent_session *a)
{
    if (a->sm.state == AG_DONE)
        return;
    if (a->sm.awaiting_verdict) { /* rdzvd's word on this node's leaving first (on_event) */
        if (!uv_is_active((const uv_handle_t *)&a->verdict))
            (void)uv_timer_start(&a->verdict, verdict_cb, AGENT_VERDICT_MS, 0);
        return;
    }
    (void)uv_timer_stop(&a->verdict);
    agent_session_set_state(a, AG_DONE);
    if (a->sm.exit_code == 0) /* no ROUND: a spare that ran nothing, as rdzvd's summary says */
        log_info(a->sm.round.generation ? "job %s succeeded%.0s" : "job %s: %s", a->cfg.run_id,
                 a->sm.outcome.summary);
    else if (a->sm.put_aside)
        fprintf(stderr, "rdzv-agent: put aside by job %s (exit code %d): %s\n", a->cfg.run_id,
                a->sm.exit_code, a->sm.outcome.summary);
    else if (strcmp(a->sm.outcome.type, "cancelled") == 0)
        fprintf(stderr, "rdzv-agent: job %s cancelled (exit code %d): %s\n", a->cfg.run_id,
                a->sm.exit_code, a->sm.outcome.summary);
    else if (strcmp(a->sm.outcome.type, "left") == 0)
        fprintf(stderr, "rdzv-agent: left job %s, stopped from outside (exit code %d): %s\n",
                a->cfg.run_id, a->sm.exit_code, a->sm.outcome.summary);
    else
        fprintf(stderr, "rdzv-agent: job %s failed (exit code %d): %s\n", a->cfg.run_id,
                a->sm.exit_code,
                a->sm.outcome.summary[0] ? a->sm.outcome.summary : "see the log above");
    /* What failures cost the job, as rdzvd counted it: the last line every agent says. */
    if (a->sm.outcome.cost[0])
        log_info("job %s: %s", a->cfg.run_id, a->sm.outcome.cost);
    uv_stop(a->loop);
}

/* (Re)connect to rdzvd and JOIN; after a loss, say which generation our workers run. */
static int agent_connect(struct agent_session *a)
{
    struct rdzv_resume *rs = &a->join.resume;
    bool running = a->sm.state == AG_RUNNING || a->sm.state == AG_LEFT ||
                   a->sm.state == AG_RESTARTING;
    int r;

    memset(rs, 0, sizeof(*rs));
    /* How long ago this agent started (the client dates it again as the JOIN leaves): rdzvd starts
     * a job that ended before then afresh (a new run of the same line), not refusing it as over. */
    a->join.age_ms = (int64_t)(rdzv_now_ms() - a->started_ms) + 1;
    if (running && a->sm.round.generation) {
        rs->generation = a->sm.round.generation;
        rs->node_rank = a->sm.round.node_rank;
        rs->nnodes = a->sm.round.nnodes;
        rs->rank_offset = a->sm.round.rank_offset;
        rs->world_size = a->sm.round.world_size;
        rs->restart_count = a->sm.round.restart_count;
        rs->master_port = a->sm.round.master_port;
        rs->left = a->sm.state == AG_LEFT;
        rs->incarnation = a->incarnation;
    }
    r = agent_client_start(
        a->loop, &a->eps, a->ep_last, (uint64_t)(a->cfg.connect_timeout_s * 1000), &a->join,
        &(struct agent_client_cbs){.on_round = on_round,
                                   .on_nccl_request = agent_session_on_nccl_request,
                                   .on_event = on_event,
                                   .on_error = on_error,
                                   .on_lost = a->cfg.embedded ? NULL : on_lost,
                                   .on_joined = on_joined,
                                   .on_replica = agent_session_on_replica,
                                   .on_replicas = agent_session_on_replicas,
                                   .on_wait = agent_session_on_wait,
                                   .on_refused = agent_session_on_refused},
        a, &a->client);
    if (r == 0)
        agent_client_set_silence(a->client, (uint64_t)(a->cfg.heartbeat_timeout_s * 1000));
    if (r == 0 && a->cfg.token)
        agent_client_set_token(a->client, a->cfg.token);
    return r;
}

int agent_session_new(const struct agent_session_cfg *cfg, struct agent_session **ret)
{
    struct agent_session *a = calloc(1, sizeof(*a));

    if (!a)
        return -ENOMEM;
    a->sm.failed = calloc((size_t)cfg->nproc, sizeof(*a->sm.failed));
    a->rank_running = calloc((size_t)cfg->nproc, sizeof(*a->rank_running));
    a->spawn = calloc((size_t)cfg->nproc, sizeof(*a->spawn));
    a->sm.late = calloc((size_t)cfg->nproc, sizeof(*a->sm.late));
    a->stacks = calloc((size_t)cfg->nproc, sizeof(*a->stacks));
    a->hangs = calloc((size_t)cfg->nproc, sizeof(*a->hangs));
    if (!a->sm.failed || !a->rank_running || !a->spawn || !a->sm.late || !a->stacks || !a->hangs) {
        agent_session_free(a);
        return -ENOMEM;
    }
    a->cfg = *cfg;
    a->eps = *cfg->eps;
    if (cfg->rehost) {
        a->rehost = *cfg->rehost;
        a->may_rehost = true;
    }
    a->rhost = (struct agent_replica_host){.loop = cfg->loop,
                                           .self_exe = cfg->self_exe,
                                           .token_file = cfg->token_file,
                                           .replica_key_file = cfg->replica_key_file,
                                           .log_dir = cfg->log_dir,
                                           .level = cfg->level,
                                           .send = agent_session_replica_send,
                                           .ud = a};
    a->loop = cfg->loop;
    a->sm.run_id = cfg->run_id;
    a->sm.nproc = cfg->nproc;
    a->sm.inplace = cfg->inplace;
    a->started_ms = rdzv_now_ms();
    *ret = a;
    return 0;
}

/* The check before the JOIN: a node that fails it never joins. */
static void start_checked_cb(void *ud, bool healthy, const char *reason)
{
    struct agent_session *a = ud;
    int r;

    if (!healthy) {
        log_error("this node failed its health check: %s; it does not join job %s", reason,
                  a->cfg.run_id);
        snprintf(a->sm.outcome.type, sizeof(a->sm.outcome.type), "put_aside");
        snprintf(a->sm.outcome.summary, sizeof(a->sm.outcome.summary),
                 "this node failed its health check before joining: %s", reason);
        a->sm.have_outcome = a->sm.put_aside = a->unhealthy = true;
        a->sm.exit_code = RDZV_EXIT_PUT_ASIDE;
        agent_finish(a);
        return;
    }
    if (a->cfg.health_interval_s > 0)
        (void)uv_timer_start(&a->health_timer, health_timer_cb,
                             (uint64_t)(a->cfg.health_interval_s * 1000),
                             (uint64_t)(a->cfg.health_interval_s * 1000));
    if (a->sm.state == AG_DONE)
        return; /* a signal ended it meanwhile */
    r = agent_connect(a);
    if (r < 0) {
        log_error_errno(r, "cannot start the connection to rdzvd");
        a->sm.exit_code = 1;
        agent_finish(a);
    }
}

int agent_session_start(struct agent_session *a, struct agent_group *g,
                        const struct rdzv_join *join)
{
    int r;

    a->group = g;
    a->join = *join;
    a->heartbeat.data = a->leaderless.data = a->health_timer.data = a->verdict.data = a;
    a->hold_timer.data = a->grace_timer.data = a;
    r = uv_timer_init(a->loop, &a->leaderless);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->hold_timer);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->grace_timer);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->verdict);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->heartbeat);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->health_timer);
    if (r == 0)
        r = uv_timer_start(&a->heartbeat, heartbeat_cb, (uint64_t)(a->cfg.heartbeat_s * 1000),
                           (uint64_t)(a->cfg.heartbeat_s * 1000));
    if (r < 0)
        return r;
    a->cfg.health.loop = a->loop;
    r = agent_health_new(&a->cfg.health, &a->health);
    a->sm.has_health = a->health != NULL;
    if (r == 0)
        r = agent_health_run(a->health, start_checked_cb, a);
    if (r == 0)
        return 0; /* start_checked_cb connects */
    log_warn_errno(r, "health: the node cannot be checked; joining all the same");
    return agent_connect(a);
}

int agent_session_exit_code(const struct agent_session *a)
{
    return a->sm.exit_code;
}

bool agent_session_put_aside(const struct agent_session *a)
{
    return a->sm.put_aside;
}

const char *agent_session_outcome(const struct agent_session *a)
{
    return a->sm.have_outcome ? a->sm.outcome.summary : "";
}

void agent_session_stop(struct agent_session *a)
{
    agent_health_free(a->health);
    a->health = NULL;
    agent_store_stop(a->store);
    agent_session_front_close(a);
    agent_nccl_root_stop(a->nccl, true);
    a->nccl = NULL;
    if (a->client)
        agent_client_close(a->client, NULL, NULL);
    a->client = NULL;
    /* Stop watching the replica hosted here (it goes on), while the loop still runs. */
    agent_replica_free(a->rhost.replica);
    a->rhost.replica = NULL;
}

struct agent_session *agent_session_free(struct agent_session *a)
{
    if (!a)
        return NULL;
    for (int64_t i = 0; a->stacks && i < a->cfg.nproc; i++)
        if (a->stacks[i]) {
            agent_stacks_cancel(a->stacks[i]);
            a->stacks[i] = NULL;
        }
    free(a->stacks);
    free(a->hangs);
    free(a->sm.failed);
    free(a->rank_running);
    free(a->spawn);
    free(a->sm.late);
    agent_store_free(a->store);
    agent_replica_free(a->rhost.replica);
    free(a);
    return NULL;
}
