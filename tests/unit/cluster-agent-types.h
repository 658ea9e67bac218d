/* SPDX-License-Identifier: Apache-2.0 */
/* cluster-agent-types.h: the cluster simulator's configuration of a seed, its faults, and its
 * agents with their workers (cluster-agent.h drives them). Part of cluster.h. */
#pragma once
#include "agent/session/agent-session-sm.h"

/* A seed's configuration: the job's options and the world's pace. */
struct cs_cfg {
    int nagents, first;       /* agents in all; those started at once (the others join late) */
    int64_t min, max, nproc, max_restarts;
    bool inplace, scale_up_now, follows, state_dir;
    int64_t steps, ckpt_every, step_ms;   /* the training: its steps, checkpoints, pace */
    int64_t progress_timeout_ms;          /* --progress-timeout (0: none) */
    int64_t hb_ms, hb_timeout_ms, last_call_ms, join_timeout_ms, connect_timeout_ms;
    int64_t net_min_ms, net_max_ms;
    int64_t bad_node_failures;
    bool wire; /* messages cross the wire: encoded and decoded (cluster-wire.h) */
    /* rdzvd runs as replicas (with --state-dir: the table replicated): the agents know 3
     * endpoints, and its restart is a change of leader */
    bool replicas;
    char name[320];
};

/* What the trace injects. */
enum cs_fault_kind {
    F_JOIN,      /* agent a starts (a late joiner) */
    F_LOSE,      /* agent a's connection is lost */
    F_PART,      /* agent a's node is cut off for arg ms */
    F_CRASH,     /* agent a's worker arg exits 1 */
    F_KILL,      /* agent a's worker arg is killed (SIGKILL: the OOM killer) */
    F_HANG,      /* agent a's worker arg stops making progress */
    F_SLOW,      /* agent a's workers' steps take 4 times as long from now on */
    F_DONE,      /* agent a's worker arg ends, exit 0 (its script is done early) */
    F_TERM,      /* a step-wide SIGTERM: agent a's workers, and the agent arg ms later */
    F_RESTART,   /* rdzvd goes down for arg ms (its job table kept with --state-dir) */
    F_SICK,      /* agent a's health check fails while its node takes part */
    F_CANCEL,    /* the operator cancels the job (rdzvctl cancel: CANCEL_JOB) */
    F_AKILL,     /* agent a is SIGKILLed: its connection closes, the reaper kills its workers */
    F_SIG,       /* agent a alone receives signal arg (SIGHUP, SIGINT, SIGQUIT, SIGUSR1) */
    F_KINDS,
};

static const char *const cs_fault_names[F_KINDS] = {
    "join", "lose", "part", "crash", "kill", "hang", "slow", "done", "term", "restart", "sick",
    "cancel", "akill", "sig"};

struct cs_fault {
    uint64_t t; /* ms after the world's start */
    enum cs_fault_kind kind;
    int a, arg;
};

/* A simulated worker process: the generation it is in, its step, and what the agent's control
 * channel told it (want: a generation to re-form in, in place). */
struct cs_worker {
    bool alive, exiting, hung, follows;
    uint64_t gen, want, life; /* life: which of the rank's processes (an exit names it) */
    int64_t step, last_prog;
    int64_t rank, want_rank; /* in gen; in want */
    bool stepped; /* made a step in its generation */
    bool hung_told;  /* the group said it was silent (once, until it is kept in place) */
    int64_t kept_at; /* kept running by an in-place start then: its progress timed afresh */
};

/* An agent: its session machine, its connection, its workers. */
struct cs_agent {
    bool started, done;
    struct agent_sm sm;
    bool failed[CS_NPROC], late[CS_NPROC], rank_running[CS_NPROC];
    bool rdone[CS_NPROC]; /* the machine's done[]: a rank whose script ended (A3a) */
    struct cs_worker w[CS_NPROC];
    int conn;             /* -1: none */
    bool joined;          /* its connection's JOINED came */
    uint64_t connect_began; /* a connection attempt began then (0: none under way) */
    bool connecting;
    struct rdzv_join join; /* its JOIN, with the secret and incarnations rdzvd gave it */
    uint64_t incarnation;  /* of the rdzvd that JOINED it last */
    unsigned run;          /* the job's run it JOINED last (cs_key) */
    uint64_t timer_token[AGENT_TIMERS];
    bool pending_exit;
    struct rdzv_worker_exit pexit;
    uint64_t last_heard;  /* the last message from rdzvd */
    int64_t slow;         /* its step time's factor */
    uint64_t started_ms;
    int exit_code;
    char outcome[16];     /* the outcome's type its machine ended with */
    char summary[RDZV_SUMMARY_MAX + 1];
    uint64_t done_at;
    uint64_t left_key; /* the generation (cs_key) it sent LEAVE of, its workers all done */
    unsigned renewed;  /* its node id renewed this many times (agent-identity.h) */
    unsigned group;    /* its group of workers: a start not in place makes a new one */
    bool sick;         /* its health checks fail from now on (F_SICK) */
    bool checking;     /* a health check runs (another is not started: -EBUSY) */
    bool renewing;     /* the refusal it was told last is answered by a new node id */
    uint64_t stale_since; /* lost by rdzvd, its workers train beside a newer generation since */
};
