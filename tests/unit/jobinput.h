/* SPDX-License-Identifier: Apache-2.0 */
/* jobinput.h: the inputs a test gives the job machine, each through its step (rdzvd_job_step)
 * as rdzvd's adapter (daemon/job/rdzvd-job-wire.c) builds it, the Ready advanced at once; and
 * what the Ready answers. Part of jobtest.h, which includes it once its fake host is defined. */
#pragma once

/* ---- inputs through the machine's step (rdzvd_job_step), as rdzvd's adapters feed them: at
 * the tests' clock, what the step queued carried out at once ---- */

/* The bytes of a member's message in names (what a queued input keeps a copy of). */
static inline size_t jt_body_len(const struct rdzvd_job_input *in)
{
    switch (in->kind) {
    case RDZVD_IN_HEARTBEAT:
        return sizeof(*in->u.heartbeat);
    case RDZVD_IN_LEAVE:
        return sizeof(*in->u.leave);
    case RDZVD_IN_AGENT_READY:
        return sizeof(*in->u.ready);
    case RDZVD_IN_CANCEL:
        return sizeof(*in->u.cancel);
    case RDZVD_IN_UNHEALTHY:
        return sizeof(*in->u.unhealthy);
    case RDZVD_IN_WORKER_EXIT:
        return sizeof(*in->u.worker_exit);
    default:
        return 0;
    }
}

/* A fake agent that answers while a Ready is carried out (its ROUND, a connection closing in a
 * host op) is queued, as rdzvd-job-wire.c does: stepped once the Ready is done; rd then says
 * nothing (rc 0). */
static inline int jt_step(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                          struct rdzvd_job_ready *rd)
{
    size_t blen = in->member ? jt_body_len(in) : 0;

    if (in->member && rdzvd_job_input_later(h, in, jt_clock(), blen ? in->u.heartbeat : NULL,
                                            blen)) {
        memset(rd, 0, sizeof(*rd));
        return 0;
    }
    rdzvd_job_step(h, in, jt_clock(), rd);
    rdzvd_job_advance(rd);
    jt_ready_deadline_ms = rd->next_deadline_ms;
    jt_ready_reap = rd->reap;
    return rd->rc;
}

/* How many messages of kind rd's outbox holds for peer (NULL: any), before rdzvd_job_advance
 * carries them out. */
static inline int jt_sends(const struct rdzvd_job_ready *rd, enum rdzvd_job_send_kind kind,
                           const void *peer)
{
    struct rdzvd_job_send s;
    const void *at = NULL;
    int n = 0;

    while (rdzvd_job_ready_next(rd, &at, &s))
        n += s.kind == kind && (!peer || s.peer == peer);
    return n;
}

/* The Ready's refusal into err (errlen bytes), cut as the machine's snprintf into it would. */
static inline void jt_err(char *err, size_t errlen, const struct rdzvd_job_ready *rd)
{
    size_t n = strlen(rd->err);

    if (!errlen)
        return;
    if (n >= errlen)
        n = errlen - 1;
    memcpy(err, rd->err, n);
    err[n] = '\0';
}

/* A member's input (in->member's). */
static inline void jt_member_in(const struct rdzvd_job_input *in)
{
    struct rdzvd_job_ready rd;

    jt_step(&in->member->job->host, in, &rd);
}

/* m's connection closed (RDZVD_IN_CLOSED). */
static inline void jt_gone(struct rdzvd_member *m)
{
    jt_member_in(&(struct rdzvd_job_input){.kind = RDZVD_IN_CLOSED, .member = m});
}

/* LEAVE for generation gen. */
static inline void jt_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded)
{
    struct rdzv_leave l = {.generation = gen, .succeeded = succeeded};

    jt_member_in(&(struct rdzvd_job_input){.kind = RDZVD_IN_LEAVE, .member = m, .u.leave = &l});
}

/* READY for generation gen. */
static inline void jt_ready(struct rdzvd_member *m, uint64_t gen)
{
    struct rdzv_ready r = {.generation = gen};

    jt_member_in(
        &(struct rdzvd_job_input){.kind = RDZVD_IN_AGENT_READY, .member = m, .u.ready = &r});
}

/* CANCEL: m's agent was stopped by signal sig (sched_job: the scheduler's job, "": none). */
static inline void jt_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason,
                                    const char *sched_job)
{
    struct rdzv_cancel c = {.signal = sig};

    snprintf(c.reason, sizeof(c.reason), "%s", reason);
    snprintf(c.sched_job, sizeof(c.sched_job), "%s", sched_job);
    jt_member_in(
        &(struct rdzvd_job_input){.kind = RDZVD_IN_CANCEL, .member = m, .u.cancel = &c});
}

static inline void jt_cancel(struct rdzvd_member *m, int64_t sig, const char *reason)
{
    jt_member_cancel(m, sig, reason, "");
}

/* Any message from m's agent, before the message's own input (RDZVD_IN_SEEN). */
static inline void jt_seen(struct rdzvd_member *m)
{
    jt_member_in(&(struct rdzvd_job_input){.kind = RDZVD_IN_SEEN, .member = m});
}

/* HEARTBEAT hb (its progress, as the agent reports it) from m's agent: the Ready's answer in
 * *rd. hb NULL: one with no progress, of no generation. */
static inline void jt_heartbeat_rd(struct rdzvd_member *m, const struct rdzv_heartbeat *hb,
                                   struct rdzvd_job_ready *rd)
{
    static const struct rdzv_heartbeat none;
    struct rdzvd_job_input in = {.kind = RDZVD_IN_HEARTBEAT, .member = m,
                                 .u.heartbeat = hb ? hb : &none};

    jt_step(&m->job->host, &in, rd);
}

/* A HEARTBEAT with no progress: the generation its answer names. */
static inline uint64_t jt_heartbeat(struct rdzvd_member *m)
{
    struct rdzvd_job_ready rd;

    jt_heartbeat_rd(m, NULL, &rd);
    return rd.generation;
}

/* A HEARTBEAT carrying hb's progress. */
static inline void jt_progress(struct rdzvd_member *m, const struct rdzv_heartbeat *hb)
{
    struct rdzvd_job_ready rd;

    jt_heartbeat_rd(m, hb, &rd);
}

/* What m's agent is told its job waits for: a HEARTBEAT's answer. */
static inline void jt_wait(struct rdzvd_member *m, struct rdzv_wait *w)
{
    struct rdzvd_job_ready rd;

    jt_heartbeat_rd(m, NULL, &rd);
    *w = rd.wait;
}

/* The warning a HEARTBEAT's answer gives m's agent into buf: false when there is none. */
static inline bool jt_twin_warning(struct rdzvd_member *m, char *buf, size_t len)
{
    struct rdzvd_job_ready rd;

    jt_heartbeat_rd(m, NULL, &rd);
    snprintf(buf, len, "%s", rd.warning);
    return rd.warning[0] != '\0';
}

/* WORKER_EXIT w from m's agent: 0, or the refusal's errno with err set. */
static inline int jt_member_worker_exit(struct rdzvd_member *m, const struct rdzv_worker_exit *w,
                                        char *err, size_t errlen)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_WORKER_EXIT, .member = m, .u.worker_exit = w};
    struct rdzvd_job_ready rd;

    jt_step(&m->job->host, &in, &rd);
    jt_err(err, errlen, &rd);
    return rd.rc;
}

/* NCCL_ID n (its generation's) from m's agent: the Ready's rc. */
static inline int jt_nccl_id(struct rdzvd_member *m, const struct rdzv_nccl_id *n)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_NCCL_ID, .member = m,
                                 .u.nccl_id = {n->generation, n}};
    struct rdzvd_job_ready rd;

    return jt_step(&m->job->host, &in, &rd);
}

/* Whether m is asked for generation gen's NCCL ids now: an NCCL_ID of gen that does not decode
 * is refused then, and ignored when stale. */
static inline bool jt_nccl_wanted(struct rdzvd_member *m, uint64_t gen)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_NCCL_ID, .member = m,
                                 .u.nccl_id = {gen, NULL}};
    struct rdzvd_job_ready rd;

    return jt_step(&m->job->host, &in, &rd) == -EBADMSG;
}

/* NCCL_ID of m's job's generation: node rank 0's store at addr:port (port 0: none) and its n
 * ids. */
static inline void jt_nccl_offer(struct rdzvd_member *m, const char *addr, int64_t port,
                                 char ids[][RDZV_NCCL_HEX_LEN + 1], unsigned n)
{
    static struct rdzv_nccl_id msg;

    msg = (struct rdzv_nccl_id){.generation = m->job->generation, .store_port = port,
                                .n_ids = n};
    snprintf(msg.store_addr, sizeof(msg.store_addr), "%s", addr);
    for (unsigned i = 0; i < n; i++)
        memcpy(msg.ids[i], ids[i], sizeof(msg.ids[i]));
    jt_nccl_id(m, &msg);
}

static inline void jt_nccl_ids(struct rdzvd_member *m, char ids[][RDZV_NCCL_HEX_LEN + 1],
                               unsigned n)
{
    jt_nccl_offer(m, "", 0, ids, n);
}

/* NCCL_ID of m's job's generation in its error form. */
static inline void jt_nccl_error(struct rdzvd_member *m, const char *error)
{
    static struct rdzv_nccl_id msg;

    msg = (struct rdzv_nccl_id){.generation = m->job->generation, .failed = true};
    snprintf(msg.error, sizeof(msg.error), "%s", error);
    jt_nccl_id(m, &msg);
}

/* PREFLIGHT_REPORT: m's figures of link id (MB/s each way, -1: unreachable). */
static inline void jt_pf_report(struct rdzvd_member *m, int64_t id, double up, double down)
{
    struct rdzv_preflight_report r = {id, up, down};

    jt_member_in(&(struct rdzvd_job_input){
        .kind = RDZVD_IN_PREFLIGHT_REPORT, .member = m, .u.preflight_report = &r});
}

/* UNHEALTHY: m's node failed a health check. */
static inline void jt_unhealthy(struct rdzvd_member *m, const char *reason)
{
    struct rdzv_unhealthy u;

    snprintf(u.reason, sizeof(u.reason), "%s", reason);
    jt_member_in(
        &(struct rdzvd_job_input){.kind = RDZVD_IN_UNHEALTHY, .member = m, .u.unhealthy = &u});
}

/* The operator's CANCEL_JOB of run_id: 0, or the refusal's errno with err set. */
static inline int jt_jobs_cancel(const struct rdzvd_job_host *h, const char *run_id,
                                 const char *reason, char *err, size_t errlen)
{
    struct rdzv_cancel_job c;
    struct rdzvd_job_input in = {.kind = RDZVD_IN_CANCEL_JOB, .u.cancel_job = &c};
    struct rdzvd_job_ready rd;

    snprintf(c.run_id, sizeof(c.run_id), "%s", run_id);
    snprintf(c.reason, sizeof(c.reason), "%s", reason);
    jt_step(h, &in, &rd);
    jt_err(err, errlen, &rd);
    return rd.rc;
}

static inline int jt_cancel_job(struct env *e, const char *run_id, const char *reason, char *err,
                                size_t errlen)
{
    return jt_jobs_cancel(&e->h, run_id, reason, err, errlen);
}

/* The operator's RELEASE of node from run_id (jobs: the list of the host set last): the nodes
 * released or changed, or the refusal's errno with err set. */
static inline int jt_jobs_release(struct rdzv_list *jobs, const char *run_id, const char *node,
                                  char *err, size_t errlen)
{
    struct rdzv_release rq;
    struct rdzvd_job_input in = {.kind = RDZVD_IN_RELEASE, .u.release = &rq};
    struct rdzvd_job_ready rd;

    ASSERT_TRUE(jt_host->jobs == jobs);
    snprintf(rq.run_id, sizeof(rq.run_id), "%s", run_id);
    snprintf(rq.node, sizeof(rq.node), "%s", node);
    jt_step(jt_host, &in, &rd);
    jt_err(err, errlen, &rd);
    return rd.rc < 0 ? rd.rc : (int)rd.count;
}

/* The host rebuilds the jobs of its job table, as rdzvd does when it starts: REBUILD_BEGIN,
 * then one REBUILD of the ids its Ready lists. */
static inline void jt_rebuild(const struct rdzvd_job_host *h)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_REBUILD_BEGIN};
    struct rdzvd_job_ready rd;

    if (jt_step(h, &in, &rd) < 0) {
        free(rd.ids);
        return;
    }
    in = (struct rdzvd_job_input){.kind = RDZVD_IN_REBUILD, .u.rebuild = {rd.ids, rd.n_ids}};
    jt_step(h, &in, &rd);
    free(in.u.rebuild.ids);
}

/* The host shuts down (jobs: the list of the host set last): DROP_ALL. */
static inline void jt_drop_all(struct rdzv_list *jobs)
{
    struct rdzvd_job_ready rd;

    ASSERT_TRUE(jt_host->jobs == jobs);
    jt_step(jt_host, &(struct rdzvd_job_input){.kind = RDZVD_IN_DROP_ALL}, &rd);
}

/* End run_id, waiting for its nodes in its record, as type (RDZVD_IN_END_WAITING). */
static inline int jt_end_waiting(struct env *e, const char *run_id, const char *type,
                                 int64_t exit_code, const char *why, char *err, size_t errlen)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_END_WAITING,
                                 .u.end = {run_id, type, why, exit_code}};
    struct rdzvd_job_ready rd;

    jt_step(&e->h, &in, &rd);
    jt_err(err, errlen, &rd);
    return rd.rc;
}

/* JOIN jn on peer, as the agent sent it: 0 with *ret its member, or the refusal's errno with err
 * set (*ret NULL). */
static inline int jt_job_join(const struct rdzvd_job_host *h, void *peer,
                              const struct rdzv_join *jn, char *err, size_t errlen,
                              struct rdzvd_member **ret)
{
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = peer, .u.join = jn};
    struct rdzvd_job_ready rd;

    jt_step(h, &in, &rd);
    jt_err(err, errlen, &rd);
    *ret = rd.member;
    return rd.rc;
}
