/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-impl.h: PRIVATE to the session's files (agent-session.c: the rendezvous session;
 * agent-session-hang.c: a hung worker's stacks and failure; agent-session-hosting.c: what rdzvd
 * asks the agent to host): the session struct and what those call in each other. Nothing else
 * includes it; the rest of the agent goes through agent-session.h. Calls go one way:
 * agent-session-hang.c -> agent-session.c -> agent-session-hosting.c.
 * Threads: the loop's only, as agent-session.h says. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "proto/rdzv-msg.h"
#include "agent/session/agent-client.h"
#include "agent/session/agent-host.h"
#include "agent/session/agent-replica.h"
#include "agent/session/agent-session.h"
#include "agent/session/agent-session-sm.h"
#include "agent/group/agent-assignment.h"

struct agent_assignment;

struct agent_session;

/* A hung worker whose stacks are being asked for (agent_session_group_hang). */
struct hang_ctx {
    struct agent_session *a;
    unsigned local_rank;
    bool asked;   /* the machine asked for its stacks (AGENT_DO_STACKS) */
    uint64_t gen; /* in its generation */
    char reason[RDZV_REASON_MAX + 1];
};


struct agent_session {
    struct agent_session_cfg cfg; /* strings borrowed from the caller */
    struct agent_health *health;  /* NULL: nothing to check */
    uv_timer_t health_timer;      /* every --health-interval */
    uv_loop_t *loop;
    /* The session's decisions (agent-session-sm.h); what follows is the adapter's. */
    struct agent_sm sm;
    struct agent_assignment as; /* the ROUND being started (AGENT_DO_ROUND_BEGIN .. START) */
    bool *rank_running;         /* [nproc]: scratch for the machine's facts */
    struct agent_client *client;
    struct agent_group *group;
    struct agent_nccl_root *nccl; /* holder of this generation's NCCL bootstrap roots */
    uint64_t nccl_generation;
    /* Node rank 0 of a replicated rdzvd's job: the generation's store (NCCL_REQUEST "store"),
     * created at the first request; where the one asked for now listens (port 0: none). */
    struct agent_store *store;
    char store_addr[RDZV_STORE_ADDR_MAX + 1];
    uint16_t store_port;
    uv_timer_t heartbeat;
    uv_timer_t leaderless; /* AGENT_TIMER_LEADERLESS */
    uv_timer_t verdict; /* AGENT_TIMER_VERDICT */
    uv_timer_t own_end; /* AGENT_TIMER_OWN_END */
    struct rdzv_cancel cancel; /* the CANCEL of a signal from outside (AGENT_DO_CANCEL) */
    bool pending_exit;         /* a WORKER_EXIT that could not be sent (daemon unreachable) */
    uv_timer_t hold_timer; /* AGENT_TIMER_HOLD */
    struct rdzv_worker_exit pexit;
    struct rdzv_join join;     /* what JOIN says; resume filled in on reconnects */
    uint64_t started_ms;       /* rdzv_now_ms() when the session began: JOIN's age_ms */
    /* rdzvd's endpoints: cfg.eps, and the replicas REPLICAS named since. */
    struct agent_endpoints eps;
    unsigned ep_last;          /* the endpoint last joined through (eps) */
    uint64_t incarnation;      /* the last JOINED's rdzvd incarnation: a resume's (1.18) */
    /* What rdzvd last said the job waits for (HEARTBEAT's answer), since when, and when this
     * agent last said so (agent-session-wait.c; rdzv_now_ms, 0: not yet). */
    enum rdzv_wait_for wait_for;
    uint64_t wait_began_ms, wait_line_ms;
    struct agent_replica_host rhost; /* a replica of rdzvd started here (REPLICA) */
    struct agent_host_cfg rehost;    /* cfg.rehost's copy: may_rehost */
    struct agent_front *front;       /* --store-front: the generation's (agent-session-front.c) */
    uint64_t front_cgroups[2];       /* the cgroups its workers are in, asked once it needs them */
    int front_n_cgroups;             /* 1 or 2; 0: not asked yet; -1: no cgroup v2 (uid alone) */
    /* What the kernel's lookups are worth here (agent_session_front_probe, once): 1 (uid and
     * cgroup), 0 (not probed yet), -1 (uid alone: its cgroup ids are wrong), -2 (no lookups) */
    int front_diag;
    bool may_rehost;
    /* --recovery inplace (the machine's failed[] and late[] are allocated here too): */
    struct agent_stacks **stacks; /* [nproc]: a hung worker's stacks being collected */
    struct hang_ctx *hangs;       /* [nproc]: and what is known of its hang meanwhile */
    bool *spawn;               /* [nproc]: scratch for the partial start of a ROUND */
    /* The generation whose first step reports went out at once, and how many did. */
    uint64_t first_step_gen, first_steps_sent;
    uv_timer_t grace_timer; /* AGENT_TIMER_GRACE */
};

/* Tell the daemon a worker failed: it picks the job's root cause and tells every node. Kept for
 * the next connection when the daemon can't be reached now. */
void agent_session_report_failure(struct agent_session *a, int64_t rank, int64_t local_rank,
                                  int64_t code, int sig, const char *reason);
/* Carry out what a step of the machine decided (agent-session-sm.h), in order; an effect may
 * step it again (a start that failed). */
void agent_session_apply(struct agent_session *a, const struct agent_ready *r);
/* Step the machine with in (its facts filled in from the group here) and carry out its Ready. */
void agent_session_feed(struct agent_session *a, struct agent_input *in);

/* The worker group's assignment for the current generation (strings in a->round). */
void agent_session_round_assignment(const struct agent_session *a, struct agent_assignment *as);
/* agent-session-inplace.c, --recovery inplace: a worker that could not be told the generation has
 * exited: start its replacement in it now (0 or -errno); a ROUND: tell each running worker the
 * new generation and start the missing ranks (agent_group_start_ranks' result). */
int agent_session_replace_late(struct agent_session *a, unsigned local_rank);
int agent_session_round_in_place(struct agent_session *a, const struct agent_assignment *as);
/* --recovery inplace, none running: start every rank that is not done (sm.done). */
int agent_session_start_ranks(struct agent_session *a, const struct agent_assignment *as);

/* agent-session-hosting.c: the client's callbacks for what rdzvd asks the agent to host (ud:
 * the session). NCCL_REQUEST: this generation's NCCL ids (and, asked for, its store), answered
 * with NCCL_ID; REPLICA: start a replica of rdzvd here; REPLICAS: where they run (endpoints to
 * reconnect to). agent_session_replica_send: where a REPLICA's answer goes (the connection of
 * the moment). */
void agent_session_on_nccl_request(struct agent_client *c, const struct rdzv_nccl_request *q,
                                   void *ud);
void agent_session_on_replica(struct agent_client *c, const struct rdzv_replica *q, void *ud);
void agent_session_on_replicas(struct agent_client *c, const struct rdzv_replicas *rs, void *ud);
/* --store-front: a front to the store of the round that just came (the previous one's closed),
 * and the workers' MASTER_ADDR and MASTER_PORT in as made its address. Without a front (none
 * asked, or it could not start: said) as is left as it is. */
void agent_session_front_round(struct agent_session *a, struct agent_assignment *as);
/* The workers' MASTER_ADDR and MASTER_PORT in as made the current front's, if there is one (a
 * worker started late in the generation: agent_session_replace_late). */
void agent_session_front_assign(const struct agent_session *a, struct agent_assignment *as);
/* The front, if any, closed (the session ends, or the next round comes). */
void agent_session_front_close(struct agent_session *a);
/* The client's on_refused: before this agent first joined, host rdzvd where it may
 * (cfg.rehost), as at start. */
bool agent_session_on_refused(struct agent_client *c, void *ud);
void agent_session_replica_send(void *ud, const struct rdzv_replica *ans);

/* agent-session-wait.c: the client's on_wait (ud: the session): while the job waits (for its
 * nodes, a rebuilt generation's nodes, a restart's backoff) for 10 s, a line every 30 s saying
 * what it waits for, how long is left, and what to check. */
void agent_session_on_wait(struct agent_client *c, const struct rdzv_wait *w, void *ud);
