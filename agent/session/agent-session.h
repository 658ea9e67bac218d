/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session.h: the agent's rendezvous session with rdzvd (RENDEZVOUS.md): JOIN through
 * agent-client, ROUND -> start the workers, NCCL ids on request, heartbeats, a failed worker ->
 * WORKER_EXIT, EVENT restart -> stop the workers and READY, LEAVE once they all exited 0, the
 * job's outcome, and reconnecting with "resume" after losing the daemon. One state machine;
 * transitions are logged at debug.
 *
 * Everything here runs on the loop thread (libuv callbacks and main()). The session owns its
 * agent-client and NCCL root holder; it borrows the worker group and every string in its cfg,
 * which must outlive it. When the job is over it stops the loop (uv_stop). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-log.h"

#include "proto/rdzv-msg.h"
#include "agent/session/agent-health.h"

struct agent_host_cfg;

struct agent_endpoints;
struct agent_group;
struct agent_session;
struct rdzv_token;

struct agent_stall;

struct agent_session_cfg {
    uv_loop_t *loop;
    const struct agent_endpoints *eps; /* rdzvd's endpoints (replicas: several) */
    const struct rdzv_token *token; /* --token-file, or NULL */
    const char *run_id;             /* for logs */
    const char *run_id_flag;        /* how the user named it ("--rdzv_id"), or NULL */
    const char *host;               /* this node's name, in logs and WORKER_EXIT */
    const char *self_exe;           /* runs the NCCL root holder (rdzv-agent --nccl-root) */
    int64_t nproc;                  /* local workers */
    enum rdzv_nccl_mode nccl;
    double connect_timeout_s;       /* keep trying to reach rdzvd this long */
    double heartbeat_s;             /* HEARTBEAT period */
    double heartbeat_timeout_s;     /* rdzvd silent this long: the connection is lost */
    double grace_s;                 /* TERM -> KILL, for the log line on a signal */
    bool inplace;                   /* --recovery inplace: a failure keeps the healthy workers */
    bool embedded;                  /* --standalone: rdzvd runs in this process (no reconnect,
                                     * no per-generation log context) */
    const char *token_file;         /* for a replica this agent hosts (REPLICA), or NULL */
    const char *replica_key_file;   /* the same, the replicas' own key, or NULL */
    const char *log_dir;            /* --log-dir: hosted replicas log there, or NULL */
    enum rdzv_log_level level;      /* and its log level */
    /* The node's health checks (agent-health.h; health.loop is set here): run before the JOIN,
     * before the READY that follows a failure of this node's own workers, and every
     * health_interval_s (0: never) while it takes part (agent-health.h: the RDMA ports are
     * always checked, the rest as configured). */
    struct agent_health_cfg health;
    double health_interval_s;
    /* Where this agent may host rdzvd (agent-host.h; copied), or NULL: until it first joins,
     * a refused connection there makes it try (the rdzvd that answered at start has exited). */
    const struct agent_host_cfg *rehost;
    bool store_front; /* --store-front: the workers reach the store through this agent */
    const struct agent_stall *stall; /* the loop's longest stall, for HEARTBEATs; NULL: none */
};

/* A session that has not started (cfg is copied; its strings are borrowed). Returns 0 or
 * -ENOMEM. */
int agent_session_new(const struct agent_session_cfg *cfg, struct agent_session **ret);

/* The worker group's callbacks (agent_group_cfg.on_exit / on_output_closed / on_all_exited, with
 * ud the session). */
void agent_session_group_exit(struct agent_group *g, unsigned local_rank, int64_t status, int sig,
                              void *ud);
void agent_session_group_output_closed(struct agent_group *g, unsigned local_rank,
                                       int64_t status, int sig, void *ud);
void agent_session_group_all_exited(struct agent_group *g, void *ud);
/* The group's on_step (a worker reported a step): a generation's first goes to rdzvd at once. */
void agent_session_group_step(struct agent_group *g, unsigned local_rank, void *ud);
/* The group's on_hang (--progress-timeout): fail that worker as if it had crashed (SIGKILL its
 * process group, report it to rdzvd with the reason as root cause, stop the others). */
void agent_session_group_hang(struct agent_group *g, unsigned local_rank, bool reported,
                              uint64_t last_step, uint64_t silent_ms, void *ud);

/* Start heartbeats and connect to rdzvd with JOIN j (copied); g runs the workers. Returns 0 or a
 * negative errno (the connection could not be started). */
int agent_session_start(struct agent_session *s, struct agent_group *g,
                        const struct rdzv_join *j);

/* The agent received signum (a uv_signal_t callback forwards it): USR1/USR2 go to the workers;
 * the others stop them and end the job with exit code 128 + signum. */
void agent_session_signal(struct agent_session *s, int signum);

/* main()'s exit status once the loop returned: 0, the failed worker's code, or 128 + signal. */
int agent_session_exit_code(const struct agent_session *s);
/* Why the job ended for this agent (its outcome's summary; "" when none). */
const char *agent_session_outcome(const struct agent_session *s);
/* Whether rdzvd put this node aside (EVENT put_aside, or a JOIN refused as put aside), or a
 * health check failed here: what --on-bad-node acts on, never the exit code alone. */
bool agent_session_put_aside(const struct agent_session *s);

/* After the loop stopped: close the client and the NCCL root holder (asynchronous; run the loop
 * again before agent_session_free). The heartbeat timer is left to the caller's uv_walk. */
void agent_session_stop(struct agent_session *s);

/* Free s (NULL is fine) once its handles are closed. Returns NULL. */
struct agent_session *agent_session_free(struct agent_session *s);
