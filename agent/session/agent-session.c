/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session.c: the agent's rendezvous session: ROUND -> workers, NCCL ids, heartbeats,
 * WORKER_EXIT, EVENT restart -> READY, LEAVE, the outcome, reconnecting after a lost daemon. */
#include "agent/session/agent-session.h"

#include <assert.h>
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

static const char *const state_names[] = {
    [AG_JOINING] = "JOINING", [AG_RUNNING] = "RUNNING",   [AG_LEFT] = "LEFT",
    [AG_RESTARTING] = "RESTARTING", [AG_STOPPING] = "STOPPING", [AG_DONE] = "DONE",
};

/* The one place the session's state changes. */
static void session_set_state(struct agent_session *a, enum agent_state st)
{
    assert((unsigned)st < _AG_STATE_MAX);
    if (a->state != st)
        log_debug("session: %s -> %s", state_names[a->state], state_names[st]);
    if (st != AG_RUNNING && a->held.on) { /* the generation it died in is over anyway */
        (void)uv_timer_stop(&a->hold_timer);
        a->held.on = false;
    }
    if (st != AG_RUNNING)
        (void)agent_session_grace_end(a); /* a start-up grace holds a RUNNING generation only */
    a->state = st;
}

static void agent_finish(struct agent_session *a);
static int agent_connect(struct agent_session *a);
static void heartbeat_cb(uv_timer_t *t);
static void on_lost(struct agent_client *c, const char *msg, void *ud);
static void health_cb(void *ud, bool healthy, const char *reason);

/* --recovery inplace: READY went out while workers of the last generation keep running (without
 * it, JOINING means every worker has exited). */
static bool has_survivors(const struct agent_session *a)
{
    return a->state == AG_JOINING && a->group && agent_group_running(a->group) > 0;
}

static void send_ready(struct agent_session *a, uint64_t gen)
{
    unsigned n = a->cfg.inplace ? agent_group_running(a->group) : 0;

    /* Our own workers failed: the node is checked before it offers itself again. */
    if (a->health && a->local_failure && a->health_ready_gen != gen) {
        int r;

        a->health_ready_gen = gen;
        a->ready_waiting = gen;
        r = agent_health_run(a->health, health_cb, a);
        if (r == 0 || r == -EBUSY)
            return; /* health_cb sends it */
        a->ready_waiting = 0;
        log_warn_errno(r, "health: the node cannot be checked; ready all the same");
    }
    if (n)
        log_info("%u worker%s of generation %" PRIu64 " keep%s running (--recovery inplace); "
                 "ready for the next round", n, rdzv_plural(n), gen, n == 1 ? "s" : "");
    else
        log_info("workers of generation %" PRIu64 " stopped; ready for the next round", gen);
    session_set_state(a, AG_JOINING);
    a->restart_pending = false;
    (void)agent_client_send_ready(a->client, &(struct rdzv_ready){.generation = gen});
}

/* --recovery inplace, and this generation's workers here stay to re-form in it. */
static bool in_place(const struct agent_session *a)
{
    return a->cfg.inplace && !a->dropped && !a->plain;
}

/* A failure (here or elsewhere) in a running generation: whether the workers here keep running
 * to re-form in place. Not before one of them said it follows the control channel: told a new
 * generation, a plain DDP script's survivor would not re-form (it blocks or dies on its lost
 * peer, and the next generation would mix it with new workers), so the generation restarts here
 * as under --recovery restart; said once. */
static bool keep_in_place(struct agent_session *a)
{
    if (!in_place(a))
        return false;
    if (a->follows || agent_group_following(a->group) > 0) {
        a->follows = true;
        return true;
    }
    a->plain = true;
    if (!a->plain_said)
        log_warn("--recovery inplace: no worker here has said it follows rdzv's control channel "
                 "(a script does once it makes rdzv.torch's Job; rdzv-train does at start), so "
                 "this failure restarts the whole generation here, as --recovery restart does");
    a->plain_said = true;
    return false;
}

void agent_session_fail_local(struct agent_session *a, unsigned local_rank)
{
    bool keep = keep_in_place(a), held = agent_session_grace_end(a);

    session_set_state(a, AG_RESTARTING);
    a->stopping_gen = a->round.generation;
    a->restart_pending = held; /* held by a start-up grace: its EVENT restart came already */
    if (keep)
        a->failed[local_rank] = true;
    else
        agent_group_stop(a->group, SIGTERM);
}

static void ready_in_place(struct agent_session *a)
{
    if (a->state != AG_RESTARTING || !a->restart_pending || !in_place(a))
        return;
    for (unsigned i = 0; i < (unsigned)a->cfg.nproc; i++)
        if (a->failed[i] && agent_group_rank_running(a->group, i))
            return;
    send_ready(a, a->stopping_gen);
}

/* The signals a scheduler or a terminal sends to every process of a job step (held above). */
static bool step_signal(int sig)
{
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/* A worker of this node failed (exited non-zero, or was killed): report it and stop the others,
 * unless the node is not running a generation any more. */
static void worker_failed(struct agent_session *a, unsigned local_rank, int64_t status, int sig)
{
    int64_t rank = a->round.rank_offset + local_rank;

    if (a->state != AG_RUNNING) {
        /* A consequence, not a cause: stopping anyway, or (in place) a failed rank is gone or
         * a survivor died between generations: the next ROUND starts it again. */
        if (a->cfg.inplace)
            ready_in_place(a);
        return;
    }
    a->local_failure = true;
    /* Report first, then stop the rest of our workers at once (fail fast); the daemon answers
     * with a restart or the job's end. In place, only this one is gone. The workers' last
     * steps go just before: the steps a restart from a checkpoint will do again are counted
     * from them (what failures cost the job). */
    heartbeat_cb(&a->heartbeat);
    agent_session_report_failure(a, rank, local_rank, sig ? 128 + sig : status, sig, NULL);
    agent_session_fail_local(a, local_rank);
    if (in_place(a))
        log_info("the other workers keep running (--recovery inplace)");
}

static void hold_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    if (!a->held.on)
        return;
    a->held.on = false;
    log_info("the signal that killed worker local rank %u did not reach this agent within %d "
             "ms: reporting its failure", a->held.local_rank, AGENT_SIGNAL_HOLD_MS);
    worker_failed(a, a->held.local_rank, a->held.status, a->held.sig);
}

void agent_session_group_exit(struct agent_group *g, unsigned local_rank, int64_t status, int sig,
                              void *ud)
{
    struct agent_session *a = ud;

    (void)g;
    if (a->cfg.inplace && a->state == AG_RUNNING && a->late[local_rank] &&
        agent_session_replace_late(a, local_rank) == 0)
        return;
    if (status == 0 && sig == 0)
        return; /* the group logged the exit, once */
    if (a->state == AG_RUNNING && a->held.on)
        return; /* the same signal as the held one's, most likely: reported with it */
    if (a->state == AG_RUNNING && !a->have_outcome &&
        (step_signal(sig) || (sig == 0 && status > 128 && step_signal((int)(status - 128)))) &&
        uv_timer_start(&a->hold_timer, hold_cb, AGENT_SIGNAL_HOLD_MS, 0) == 0) {
        a->held.on = true;
        a->held.local_rank = local_rank;
        a->held.status = status;
        a->held.sig = sig;
        return;
    }
    worker_failed(a, local_rank, status, sig);
}

void agent_session_group_all_exited(struct agent_group *g, void *ud)
{
    struct agent_session *a = ud;

    (void)g;
    a->workers_gone = true;
    if (a->have_outcome) {
        agent_finish(a);
        return;
    }
    if (a->state == AG_RUNNING && !a->local_failure && !a->held.on && !a->grace_on) {
        /* All ours exited 0: wait for the job's outcome (no long exit barrier: a failure
         * elsewhere arrives as an EVENT at once). */
        log_info("%s %" PRId64 " local worker%s exited 0%s", a->cfg.nproc == 1 ? "the" : "all",
                 a->cfg.nproc, rdzv_plural((uint64_t)a->cfg.nproc),
                 a->round.nnodes > 1 ? "; waiting for the other nodes" : "");
        (void)agent_client_send_leave(
            a->client, &(struct rdzv_leave){.generation = a->round.generation, .succeeded = true});
        session_set_state(a, AG_LEFT);
    } else if ((a->state == AG_RESTARTING || (a->state == AG_RUNNING && a->grace_on)) &&
               a->restart_pending) {
        send_ready(a, a->stopping_gen); /* held by a start-up grace: all gone, the same */
    }
}

static void on_round(struct agent_client *c, const struct rdzv_round *r, void *ud)
{
    struct agent_session *a = ud;
    struct agent_assignment as;
    bool keep;
    int e;

    a->join.ran_incarnation = agent_client_incarnation(c); /* its rdzvd ran ours (1.20) */
    if (a->state != AG_JOINING) {
        log_warn("ROUND for generation %" PRIu64 " while workers still run: ignored",
                 r->generation);
        return;
    }
    a->round = *r;
    agent_store_round(a->store, r->generation);
    agent_session_round_assignment(a, &as);
    keep = has_survivors(a);
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
    agent_session_front_round(a, &as);
    session_set_state(a, AG_RUNNING);
    a->workers_gone = false;
    a->local_failure = false;
    a->dropped = a->plain = false;
    memset(a->late, 0, (size_t)a->cfg.nproc * sizeof(*a->late));
    /* Tell the daemon that this node took its round before any worker starts: a node lost from
     * here on ran in the generation, and its loss is the job's failure, not its host's. Sent
     * after the start, a worker could be seen running before the daemon heard of it. */
    (void)agent_client_send_round_ack(a->client, r->generation);
    if (keep)
        e = agent_session_round_in_place(a, &as);
    else if (a->cfg.inplace)
        /* READY went out once the failed ranks exited, not once the group drained: what they
         * left (a descendant holding their output) may still be open. A partial start of every
         * rank kills it and spawns each worker once its old handles are closed. */
        e = agent_group_start_ranks(a->group, &as, NULL);
    else
        e = agent_group_start(a->group, &as);
    memset(a->failed, 0, (size_t)a->cfg.nproc * sizeof(*a->failed));
    if (e < 0) {
        log_error_errno(e, "cannot start the workers");
        a->local_failure = true;
        session_set_state(a, AG_RESTARTING);
        a->stopping_gen = r->generation;
        agent_session_report_failure(a, r->rank_offset, 0, 127, 0, NULL);
    }
    /* Tell the daemon at once that we are alive and past the start (ends its start grace). */
    (void)agent_client_send_heartbeat(a->client,
                                      &(struct rdzv_heartbeat){.generation = r->generation});
}

/* A start-up grace ran out (agent-session-grace.c): the workers still starting are stopped. */
static void grace_over(struct agent_session *a)
{
    session_set_state(a, AG_RESTARTING);
    agent_group_stop(a->group, SIGTERM);
}

/* The daemon says: stop the workers of generation e->generation, a new round follows. */
static void on_restart(struct agent_session *a, const struct rdzv_event *e)
{
    switch (a->state) {
    case AG_RUNNING:
        if (a->round.generation != e->generation)
            break;
        heartbeat_cb(&a->heartbeat); /* the workers' last steps, as in worker_failed */
        if (keep_in_place(a)) {
            log_warn("re-forming in place: %s", e->summary);
            send_ready(a, e->generation);
            return;
        }
        if (agent_session_grace_begin(a, e, grace_over))
            return;
        log_warn("restarting: %s", e->summary);
        session_set_state(a, AG_RESTARTING);
        a->stopping_gen = e->generation;
        a->restart_pending = true;
        agent_group_stop(a->group, SIGTERM);
        return;
    case AG_RESTARTING:
        if (a->stopping_gen != e->generation)
            break;
        /* Said here too when the root cause is ours: every agent of the job says the same. */
        log_warn("%s: %s", in_place(a) ? "re-forming in place" : "restarting", e->summary);
        a->restart_pending = true;
        if ((a->dropped || a->plain) && !a->workers_gone)
            agent_group_stop(a->group, SIGTERM); /* in place: the survivors go too */
        if (in_place(a))
            ready_in_place(a);
        else if (a->workers_gone)
            send_ready(a, e->generation);
        return;
    case AG_LEFT:
        if (a->round.generation != e->generation)
            break;
        log_warn("restarting (our workers had finished): %s", e->summary);
        send_ready(a, e->generation);
        return;
    case AG_JOINING:
        send_ready(a, e->generation); /* nothing runs here */
        return;
    default:
        return;
    }
    log_debug("restart of generation %" PRIu64 " ignored (state %d)", e->generation, a->state);
}

static void on_event(struct agent_client *c, const struct rdzv_event *e, void *ud)
{
    struct agent_session *a = ud;
    bool verdict;

    (void)c;
    if (strcmp(e->type, "restart") == 0) {
        on_restart(a, e);
        return;
    }
    verdict = a->awaiting_verdict;
    a->awaiting_verdict = false;
    (void)uv_timer_stop(&a->verdict);
    a->outcome = *e;
    a->have_outcome = true;
    a->put_aside = strcmp(e->type, "put_aside") == 0;
    if (strcmp(e->type, "succeeded") == 0) {
        a->exit_code = 0;
    } else if (a->put_aside) {
        a->exit_code = RDZV_EXIT_PUT_ASIDE; /* whatever the event says: the man page's status */
        log_error("this node is put aside by job %s: %s", a->cfg.run_id, e->summary);
    } else if (strcmp(e->type, "cancelled") == 0 || strcmp(e->type, "left") == 0) {
        /* left (1.7): this agent was signalled and the job goes on without its node */
        a->exit_code = e->exit_code > 128 && e->exit_code < 256 ? (int)e->exit_code : 143;
    } else {
        a->exit_code = e->exit_code ? (int)e->exit_code : 1;
    }
    if (!a->workers_gone &&
        (has_survivors(a) ||
         (a->exit_code != 0 && (a->state == AG_RUNNING || a->state == AG_RESTARTING)))) {
        if (a->put_aside)
            log_warn("stopping local workers: this node takes no further part in the job");
        else if (strcmp(e->type, "cancelled") == 0)
            log_warn("job cancelled: stopping local workers (%s)", e->summary);
        else if (strcmp(e->type, "left") == 0)
            log_warn("stopping local workers: %s", e->summary);
        else if (a->state == AG_RUNNING || has_survivors(a))
            log_warn("job failed on another node; stopping local workers");
        session_set_state(a, AG_STOPPING);
        agent_group_stop(a->group, SIGTERM);
        return;
    }
    if (a->workers_gone || a->state == AG_JOINING || (verdict && a->state != AG_STOPPING))
        agent_finish(a);
}

/* A check failed while this node takes part: rdzvd is told (UNHEALTHY), puts the node aside and
 * answers EVENT put_aside (on_event stops the workers, exit 69); without a connection, here. */
static void report_unhealthy(struct agent_session *a, const char *reason)
{
    struct rdzv_unhealthy u;

    if (a->unhealthy || a->have_outcome)
        return;
    a->unhealthy = true;
    log_error("this node failed its health check: %s", reason);
    snprintf(u.reason, sizeof(u.reason), "%s", reason);
    rdzv_utf8_trim(u.reason);
    if (a->client && agent_client_send_unhealthy(a->client, &u) == 0)
        return;
    snprintf(a->outcome.type, sizeof(a->outcome.type), "put_aside");
    snprintf(a->outcome.summary, sizeof(a->outcome.summary),
             "this node failed its health check: %s", reason);
    a->have_outcome = a->put_aside = true;
    a->exit_code = RDZV_EXIT_PUT_ASIDE;
    if (!a->workers_gone && a->group && agent_group_running(a->group) > 0) {
        session_set_state(a, AG_STOPPING);
        agent_group_stop(a->group, SIGTERM);
    } else {
        agent_finish(a);
    }
}

static void health_cb(void *ud, bool healthy, const char *reason)
{
    struct agent_session *a = ud;
    uint64_t gen = a->ready_waiting;

    a->ready_waiting = 0;
    if (!healthy) {
        report_unhealthy(a, reason);
        return;
    }
    if (gen && a->state == AG_RESTARTING && !a->have_outcome)
        send_ready(a, gen);
}

static void health_timer_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    if (a->unhealthy || a->have_outcome || !a->client)
        return;
    if (a->state != AG_RUNNING && a->state != AG_LEFT && a->state != AG_JOINING)
        return;
    (void)agent_health_run(a->health, health_cb, a); /* -EBUSY: the one running will say */
}

/* Fatal: the daemon refused us, or could not be reached (again) in time. */
static void on_error(struct agent_client *c, const char *msg, void *ud)
{
    struct agent_session *a = ud;

    if (c && agent_identity_renew(&a->join, a->state == AG_JOINING && !has_survivors(a), msg)) {
        on_lost(c, msg, a); /* its JOINED was lost: join again as a new node id */
        return;
    }
    log_error("%s", msg);
    if (a->have_outcome)
        return;
    snprintf(a->outcome.type, sizeof(a->outcome.type), "failed");
    snprintf(a->outcome.summary, sizeof(a->outcome.summary), "%s", msg);
    a->have_outcome = true;
    if (a->exit_code == 0) /* no rdzvd answered: its own status (the man page's) */
        a->exit_code = c && agent_client_unanswered(c) ? AGENT_EXIT_NO_RDZVD : 1;
    if (!a->workers_gone && a->state != AG_DONE && (a->state != AG_JOINING || has_survivors(a))) {
        session_set_state(a, AG_STOPPING);
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
        log_info("reconnected to rdzvd: generation %" PRIu64 " goes on", a->round.generation);
    else if (spare)
        log_info("the job runs without this node for now: waiting as a spare");
    /* Our generation is over without us: the EVENT restart that follows stops every worker. */
    if (spare && !resumed && a->group && agent_group_running(a->group) > 0 &&
        (a->state == AG_RUNNING || a->state == AG_RESTARTING))
        a->dropped = true;
    /* An unsent WORKER_EXIT goes now, and again one that a deposed leader took (resumed, no
     * EVENT restart: it was lost); rdzvd ignores a repeat (its generation stopping or over). */
    if (a->pending_exit || (resumed && a->local_failure && a->state == AG_RESTARTING &&
                            !a->restart_pending && a->pexit.generation == a->stopping_gen))
        a->pending_exit = agent_client_send_worker_exit(a->client, &a->pexit) < 0;
    if (spare && !resumed) /* at once: --scale-up now takes a joiner in at its first HEARTBEAT */
        heartbeat_cb(&a->heartbeat);
    agent_replica_joined(&a->rhost);
    /* Our workers all exited 0 while we were reconnecting: the LEAVE then went nowhere, and the
     * resume (made when the connection was lost) does not say it. (A duplicate is harmless.) */
    if (resumed && a->state == AG_LEFT)
        (void)agent_client_send_leave(
            a->client, &(struct rdzv_leave){.generation = a->round.generation, .succeeded = true});
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
    if (a->state == AG_RUNNING) {
        bool held = agent_session_grace_end(a); /* its EVENT restart came already */

        a->local_failure = true;
        agent_session_report_failure(a, a->round.rank_offset, 0, 128 + SIGTERM, SIGTERM, reason);
        session_set_state(a, AG_RESTARTING);
        a->stopping_gen = a->round.generation;
        a->restart_pending = held;
    }
    agent_group_stop(a->group, SIGTERM);
}

/* The connection to rdzvd broke: keep the workers, reconnect and re-register. */
static void on_lost(struct agent_client *c, const char *msg, void *ud)
{
    struct agent_session *a = ud;
    int r;

    if (a->have_outcome) { /* leaving anyway (signalled, put aside, the job over): stay gone */
        a->awaiting_verdict = false;
        agent_client_close(c, NULL, NULL);
        a->client = NULL;
        if (a->workers_gone || a->state != AG_STOPPING)
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
    if (a->state != AG_RUNNING || !a->client)
        return;
    if (a->first_step_gen != a->round.generation) {
        a->first_step_gen = a->round.generation;
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

    if (!a->client || a->state == AG_DONE)
        return;
    /* The workers' progress, while they run this generation (rdzvctl status shows it). */
    agent_heartbeat_fill(&hb, a->round.generation, a->state == AG_RUNNING ? a->group : NULL,
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
    if (a->held.on) { /* the worker died of this signal: the agent reports it, not the worker */
        (void)uv_timer_stop(&a->hold_timer);
        a->held.on = false;
        log_info("worker local rank %u was killed by the same signal", a->held.local_rank);
    }
    if (!a->have_outcome) {
        bool cancel = signum == SIGTERM || signum == SIGINT;
        struct rdzv_cancel cn = {.signal = signum};
        bool ended = cancel && agent_sched_cancel(&cn); /* the scheduler ends the job: R15a */

        snprintf(a->outcome.type, sizeof(a->outcome.type),
                 ended ? "cancelled" : cancel ? "left" : "failed");
        if (ended)
            snprintf(a->outcome.summary, sizeof(a->outcome.summary),
                     "cancelled: the agent of node %s received %s from outside (%s)",
                     a->join.host, name, cn.reason);
        else
            snprintf(a->outcome.summary, sizeof(a->outcome.summary),
                     cancel ? "this node left job %s: its agent received %s from outside (%s)"
                            : "the agent%.0s received %s from outside (%s)",
                     a->cfg.run_id, name, signal_meaning(signum));
        a->have_outcome = true;
        a->exit_code = 128 + signum;
        /* Stopped from outside: this node leaves, or the scheduler ends the job (cancelled even
         * when no rdzvd answers: its replicas got the signal too); rdzvd answers (on_event). */
        if (cancel && a->client)
            a->awaiting_verdict = agent_client_send_cancel(a->client, &cn) == 0;
    }
    if (!a->workers_gone && (a->state == AG_RUNNING || a->state == AG_RESTARTING ||
                             a->state == AG_STOPPING || has_survivors(a))) {
        session_set_state(a, AG_STOPPING);
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
    a->awaiting_verdict = false;
    agent_finish(a);
}

static void agent_finish(struct agent_session *a)
{
    if (a->state == AG_DONE)
        return;
    if (a->awaiting_verdict) { /* rdzvd's word on this node's leaving first (on_event) */
        if (!uv_is_active((const uv_handle_t *)&a->verdict))
            (void)uv_timer_start(&a->verdict, verdict_cb, AGENT_VERDICT_MS, 0);
        return;
    }
    (void)uv_timer_stop(&a->verdict);
    session_set_state(a, AG_DONE);
    if (a->exit_code == 0) /* no ROUND: a spare that ran nothing, as rdzvd's summary says */
        log_info(a->round.generation ? "job %s succeeded%.0s" : "job %s: %s", a->cfg.run_id,
                 a->outcome.summary);
    else if (a->put_aside)
        fprintf(stderr, "rdzv-agent: put aside by job %s (exit code %d): %s\n", a->cfg.run_id,
                a->exit_code, a->outcome.summary);
    else if (strcmp(a->outcome.type, "cancelled") == 0)
        fprintf(stderr, "rdzv-agent: job %s cancelled (exit code %d): %s\n", a->cfg.run_id,
                a->exit_code, a->outcome.summary);
    else if (strcmp(a->outcome.type, "left") == 0)
        fprintf(stderr, "rdzv-agent: left job %s, stopped from outside (exit code %d): %s\n",
                a->cfg.run_id, a->exit_code, a->outcome.summary);
    else
        fprintf(stderr, "rdzv-agent: job %s failed (exit code %d): %s\n", a->cfg.run_id,
                a->exit_code, a->outcome.summary[0] ? a->outcome.summary : "see the log above");
    /* What failures cost the job, as rdzvd counted it: the last line every agent says. */
    if (a->outcome.cost[0])
        log_info("job %s: %s", a->cfg.run_id, a->outcome.cost);
    uv_stop(a->loop);
}

/* (Re)connect to rdzvd and JOIN; after a loss, say which generation our workers run. */
static int agent_connect(struct agent_session *a)
{
    struct rdzv_resume *rs = &a->join.resume;
    bool running = a->state == AG_RUNNING || a->state == AG_LEFT || a->state == AG_RESTARTING;
    int r;

    memset(rs, 0, sizeof(*rs));
    /* How long ago this agent started (the client dates it again as the JOIN leaves): rdzvd starts
     * a job that ended before then afresh (a new run of the same line), not refusing it as over. */
    a->join.age_ms = (int64_t)(rdzv_now_ms() - a->started_ms) + 1;
    if (running && a->round.generation) {
        rs->generation = a->round.generation;
        rs->node_rank = a->round.node_rank;
        rs->nnodes = a->round.nnodes;
        rs->rank_offset = a->round.rank_offset;
        rs->world_size = a->round.world_size;
        rs->restart_count = a->round.restart_count;
        rs->master_port = a->round.master_port;
        rs->left = a->state == AG_LEFT;
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
    a->failed = calloc((size_t)cfg->nproc, sizeof(*a->failed));
    a->spawn = calloc((size_t)cfg->nproc, sizeof(*a->spawn));
    a->late = calloc((size_t)cfg->nproc, sizeof(*a->late));
    a->stacks = calloc((size_t)cfg->nproc, sizeof(*a->stacks));
    a->hangs = calloc((size_t)cfg->nproc, sizeof(*a->hangs));
    if (!a->failed || !a->spawn || !a->late || !a->stacks || !a->hangs) {
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
        snprintf(a->outcome.type, sizeof(a->outcome.type), "put_aside");
        snprintf(a->outcome.summary, sizeof(a->outcome.summary),
                 "this node failed its health check before joining: %s", reason);
        a->have_outcome = a->put_aside = a->unhealthy = true;
        a->exit_code = RDZV_EXIT_PUT_ASIDE;
        agent_finish(a);
        return;
    }
    if (a->cfg.health_interval_s > 0)
        (void)uv_timer_start(&a->health_timer, health_timer_cb,
                             (uint64_t)(a->cfg.health_interval_s * 1000),
                             (uint64_t)(a->cfg.health_interval_s * 1000));
    if (a->state == AG_DONE)
        return; /* a signal ended it meanwhile */
    r = agent_connect(a);
    if (r < 0) {
        log_error_errno(r, "cannot start the connection to rdzvd");
        a->exit_code = 1;
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
    a->hold_timer.data = a;
    r = uv_timer_init(a->loop, &a->leaderless);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->hold_timer);
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
    if (r == 0)
        r = agent_health_run(a->health, start_checked_cb, a);
    if (r == 0)
        return 0; /* start_checked_cb connects */
    log_warn_errno(r, "health: the node cannot be checked; joining all the same");
    return agent_connect(a);
}

int agent_session_exit_code(const struct agent_session *a)
{
    return a->exit_code;
}

bool agent_session_put_aside(const struct agent_session *a)
{
    return a->put_aside;
}

const char *agent_session_outcome(const struct agent_session *a)
{
    return a->have_outcome ? a->outcome.summary : "";
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
    free(a->failed);
    free(a->spawn);
    free(a->late);
    agent_store_free(a->store);
    agent_replica_free(a->rhost.replica);
    free(a);
    return NULL;
}
