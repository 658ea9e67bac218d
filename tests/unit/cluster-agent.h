/* SPDX-License-Identifier: Apache-2.0 */
/* cluster-agent.h: the cluster simulator's agents and workers. Each agent is its session's step
 * machine (agent/session/agent-session-sm.h) and an adapter of the simulator's that carries out
 * its Ready as agent-session.c does: messages on its connection, workers started, told or
 * stopped, timers on the world's queue, the JOIN with its resume built as agent_connect does.
 * The workers train together: a generation's workers make a step only when every rank of its
 * world runs in it, from the furthest step among them; the job saves a checkpoint every few
 * steps, a fresh worker starts from it, the workers of a generation that reaches the last step
 * exit 0 (fresh ones past it, at their first step together); in place, a survivor told the next
 * generation moves to it at its next step's end (or at once when its peers are gone), unless
 * that step was its last. Part of test-cluster-sim.c, after cluster.h. */
#pragma once
#include <signal.h>

#include "agent/session/agent-identity.h"

static void cs_feed(int a, struct agent_input in);

/* Generation g of the run agent a is in: a job made afresh (a new run, or after rdzvd lost it)
 * counts its generations from 1 again. */
static uint64_t cs_key(int a, uint64_t g)
{
    return (uint64_t)W->ag[a].run << 40 | g;
}

static bool cs_connected(const struct cs_agent *ag)
{
    return ag->conn >= 0 && W->conns[ag->conn].a_open;
}

/* Agent a is cut off from rdzvd, or rdzvd let go of its connection: it is not in rdzvd's
 * view of the job. */
static bool cs_lost(int a)
{
    const struct cs_agent *ag = &W->ag[a];

    const struct rdzvd_job *j = W->up ? rdzvd_job_view(&W->jobs, "job") : NULL;

    return !cs_connected(ag) || cs_cut(a) || !W->conns[ag->conn].r_open ||
           !W->conns[ag->conn].m || (j && ag->sm.round.generation < j->generation);
}

/* ---- the generations' worlds (what the checks compare) ---- */

static struct cs_gen *cs_gen(uint64_t g, bool make)
{
    struct cs_gen *e = &W->gens[g % CS_GENS];

    if (e->g == g)
        return e;
    if (!make)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->g = g;
    return e;
}

/* Agent a's ROUND for generation rd->generation: every agent told the same world. */
static void cs_gen_note(int a, const struct rdzv_round *rd)
{
    struct cs_gen *e = cs_gen(cs_key(a, rd->generation), false);
    const char *id = rd->n_ids ? rd->ids[0] : "";

    if (!e) {
        e = cs_gen(cs_key(a, rd->generation), true);
        e->world = rd->world_size;
        e->nnodes = rd->nnodes;
        e->epoch = W->epoch;
        snprintf(e->id, sizeof(e->id), "%.16s", id);
        return;
    }
    if (e->world != rd->world_size || e->nnodes != rd->nnodes || strncmp(e->id, id, 16))
        cs_bad(1, "node-%d's ROUND of generation %" PRIu64 " says world %" PRId64 " on %" PRId64
               " nodes, NCCL id %.8s; another's said %" PRId64 " on %" PRId64 ", %.8s%s", a,
               rd->generation, rd->world_size, rd->nnodes, id, e->world, e->nnodes, e->id,
               e->epoch != W->epoch ? " (a generation formed again after rdzvd restarted)" : "");
}

static int cs_owner(int a, unsigned lr)
{
    return a * CS_NPROC + (int)lr + 1;
}

/* Worker lr of agent a takes its rank in its generation: no other worker holds it. */
static void cs_gen_enter(int a, unsigned lr)
{
    struct cs_worker *w = &W->ag[a].w[lr];
    struct cs_gen *e = cs_gen(w->gen, false);

    if (!e)
        return;
    if (w->rank < 0 || w->rank >= e->world || w->rank >= (int64_t)(sizeof(e->owner) /
                                                                    sizeof(e->owner[0]))) {
        cs_bad(1, "node-%d's worker %u runs rank %" PRId64 " of generation %" PRIu64
               ", whose world is %" PRId64, a, lr, w->rank, w->gen, e->world);
        return;
    }
    if (e->owner[w->rank] && e->owner[w->rank] != cs_owner(a, lr))
        cs_bad(1, "rank %" PRId64 " of generation %" PRIu64 " runs twice: node-%d's worker %u "
               "and node-%d's worker %d", w->rank, w->gen, a, lr,
               (e->owner[w->rank] - 1) / CS_NPROC, (e->owner[w->rank] - 1) % CS_NPROC);
    e->owner[w->rank] = cs_owner(a, lr);
}

static void cs_gen_leave(int a, unsigned lr)
{
    struct cs_worker *w = &W->ag[a].w[lr];
    struct cs_gen *e = cs_gen(w->gen, false);

    if (e && w->rank >= 0 && w->rank < e->world && e->owner[w->rank] == cs_owner(a, lr))
        e->owner[w->rank] = 0;
}

static void cs_gen_sched(uint64_t g)
{
    struct cs_gen *e = cs_gen(g, false);
    int64_t slow = 1;

    if (!e || e->stepping)
        return;
    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++)
            if (W->ag[a].w[k].alive && W->ag[a].w[k].gen == g && W->ag[a].slow > slow)
                slow = W->ag[a].slow;
    e->stepping = true;
    cs_push(NOW + (uint64_t)(W->c.step_ms * slow), (struct cs_ev){.kind = E_STEP, .gen = g});
}

/* ---- workers ---- */

/* Worker lr of a exits after ms with status or signal sig. */
static void cs_w_exit_in(int a, unsigned lr, uint64_t ms, int64_t status, int sig)
{
    struct cs_worker *w = &W->ag[a].w[lr];

    w->exiting = true;
    w->life++;
    cs_push(NOW + ms, (struct cs_ev){.kind = E_WEXIT, .a = a, .arg = (int)lr, .sig = sig,
                                     .gen = (uint64_t)status, .token = w->life});
}

/* A fresh worker for local rank lr in the agent's generation, from the job's checkpoint. */
static void cs_w_start(int a, unsigned lr)
{
    struct cs_agent *ag = &W->ag[a];
    struct cs_worker *w = &ag->w[lr];

    *w = (struct cs_worker){.alive = true, .follows = W->c.follows, .life = w->life + 1,
                            .gen = cs_key(a, ag->sm.round.generation), .step = W->ckpt,
                            .last_prog = NOW,
                            .rank = ag->sm.round.rank_offset + lr};
    cs_gen_enter(a, lr);
    cs_gen_sched(w->gen);
}

/* The worker re-forms in the generation it was told. */
static void cs_w_move(int a, unsigned lr)
{
    struct cs_worker *w = &W->ag[a].w[lr];

    cs_gen_leave(a, lr);
    w->gen = w->want;
    w->rank = w->want_rank;
    w->want = 0;
    w->stepped = false;
    w->last_prog = NOW;
    cs_gen_enter(a, lr);
    cs_gen_sched(w->gen);
}

/* Every rank of generation g runs in it, none hung or exiting. */
static bool cs_gen_whole(uint64_t g)
{
    struct cs_gen *e = cs_gen(g, false);
    int64_t n = 0;

    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++) {
            const struct cs_worker *w = &W->ag[a].w[k];

            if (w->alive && w->gen == g) {
                if (w->exiting || w->hung)
                    return false;
                n++;
            }
        }
    return e && n == e->world;
}

/* How long a node rdzvd lost may go on training its old generation beside a newer one: until
 * its agent finds rdzvd silent (a heartbeat timeout and a beat), then its leaderless timer
 * (agent-policy A30, A32): with replicas a heartbeat timeout; with one rdzvd rdzvd's rebuild
 * window, two heartbeat timeouts and an agent's longest reconnect wait. Then the stop's grace,
 * and a margin. Within it, the overlap is the bound docs/guide/failures.md states. */
static uint64_t cs_stale_bound(void)
{
    uint64_t hb = (uint64_t)W->c.hb_timeout_ms;

    return hb + (uint64_t)W->c.hb_ms + (W->c.replicas ? hb : 2 * hb + RDZV_RECONNECT_WAIT_MAX_MS) +
           5000;
}

/* C2: generation g steps while node newer's workers run in a newer one. Only a node rdzvd lost
 * may (its agent keeps its workers while it reconnects), within cs_stale_bound. */
static void cs_stale_step(uint64_t g, int newer)
{
    int cut = -1;

    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++)
            if (W->ag[a].w[k].alive && W->ag[a].w[k].gen == g && cs_lost(a))
                cut = a;
    if (cut < 0) {
        cs_bad(2, "generation %" PRIu64 " steps while node-%d's workers run in a newer one",
               g & 0xffffffffff, newer);
        return;
    }
    if (!W->ag[cut].stale_since)
        W->ag[cut].stale_since = NOW;
    if (NOW - W->ag[cut].stale_since > cs_stale_bound())
        cs_bad(2, "node-%d, which rdzvd lost, trains generation %" PRIu64 " beside a newer one "
               "for %.1f s, past its bound of %.1f s (a node rdzvd lost trains on)", cut,
               g & 0xffffffffff, (double)(NOW - W->ag[cut].stale_since) / 1000,
               (double)cs_stale_bound() / 1000);
}

/* Generation g's workers try a step together. */
static void cs_step(uint64_t g)
{
    struct cs_gen *e = cs_gen(g, false);
    bool whole = cs_gen_whole(g), any = false;
    int64_t s = 0;
    int newer = -1;

    if (!e)
        return;
    e->stepping = false;
    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++) {
            struct cs_worker *w = &W->ag[a].w[k];

            if (w->alive && w->gen == g && w->step > s)
                s = w->step;
            if (whole && w->alive && !w->exiting && w->gen > g && !W->c.inplace)
                newer = a;
        }
    if (newer >= 0)
        cs_stale_step(g, newer);
    /* Its state is the furthest worker's (survivors hand theirs to fresh workers); a generation
     * past the last step only ends (a fresh one from the last checkpoint). */
    if (s < W->c.steps)
        s++;
    if (whole && s % W->c.ckpt_every == 0 && s > W->ckpt)
        W->ckpt = s;
    for (int a = 0; a < W->c.nagents; a++)
        for (int k = 0; k < W->c.nproc; k++) {
            struct cs_worker *w = &W->ag[a].w[k];

            if (!w->alive || w->gen != g || w->exiting)
                continue;
            any = true;
            if (whole) {
                w->step = s;
                w->last_prog = NOW;
                w->stepped = true;
                if (s >= W->c.steps) { /* its last step: done, whatever it was told */
                    cs_w_exit_in(a, (unsigned)k, (uint64_t)cs_draw(1, 30), 0, 0);
                    continue;
                }
            }
            if (w->want > g)
                cs_w_move(a, (unsigned)k);
        }
    if (any)
        cs_gen_sched(g);
}

/* ---- the agent's adapter ---- */

static int cs_a_send(int a, struct cs_msg *m)
{
    struct cs_agent *ag = &W->ag[a];

    if (!cs_connected(ag) || !ag->joined) {
        free(m);
        return -ENOTCONN;
    }
    cs_send(ag->conn, true, m);
    return 0;
}

static void cs_hb(int a, uint64_t gen, bool progress)
{
    struct cs_agent *ag = &W->ag[a];
    struct cs_msg *m = cs_msg_new(M_HB);

    m->u.hb.gen = gen;
    m->u.hb.n = 0;
    for (int k = 0; progress && k < W->c.nproc; k++) {
        const struct cs_worker *w = &ag->w[k];

        if (w->alive && w->stepped && w->gen == cs_key(a, gen))
            m->u.hb.p[m->u.hb.n++] = (struct rdzv_rank_progress){
                .local_rank = k, .step = w->step,
                .age_ms = (int64_t)(NOW - (uint64_t)w->last_prog)};
    }
    (void)cs_a_send(a, m);
}

static void cs_facts(int a, struct agent_facts *f)
{
    struct cs_agent *ag = &W->ag[a];

    *f = (struct agent_facts){.connected = cs_connected(ag), .endpoints = W->c.replicas ? 3 : 1,
                              .pending_exit = ag->pending_exit,
                              .exit_gen = ag->pexit.generation,
                              .rank_running = ag->rank_running};
    for (int k = 0; k < W->c.nproc; k++) {
        const struct cs_worker *w = &ag->w[k];

        ag->rank_running[k] = w->alive;
        f->running += w->alive;
        f->following += w->alive && w->follows;
        f->stepped |= w->alive && w->stepped;
    }
}

/* The JOIN, as agent_connect makes it: after a loss, which generation the workers run. */
static void cs_connect(int a)
{
    struct cs_agent *ag = &W->ag[a];
    struct cs_msg *m;

    if (ag->done || !ag->connecting)
        return;
    if (!W->up || cs_cut(a)) {
        if (NOW - ag->connect_began >= (uint64_t)W->c.connect_timeout_ms) {
            ag->connecting = false;
            cs_feed(a, (struct agent_input){.kind = AGENT_IN_ERROR, .status = 68,
                                            .text = "cannot reach rdzvd"});
            return;
        }
        cs_push(NOW + 1000, (struct cs_ev){.kind = E_CONNECT, .a = a});
        return;
    }
    ag->connecting = false;
    ag->conn = cs_conn_new(a);
    ag->joined = false;
    ag->last_heard = NOW;
    ag->join.age_ms = (int64_t)(NOW - ag->started_ms) + 1;
    agent_sm_resume(&ag->sm, ag->incarnation, &ag->join.resume);
    m = cs_msg_new(M_JOIN);
    m->u.join = ag->join;
    cs_send(ag->conn, true, m);
}

static void cs_connect_soon(int a)
{
    struct cs_agent *ag = &W->ag[a];

    if (ag->connecting)
        return;
    ag->connecting = true;
    ag->connect_began = NOW;
    cs_push(NOW + (uint64_t)cs_draw(10, 500), (struct cs_ev){.kind = E_CONNECT, .a = a});
}

/* The agent closes its connection (it ends): rdzvd reads the end after what was sent. */
static void cs_a_close(int a)
{
    struct cs_agent *ag = &W->ag[a];

    if (cs_connected(ag)) {
        cs_send(ag->conn, true, cs_msg_new(M_FIN));
        W->conns[ag->conn].a_open = false;
    }
    ag->conn = -1;
    ag->joined = false;
}

static void cs_finish(int a)
{
    struct cs_agent *ag = &W->ag[a];

    ag->done = true;
    ag->done_at = NOW;
    ag->exit_code = ag->sm.exit_code;
    memcpy(ag->outcome, ag->sm.outcome.type, sizeof(ag->outcome)); /* the same sizes */
    memcpy(ag->summary, ag->sm.outcome.summary, sizeof(ag->summary));
    cs_a_close(a);
    for (int k = 0; k < W->c.nproc; k++) /* the reaper takes what is left */
        if (ag->w[k].alive) {
            cs_gen_leave(a, (unsigned)k);
            ag->w[k].alive = false;
            ag->w[k].life++;
        }
    cs_say("node-%d ends: exit %d, %s: %s", a, ag->exit_code, ag->outcome, ag->summary);
}

static void cs_start(int a, enum agent_start_mode mode)
{
    struct cs_agent *ag = &W->ag[a];
    uint64_t g = cs_key(a, ag->sm.round.generation);

    ag->stale_since = 0;
    if (mode != AGENT_START_IN_PLACE) /* the old group is freed: its stderr says no more */
        ag->group++;
    for (unsigned k = 0; k < (unsigned)W->c.nproc; k++) {
        struct cs_worker *w = &ag->w[k];

        if (mode != AGENT_START_IN_PLACE || !w->alive) {
            if (w->alive) { /* a partial start kills what is left (not in place) */
                cs_gen_leave(a, k);
                w->alive = false;
            }
            if (mode == AGENT_START_ALL || !ag->rdone[k]) /* its script ended (A3a) */
                cs_w_start(a, k);
            continue;
        }
        if (w->exiting) { /* it closed its channel: started again if it failed (A3a) */
            ag->late[k] = true;
            continue;
        }
        w->want = g;
        w->want_rank = ag->sm.round.rank_offset + k;
        w->hung_told = false; /* kept: a fresh progress timeout (worker_keep) */
        w->kept_at = (int64_t)NOW;
        if (!cs_gen_whole(w->gen)) /* its peers are gone: it re-forms at once */
            cs_w_move(a, k);
    }
}

static void cs_stop(int a, int sig)
{
    struct cs_agent *ag = &W->ag[a];

    for (unsigned k = 0; k < (unsigned)W->c.nproc; k++) {
        struct cs_worker *w = &ag->w[k];

        if (!w->alive || w->exiting)
            continue;
        if (w->hung) /* it ignores the signal: killed after the grace */
            cs_w_exit_in(a, k, (uint64_t)(ag->sm.grace_s * 1000), 0, SIGKILL);
        else
            cs_w_exit_in(a, k, (uint64_t)cs_draw(5, 300), 0, sig);
    }
}

/* AGENT_DO_RENEW: its JOINED was lost; it joins again under a new node id, as
 * agent_identity_renew decides (whose tail is random: here its count), or the refusal ends it. */
static void cs_renew(int a, const char *text, int64_t code)
{
    struct cs_agent *ag = &W->ag[a];

    if (!ag->join.secret[0] && strstr(text, RDZV_ERROR_NODE_ID_KNOWN) &&
        ag->renewed < AGENT_IDENTITY_RENEWALS) {
        snprintf(ag->join.node_id, sizeof(ag->join.node_id), "node-%d.%d", a, ++ag->renewed);
        ag->renewing = true;
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_LOST, .text = text});
        return;
    }
    cs_feed(a, (struct agent_input){.kind = AGENT_IN_ERROR, .status = code, .text = text});
}

static void cs_apply(int a, const struct agent_ready *r)
{
    struct cs_agent *ag = &W->ag[a];

    for (unsigned i = 0; i < r->n && !ag->done; i++) {
        const struct agent_effect *fx = &r->fx[i];
        struct cs_msg *m;

        switch (fx->kind) {
        case AGENT_DO_HEARTBEAT: /* with gen: the workers' last steps in it */
            if (fx->gen)
                cs_hb(a, fx->gen, true);
            else
                cs_hb(a, ag->sm.round.generation, ag->sm.state == AG_RUNNING);
            break;
        case AGENT_DO_BARE_BEAT:
        case AGENT_DO_ROUND_ACK:
            cs_hb(a, fx->gen, false);
            break;
        case AGENT_DO_WORKER_EXIT: {
            struct rdzv_worker_exit *x = &ag->pexit;

            memset(x, 0, sizeof(*x));
            x->generation = ag->sm.round.generation;
            x->rank = ag->sm.round.rank_offset + fx->local_rank;
            x->local_rank = fx->local_rank;
            x->exit_code = fx->code;
            x->signal = fx->sig;
            x->time = (double)NOW / 1000;
            memcpy(x->host, ag->join.host, sizeof(x->host)); /* the same sizes */
            if (fx->text)
                snprintf(x->reason, sizeof(x->reason), "%s", fx->text);
            m = cs_msg_new(M_WEXIT);
            m->u.wexit = *x;
            ag->pending_exit = cs_a_send(a, m) < 0;
            break;
        }
        case AGENT_DO_RESEND_EXIT:
            m = cs_msg_new(M_WEXIT);
            m->u.wexit = ag->pexit;
            ag->pending_exit = cs_a_send(a, m) < 0;
            break;
        case AGENT_DO_READY:
            m = cs_msg_new(M_READY);
            m->u.ready.generation = fx->gen;
            (void)cs_a_send(a, m);
            break;
        case AGENT_DO_LEAVE:
            ag->left_key = cs_key(a, fx->gen);
            m = cs_msg_new(M_LEAVE);
            m->u.leave = (struct rdzv_leave){.generation = fx->gen, .succeeded = true};
            (void)cs_a_send(a, m);
            break;
        case AGENT_DO_ROUND_BEGIN:
            break;
        case AGENT_DO_START:
            cs_start(a, fx->mode);
            break;
        case AGENT_DO_REPLACE:
            ag->late[fx->local_rank] = false;
            cs_w_start(a, fx->local_rank);
            break;
        case AGENT_DO_STOP:
            cs_stop(a, fx->sig);
            break;
        case AGENT_DO_KILL:
            if (ag->w[fx->local_rank].alive)
                cs_w_exit_in(a, fx->local_rank, 1, 0, SIGKILL);
            break;
        case AGENT_DO_HEALTH: /* the check before READY: the one running answers for it */
            if (!ag->checking) {
                ag->checking = true;
                cs_push(NOW + (uint64_t)cs_draw(1, 50), (struct cs_ev){.kind = E_HEALTH, .a = a});
            }
            break;
        case AGENT_DO_CHECK: /* the periodic one */
            if (!ag->checking) {
                ag->checking = true;
                cs_push(NOW + (uint64_t)cs_side(1, 50), (struct cs_ev){.kind = E_HEALTH, .a = a});
            }
            break;
        case AGENT_DO_STACKS: /* asked for; they take a while (gdb), then HUNG in fx->gen */
            cs_push(NOW + (uint64_t)cs_side(10, 2000),
                    (struct cs_ev){.kind = E_STACKS, .a = a, .arg = (int)fx->local_rank,
                                   .gen = fx->gen});
            break;
        case AGENT_DO_RENEW:
            cs_renew(a, fx->text, fx->code);
            break;
        case AGENT_DO_TIMER:
            ag->timer_token[fx->timer]++;
            if (fx->due_ms >= 0)
                cs_push((uint64_t)fx->due_ms < NOW ? NOW : (uint64_t)fx->due_ms,
                        (struct cs_ev){.kind = E_ATIMER, .a = a, .arg = (int)fx->timer,
                                       .token = ag->timer_token[fx->timer]});
            break;
        case AGENT_DO_FINISH:
            cs_finish(a);
            break;
        case AGENT_DO_SIGNAL:
        case AGENT_DO_NEXT_ENDPOINT:
        case AGENT_DO_REPLICA_JOINED:
            break;
        case AGENT_DO_ASK_SCHEDULER:
            cs_feed(a, (struct agent_input){.kind = AGENT_IN_SCHEDULER, .ended = false,
                                            .text = ""});
            break;
        case AGENT_DO_CANCEL:
            m = cs_msg_new(M_CANCEL);
            memset(&m->u.cancel, 0, sizeof(m->u.cancel));
            m->u.cancel.signal = fx->sig;
            cs_feed(a, (struct agent_input){.kind = AGENT_IN_CANCEL_SENT,
                                            .ok = cs_a_send(a, m) == 0});
            break;
        case AGENT_DO_UNHEALTHY:
            m = cs_msg_new(M_UNHEALTHY);
            snprintf(m->u.unhealthy.reason, sizeof(m->u.unhealthy.reason), "%s", fx->text);
            if (cs_a_send(a, m) < 0)
                cs_feed(a, (struct agent_input){.kind = AGENT_IN_UNHEALTHY_UNSENT});
            break;
        case AGENT_DO_JOIN:
        case AGENT_DO_CONNECT:
            cs_connect_soon(a);
            break;
        }
    }
}

static void cs_feed(int a, struct agent_input in)
{
    struct cs_agent *ag = &W->ag[a];
    struct agent_ready r;

    if (ag->done)
        return;
    cs_facts(a, &in.facts);
    if (agent_session_step(&ag->sm, &in, (int64_t)NOW, &r) != 0)
        return;
    for (unsigned i = 0; W->verbose > 1 && i < r.nlog; i++) /* its lines to log */
        cs_say("node-%d: %s", a, r.log[i].text);
    cs_apply(a, &r);
}

/* A health check's verdict: a sick node fails it. */
static void cs_checked(int a)
{
    struct cs_agent *ag = &W->ag[a];

    ag->checking = false;
    if (ag->sick)
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_UNHEALTHY,
                                        .text = "GPU 0 fell off the bus"});
    else
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_HEALTH_OK});
}

/* The end of an exited worker's stderr, unless its group was freed since (GROUP_FREEING). */
static void cs_output_closed(const struct cs_ev *ev)
{
    if (ev->token == W->ag[ev->a].group)
        cs_feed(ev->a, (struct agent_input){.kind = AGENT_IN_OUTPUT_CLOSED,
                                            .local_rank = (unsigned)ev->arg,
                                            .status = (int64_t)ev->gen, .sig = ev->sig});
}

/* Worker lr's exit (its life's: a later process of the rank is another). */
static void cs_w_exited(int a, unsigned lr, uint64_t life, int64_t status, int sig)
{
    struct cs_agent *ag = &W->ag[a];
    struct cs_worker *w = &ag->w[lr];
    bool any = false, open;

    if (ag->done || !w->alive || w->life != life)
        return;
    cs_gen_leave(a, lr);
    w->alive = w->exiting = false;
    /* Its stderr is read to its end at its exit, or shortly after, or late (past the hold). */
    open = cs_side(0, 1);
    if (open)
        cs_push(NOW + (uint64_t)(cs_side(0, 4) ? cs_side(0, 60) : cs_side(150, 400)),
                (struct cs_ev){.kind = E_OUTPUT, .a = a, .arg = (int)lr, .sig = sig,
                               .gen = (uint64_t)status, .token = ag->group});
    cs_feed(a, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = lr,
                                    .status = status, .sig = sig, .output_open = open});
    for (int k = 0; k < W->c.nproc; k++)
        any |= ag->w[k].alive;
    if (!any) {
        ag->stale_since = 0;
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_ALL_EXITED});
    }
}

/* Agent a learns its connection ci broke. */
static void cs_a_lost(int a, int ci, const char *why)
{
    struct cs_agent *ag = &W->ag[a];

    if (ag->done || ag->conn != ci || !W->conns[ci].a_open)
        return;
    W->conns[ci].a_open = false;
    ag->conn = -1;
    ag->joined = false;
    cs_feed(a, (struct agent_input){.kind = AGENT_IN_LOST, .text = why});
}

/* A message from rdzvd reaches agent a. */
static void cs_a_deliver(struct cs_msg *msg)
{
    struct cs_conn *c = &W->conns[msg->conn];
    int a = c->a;
    struct cs_agent *ag = &W->ag[a];

    if (ag->done || ag->conn != msg->conn || !c->a_open)
        return;
    ag->last_heard = NOW;
    switch (msg->kind) {
    case M_JOINED:
        ag->joined = true;
        ag->incarnation = msg->u.joined.incarnation;
        ag->run = msg->u.joined.run;
        if (msg->u.joined.resumed)
            ag->join.ran_incarnation = ag->incarnation;
        if (msg->u.joined.secret[0])
            memcpy(ag->join.secret, msg->u.joined.secret, sizeof(ag->join.secret));
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_JOINED, .spare = msg->u.joined.spare,
                                        .resumed = msg->u.joined.resumed});
        break;
    case M_ROUND:
        if (ag->sm.state != AG_JOINING && ag->sm.state != AG_RESTARTING) /* ignored: C4's word */
            W->round_ignored = true;
        ag->join.ran_incarnation = ag->incarnation;
        cs_gen_note(a, &msg->u.round);
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_ROUND, .round = &msg->u.round});
        break;
    case M_EVENT:
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_EVENT, .event = &msg->u.event});
        break;
    case M_NCCL_REQ: {
        struct cs_msg *m = cs_msg_new(M_NCCL_ID);
        struct rdzv_nccl_id *n = &m->u.nccl_id;
        uint64_t x = W->seed * 1000003 + msg->u.nreq.generation;

        memset(n, 0, offsetof(struct rdzv_nccl_id, ids));
        n->generation = msg->u.nreq.generation;
        n->n_ids = msg->u.nreq.count;
        for (unsigned i = 0; i < n->n_ids && i < RDZV_MAX_NCCL_IDS; i++) {
            for (int k = 0; k < RDZV_NCCL_HEX_LEN; k += 16)
                snprintf(n->ids[i] + k, 17, "%016" PRIx64, cs_rnd(&x));
        }
        (void)cs_a_send(a, m);
        break;
    }
    case M_ERROR:
        c->a_open = false;
        ag->conn = -1;
        ag->joined = false;
        /* Its connection refused it: the machine may answer with a new node id (cs_renew). */
        ag->renewing = false;
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_ERROR, .status = 1,
                                        .text = msg->u.error, .renewable = true});
        /* C3: a node that took a ROUND of this run is refused while its job goes on: its agent
         * ends on the refusal, not on the job's outcome. */
        if (!ag->renewing && ag->sm.round.generation && ag->run == W->run && W->up &&
            rdzvd_job_view(&W->jobs, "job") &&
            rdzvd_job_view(&W->jobs, "job")->state != JOB_ENDED)
            cs_bad(3, "node-%d, which ran generation %" PRIu64 ", is refused while its job goes "
                   "on (its agent ends, exit 1): %s%s", a, ag->sm.round.generation, msg->u.error,
                   msg->old_held ? " (its JOIN came before rdzvd saw its old connection "
                                   "close)" : "");
        break;
    case M_FIN:
        cs_a_lost(a, msg->conn, "rdzvd closed the connection");
        break;
    default:
        break;
    }
}

/* Agent a's heartbeat timer: a HEARTBEAT, its silence and its workers' progress checked. */
static void cs_beat(int a)
{
    struct cs_agent *ag = &W->ag[a];

    if (ag->done)
        return;
    cs_push(NOW + (uint64_t)W->c.hb_ms, (struct cs_ev){.kind = E_BEAT, .a = a});
    if (cs_connected(ag) && ag->joined) {
        if (NOW - ag->last_heard > (uint64_t)W->c.hb_timeout_ms) { /* rdzvd fell silent */
            int ci = ag->conn;

            cs_send(ci, true, cs_msg_new(M_FIN));
            cs_a_lost(a, ci, "rdzvd fell silent");
            return;
        }
        cs_hb(a, ag->sm.round.generation, ag->sm.state == AG_RUNNING);
    }
    if (ag->sick && !ag->checking) /* --health-interval: due again */
        cs_feed(a, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE});
    if (!W->c.progress_timeout_ms)
        return;
    /* The group's progress timer, while it runs the generation: once per worker; the machine
     * asks for its stacks if that generation still runs (AGENT_DO_STACKS). */
    for (unsigned k = 0; k < (unsigned)W->c.nproc && !ag->done; k++) {
        struct cs_worker *w = &ag->w[k];

        if (w->alive && !w->exiting && !w->hung_told &&
            w->gen == cs_key(a, ag->sm.round.generation) &&
            NOW - (uint64_t)(w->last_prog > w->kept_at ? w->last_prog : w->kept_at) >
                (uint64_t)W->c.progress_timeout_ms) {
            w->hung_told = true;
            cs_feed(a, (struct agent_input){.kind = AGENT_IN_SILENT, .local_rank = k});
        }
    }
}

/* Agent a starts: its check passes, it JOINs. */
static void cs_agent_start(int a)
{
    struct cs_agent *ag = &W->ag[a];
    struct rdzv_join *jn = &ag->join;

    if (ag->started)
        return;
    ag->started = true;
    ag->started_ms = NOW;
    ag->conn = -1;
    ag->slow = 1;
    ag->sm = (struct agent_sm){.run_id = "job", .host = jn->host, .grace_s = 3,
                               .connect_timeout_s = (double)W->c.connect_timeout_ms / 1000,
                               .heartbeat_timeout_s = (double)W->c.hb_timeout_ms / 1000,
                               .nproc = W->c.nproc, .inplace = W->c.inplace,
                               .failed = ag->failed, .late = ag->late,
                               .done = ag->rdone};
    cs_push(NOW + (uint64_t)W->c.hb_ms, (struct cs_ev){.kind = E_BEAT, .a = a});
    cs_feed(a, (struct agent_input){.kind = AGENT_IN_START_CHECKED, .ok = true});
}

/* Agent a's JOIN as its command line makes it. */
static void cs_agent_init(int a)
{
    struct cs_agent *ag = &W->ag[a];
    struct rdzv_join *jn = &ag->join;

    memset(ag, 0, sizeof(*ag));
    ag->conn = -1;
    *jn = (struct rdzv_join){.nproc = W->c.nproc, .node_rank = -1, .min = W->c.min,
                             .max = W->c.max, .last_call_ms = W->c.last_call_ms,
                             .max_restarts = W->c.max_restarts, .nccl = RDZV_NCCL_AUTO,
                             .nccl_ids = 1, .heartbeat_timeout_ms = W->c.hb_timeout_ms,
                             .join_timeout_ms = W->c.join_timeout_ms,
                             .scale_up_now = W->c.scale_up_now, .inplace = W->c.inplace,
                             .bad_node_failures = W->c.bad_node_failures};
    snprintf(jn->run_id, sizeof(jn->run_id), "job");
    snprintf(jn->node_id, sizeof(jn->node_id), "node-%d", a);
    snprintf(jn->host, sizeof(jn->host), "host%d", a);
}
