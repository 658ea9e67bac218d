/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session.c: the agent's rendezvous session, the adapter of its step machine
 * (agent-session-sm.h): the client's, the group's and the timers' callbacks become inputs, and
 * each step's Ready is carried out here (messages, workers, timers, lines to log, the end). It
 * decides nothing of the session itself (docs/design/agent-policy.md); NCCL ids, heartbeats,
 * reconnecting. */
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

static int agent_connect(struct agent_session *a);
static void heartbeat_cb(uv_timer_t *t);
static void beat(struct agent_session *a, uint64_t gen, struct agent_group *g);
static void on_lost(struct agent_client *c, const char *msg, void *ud);
static void health_cb(void *ud, bool healthy, const char *reason);
static void say_end(struct agent_session *a);
static void send_unhealthy(struct agent_session *a, const char *reason);
static void join_first(struct agent_session *a);
static void renew(struct agent_session *a, const char *msg, int64_t status);

/* What the machine must know of the workers now. */
static void fill_facts(struct agent_session *a, struct agent_facts *f)
{
    *f = (struct agent_facts){.connected = a->client != NULL,
                              .endpoints = a->eps.n,
                              .pending_exit = a->pending_exit,
                              .exit_gen = a->pexit.generation};
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

static void verdict_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_TIMER,
                                                      .timer = AGENT_TIMER_VERDICT});
}

static void leaderless_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_TIMER,
                                                      .timer = AGENT_TIMER_LEADERLESS});
}

static void own_end_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_TIMER,
                                                      .timer = AGENT_TIMER_OWN_END});
}

/* A machine's timer armed at due_ms (uv_now's clock), or stopped (due_ms < 0). */
static void arm_timer(struct agent_session *a, enum agent_timer t, int64_t due_ms)
{
    static const uv_timer_cb cbs[AGENT_TIMERS] = {
        [AGENT_TIMER_HOLD] = hold_cb, [AGENT_TIMER_GRACE] = grace_cb,
        [AGENT_TIMER_VERDICT] = verdict_cb, [AGENT_TIMER_LEADERLESS] = leaderless_cb,
        [AGENT_TIMER_OWN_END] = own_end_cb};
    uv_timer_t *h = t == AGENT_TIMER_HOLD         ? &a->hold_timer
                    : t == AGENT_TIMER_GRACE      ? &a->grace_timer
                    : t == AGENT_TIMER_VERDICT    ? &a->verdict
                    : t == AGENT_TIMER_LEADERLESS ? &a->leaderless
                                                  : &a->own_end;
    int64_t now = (int64_t)uv_now(a->loop);

    if (due_ms < 0) {
        (void)uv_timer_stop(h);
        return;
    }
    (void)uv_timer_start(h, cbs[t], (uint64_t)(due_ms > now ? due_ms - now : 0), 0);
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
            : mode == AGENT_START_RANKS  ? agent_session_start_ranks(a, &a->as)
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
        if (fx->gen)
            beat(a, fx->gen, a->group);
        else
            heartbeat_cb(&a->heartbeat);
        return;
    case AGENT_DO_BARE_BEAT:
        (void)agent_client_send_heartbeat(a->client,
                                          &(struct rdzv_heartbeat){.generation = fx->gen});
        return;
    case AGENT_DO_WORKER_EXIT:
        agent_session_report_failure(a, a->sm.round.rank_offset + fx->local_rank, fx->local_rank,
                                     fx->code, fx->sig, fx->text);
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
    case AGENT_DO_FINISH:
        say_end(a);
        return;
    case AGENT_DO_SIGNAL:
        if (a->group)
            agent_group_signal(a->group, fx->sig);
        return;
    case AGENT_DO_ASK_SCHEDULER: {
        bool ended;

        a->cancel = (struct rdzv_cancel){.signal = fx->sig};
        ended = agent_sched_cancel(&a->cancel);
        agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_SCHEDULER, .ended = ended,
                                                    .text = a->cancel.reason});
        return;
    }
    case AGENT_DO_CANCEL:
        agent_session_feed(a, &(struct agent_input){
                                  .kind = AGENT_IN_CANCEL_SENT,
                                  .ok = agent_client_send_cancel(a->client, &a->cancel) == 0});
        return;
    case AGENT_DO_UNHEALTHY:
        send_unhealthy(a, fx->text);
        return;
    case AGENT_DO_NEXT_ENDPOINT:
        a->ep_last = (a->ep_last + 1) % a->eps.n;
        return;
    case AGENT_DO_JOIN:
        join_first(a);
        return;
    case AGENT_DO_KILL:
        agent_group_signal_rank(a->group, fx->local_rank, SIGKILL);
        return;
    case AGENT_DO_CONNECT:
        if (agent_connect(a) < 0)
            agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_ERROR,
                                                        .text = "cannot reconnect to rdzvd",
                                                        .status = 1});
        return;
    case AGENT_DO_RESEND_EXIT:
        a->pending_exit = agent_client_send_worker_exit(a->client, &a->pexit) < 0;
        return;
    case AGENT_DO_REPLICA_JOINED:
        agent_replica_joined(&a->rhost);
        return;
    case AGENT_DO_CHECK:
        (void)agent_health_run(a->health, health_cb, a); /* -EBUSY: the one running will say */
        return;
    case AGENT_DO_STACKS: /* agent_session_group_hang asks for them once the step is over */
        a->hangs[fx->local_rank].asked = true;
        a->hangs[fx->local_rank].gen = fx->gen;
        return;
    case AGENT_DO_RENEW:
        renew(a, fx->text, fx->code);
        return;
    }
}

void agent_session_apply(struct agent_session *a, const struct agent_ready *r)
{
    for (unsigned i = 0; i < r->nlog; i++) /* what the step decided is said first */
        rdzv_log(r->log[i].level, "%s", r->log[i].text);
    if (r->lost)
        log_warn("session: %u more lines to log in one step were lost", r->lost);
    for (unsigned i = 0; i < r->n; i++)
        apply_one(a, &r->fx[i]);
}

void agent_session_group_exit(struct agent_group *g, unsigned local_rank, int64_t status, int sig,
                              void *ud)
{
    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_WORKER_EXIT,
                                                 .local_rank = local_rank, .status = status,
                                                 .sig = sig,
                                                 .output_open = agent_group_output_open(g,
                                                                                local_rank)});
}

void agent_session_group_output_closed(struct agent_group *g, unsigned local_rank,
                                       int64_t status, int sig, void *ud)
{
    (void)g;
    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_OUTPUT_CLOSED,
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

/* UNHEALTHY: rdzvd puts the node aside and answers EVENT put_aside; not sent, the machine puts
 * it aside here. */
static void send_unhealthy(struct agent_session *a, const char *reason)
{
    struct rdzv_unhealthy u;

    snprintf(u.reason, sizeof(u.reason), "%s", reason);
    rdzv_utf8_trim(u.reason);
    if (a->client && agent_client_send_unhealthy(a->client, &u) == 0)
        return;
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_UNHEALTHY_UNSENT});
}

static void health_cb(void *ud, bool healthy, const char *reason)
{
    agent_session_feed(ud, &(struct agent_input){.kind = healthy ? AGENT_IN_HEALTH_OK
                                                                 : AGENT_IN_UNHEALTHY,
                                                 .text = reason});
}

static void health_timer_cb(uv_timer_t *t)
{
    agent_session_feed(t->data, &(struct agent_input){.kind = AGENT_IN_HEALTH_DUE});
}

/* Fatal: the daemon refused us, or could not be reached (again) in time. */
static void on_error(struct agent_client *c, const char *msg, void *ud)
{
    int64_t status = c && agent_client_unanswered(c) ? AGENT_EXIT_NO_RDZVD : 1;

    agent_session_feed(ud, &(struct agent_input){.kind = AGENT_IN_ERROR, .text = msg,
                                                 .renewable = c != NULL, .status = status});
}

/* AGENT_DO_RENEW: its JOINED was lost; join again as a new node id, if the identity may be. */
static void renew(struct agent_session *a, const char *msg, int64_t status)
{
    if (a->client && agent_identity_renew(&a->join, true, msg)) {
        on_lost(a->client, msg, a);
        return;
    }
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_ERROR, .text = msg,
                                                .status = status});
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
    /* Our proof of who we are when we reconnect (a resume, or a spare back after a stall). */
    if (secret[0])
        snprintf(a->join.secret, sizeof(a->join.secret), "%s", secret);
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_JOINED, .spare = spare,
                                                .resumed = resumed});
}

/* The connection to rdzvd broke: keep the workers, reconnect and re-register. */
static void on_lost(struct agent_client *c, const char *msg, void *ud)
{
    struct agent_session *a = ud;

    agent_client_close(c, NULL, NULL);
    a->client = NULL;
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_LOST, .text = msg});
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

/* A HEARTBEAT of gen, with the progress of g's workers (NULL: none). */
static void beat(struct agent_session *a, uint64_t gen, struct agent_group *g)
{
    struct rdzv_heartbeat hb;

    if (!a->client)
        return;
    agent_heartbeat_fill(&hb, gen, g, (unsigned)a->cfg.nproc, a->cfg.stall);
    (void)agent_client_send_heartbeat(a->client, &hb);
}

static void heartbeat_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    if (a->sm.state == AG_DONE)
        return;
    /* The workers' progress, while they run this generation (rdzvctl status shows it). */
    beat(a, a->sm.round.generation, a->sm.state == AG_RUNNING ? a->group : NULL);
}

void agent_session_signal(struct agent_session *a, int signum)
{
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = signum});
}

/* The session is over (the machine decided it): what this agent says last, and the loop
 * stops (main() returns the exit code). */
static void say_end(struct agent_session *a)
{
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
    int r;

    /* How long ago this agent started (the client dates it again as the JOIN leaves): rdzvd starts
     * a job that ended before then afresh (a new run of the same line), not refusing it as over. */
    a->join.age_ms = (int64_t)(rdzv_now_ms() - a->started_ms) + 1;
    agent_sm_resume(&a->sm, a->incarnation, &a->join.resume);
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
    a->sm.done = calloc((size_t)cfg->nproc, sizeof(*a->sm.done));
    a->stacks = calloc((size_t)cfg->nproc, sizeof(*a->stacks));
    a->hangs = calloc((size_t)cfg->nproc, sizeof(*a->hangs));
    if (!a->sm.failed || !a->rank_running || !a->spawn || !a->sm.late || !a->sm.done ||
        !a->stacks || !a->hangs) {
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
    a->sm.grace_s = cfg->grace_s;
    a->sm.connect_timeout_s = cfg->connect_timeout_s;
    a->sm.heartbeat_timeout_s = cfg->heartbeat_timeout_s;
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

    if (healthy && a->cfg.health_interval_s > 0)
        (void)uv_timer_start(&a->health_timer, health_timer_cb,
                             (uint64_t)(a->cfg.health_interval_s * 1000),
                             (uint64_t)(a->cfg.health_interval_s * 1000));
    agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_START_CHECKED, .ok = healthy,
                                                .text = reason});
}

/* The first connection, once the node passed its check. */
static void join_first(struct agent_session *a)
{
    int r = agent_connect(a);

    if (r < 0) {
        log_error_errno(r, "cannot start the connection to rdzvd");
        agent_session_feed(a, &(struct agent_input){.kind = AGENT_IN_UNCONNECTED});
    }
}

int agent_session_start(struct agent_session *a, struct agent_group *g,
                        const struct rdzv_join *join)
{
    int r;

    a->group = g;
    a->join = *join;
    a->sm.host = a->join.host;
    a->heartbeat.data = a->leaderless.data = a->health_timer.data = a->verdict.data = a;
    a->hold_timer.data = a->grace_timer.data = a->own_end.data = a;
    r = uv_timer_init(a->loop, &a->leaderless);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->hold_timer);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->grace_timer);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->verdict);
    if (r == 0)
        r = uv_timer_init(a->loop, &a->own_end);
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
    free(a->sm.done);
    agent_store_free(a->store);
    agent_replica_free(a->rhost.replica);
    free(a);
    return NULL;
}
