/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options.h: rdzv-agent's command line and environment (RDZV_<OPTION>, torchrun's
 * PET_<OPTION>, RDZV_ID, PYTHON_EXEC, the scheduler's SLURM_* / OMPI_* / PBS_* variables), parsed
 * into one struct with the rdzv-opt table parser; torchrun's and torch.distributed.launch's
 * options with their meaning (the backend, the command's form, who may host rdzvd).
 *
 * Ownership: string fields point into argv, the environment or the struct itself (run_id_buf);
 * the struct owns no memory and needs no freeing.
 * Threads: call agent_opts_parse() from main() before the loop runs.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/rdzv-log.h"
#include "common/rdzv-opt.h"
#include "proto/rdzv-msg.h"
#include "agent/group/agent-cmd.h"

/* Where the rendezvous daemon comes from. */
enum agent_backend {
    AGENT_BACKEND_C10D,   /* rdzvd at --endpoint; with --rdzv-backend c10d given, hosted by an
                           * agent when nothing answers there (agent-host.h) */
    AGENT_BACKEND_STATIC, /* torchrun's static: node rank 0 hosts rdzvd at master addr:port,
                           * the world fixed at --nnodes */
    AGENT_BACKEND_STANDALONE, /* --standalone: an embedded rdzvd on a free loopback port */
};

/* Options checked after the parse, on the value given last (agent-options.c, defer_cb). */
enum agent_deferred {
    D_NNODES, D_NPROC, D_BACKEND, D_RUN_ID, D_CONF, D_REDIRECTS, D_TEE, D_MAX_RESTARTS,
    D_NODE_RANK, D_MASTER_PORT, AGENT_OPTS_DEFERRED
};

/* The options (besides the deferred ones) a later message names, kept as the user named them
 * (agent_opts.typed). */
enum { AGENT_TYPED_ENDPOINT, AGENT_TYPED_RDZV_ENDPOINT, AGENT_TYPED_MASTER_ADDR, AGENT_TYPED_N };

struct agent_opts {
    int64_t min_nodes, max_nodes;
    int64_t nproc;           /* 0 until resolved */
    const char *nproc_arg;   /* as given: a number, "gpu", "cpu" or "auto" (resolved later) */
    const char *endpoint;    /* rdzv's --endpoint: rdzvd started by hand (c10d) */
    const char *rdzv_endpoint; /* torchrun's --rdzv-endpoint: static without a backend */
    const char *run_id;
    int64_t node_rank;       /* -1: not asked for */
    int64_t max_restarts;
    int64_t bad_node_failures; /* --bad-node-failures: JOIN's bad_node_failures */
    int64_t bad_node_window_s; /* --bad-node-window: JOIN's bad_node_window (0: none) */
    int64_t restart_backoff_s; /* --restart-backoff: JOIN's restart_backoff (0: none) */
    /* --health-check CMD, --health-timeout, --health-interval (0: off), --health-path DIR,
     * --health-nic LIST (agent-health.h) */
    const char *health_check, *health_path, *health_nic;
    double health_timeout_s, health_interval_s;
    bool on_bad_node_drain; /* --on-bad-node drain (agent-drain.h) */
    /* --straggler-factor (0: off), --straggler-window, --on-straggler aside: JOIN's straggler */
    double straggler_factor, straggler_window_s;
    bool on_straggler_aside;
    /* --preflight net, --preflight-fraction: JOIN's preflight (agent-client-pf.c) */
    bool preflight_net;
    double preflight_fraction;
    bool standalone;
    /* The endpoint's port is 0 (torchrun: the agent hosts the store on a free port, as
     * torchtitan's --rdzv_endpoint localhost:0): one node, an embedded rdzvd as --standalone's,
     * the given run id kept */
    bool free_port;
    const char *log_dir;
    const char *role;
    double last_call_s;
    double grace_s;
    double connect_timeout_s;
    double heartbeat_s;
    double heartbeat_timeout_s;
    double join_timeout_s;
    double progress_timeout_s; /* 0: off. A worker silent this long after a report is failed;
                                * with progress_auto, the floor of each worker's own timeout */
    bool progress_auto;        /* --progress-timeout auto[:FLOOR] */
    double progress_grace_s;   /* 0: off. Also fail a worker that never reported this long */
    bool scale_up_now;
    bool any_command; /* --any-command: JOIN sends no fingerprint of the command */
    bool recovery_inplace;   /* --recovery inplace: survivors keep running after a failure */
    bool warm_workers;       /* --warm-workers: a standby interpreter per local rank */
    bool python_hooks_off;   /* --python-hooks off: nothing on a Python worker's PYTHONPATH */
    bool rank_hint;          /* node_rank came from the scheduler's environment */
    enum rdzv_nccl_mode nccl;
    int64_t nccl_ids;
    const char *host;        /* advertised host name */
    bool isolate_gpus;
    bool store_front;        /* --store-front: the workers' store connections end here */
    bool no_cgroup;          /* --no-cgroup: workers in no cgroup of ours, the token scan alone */
    enum rdzv_log_level level;
    const char *token_file;  /* prove this secret to rdzvd (--token-file) */
    const char *replica_key_file; /* for the replicas of rdzvd it hosts (--replica-key-file) */
    char **argv;             /* worker command; NULL: none given (the built-in trainer) */
    bool raw_cmd;            /* argv came after "--": run as given (rdzv's own meaning) */

    /* torchrun's and torch.distributed.launch's options (docs/guide/from-torchrun.md) */
    enum agent_backend backend;
    bool backend_given;      /* --rdzv-backend on the command line or PET_/RDZV_ env */
    int is_host;             /* --rdzv-conf is_host: -1 unset, 0, 1 */
    /* --rdzv-conf replicas=1|3|5: the rdzvd this agent hosts grows to that many replicas, on as
     * many hosts of the job (rdzvd --replicas). 0 unset: 3 for c10d with 3 or more nodes, else
     * 1. */
    int replicas;
    bool module, no_python, run_path, use_env;
    enum agent_local_rank_arg pass_local_rank;
    const char *python_exec; /* $PYTHON_EXEC, or NULL (python3 from PATH) */
    const char *redirects, *tee, *local_ranks_filter;
    const char *local_addr;
    const char *master_addr;
    int64_t master_port;     /* -1: not given */
    int64_t metrics_port;    /* --metrics-port: the status page of the rdzvd it runs; -1: none */
    /* --metrics-bind: the address that page is served on (an IPv4 or IPv6 address; NULL:
     * 127.0.0.1, this host only) */
    const char *metrics_bind;
    const char *signals_to_handle;
    double monitor_interval_s;
    const char *start_method, *event_log_handler, *logs_specs, *numa_binding;
    bool virtual_local_rank;
    bool print_launch;       /* --print-launch: print the resolved launch as JSON, run nothing */
    /* Whether this agent may start rdzvd at the endpoint when nothing answers there
     * (agent-host.h): static on node rank 0, c10d with --rdzv-backend given (or is_host=1). */
    bool may_host;
    bool must_host;          /* static node rank 0 or is_host=1: host without a bind check */
    char endpoint_buf[300];  /* static: master addr:port */
    /* How the user named the options that later messages name ("" when not given), the option
     * being read (the parser's errors), and what names the endpoint and the run id in messages,
     * as typed: "--master_addr/--master_port", "--rdzv_endpoint", "RDZV_ENDPOINT", "--rdzv_id"
     * (rdzv's own names when none was given). */
    char typed[AGENT_TYPED_N][RDZV_OPT_TYPED_MAX];
    char deferred_typed[AGENT_OPTS_DEFERRED][RDZV_OPT_TYPED_MAX]; /* of deferred[] */
    char spelled[RDZV_OPT_TYPED_MAX];
    char endpoint_flag[2 * RDZV_OPT_TYPED_MAX + 2];
    const char *run_id_flag;
    char run_id_buf[64];     /* --standalone's generated run id */
    const char *deferred[AGENT_OPTS_DEFERRED]; /* the value given last, checked after */
};

#define AGENT_PROGRESS_AUTO_FLOOR_S 60.0 /* --progress-timeout auto's floor by default */
#define AGENT_BAD_NODE_FAILURES 2 /* --bad-node-failures by default */
#define AGENT_BAD_NODE_WINDOW_S 3600 /* --bad-node-window by default */
#define AGENT_RESTART_BACKOFF_S 30 /* --restart-backoff by default */
#define AGENT_STRAGGLER_FACTOR 1.3    /* --straggler-factor by default */
#define AGENT_STRAGGLER_WINDOW_S 30.0 /* --straggler-window by default */
#define AGENT_HEALTH_TIMEOUT_S 30.0  /* --health-timeout by default */
#define AGENT_HEALTH_INTERVAL_S 60.0 /* --health-interval by default */
#define AGENT_DRAIN_TIMEOUT_S 20.0    /* --on-bad-node drain: scontrol/pbsnodes at most this long */

/* Fill *o from the defaults, the scheduler's and RDZV_* / PET_* environment variables and argv, and
 * check what needs the whole picture (an endpoint or --standalone, a job id, the node rank's
 * range). Returns 0, 1 when the program should exit 0 now (--help, --version), or -EINVAL
 * after printing one line to stderr. */
int agent_opts_parse(struct agent_opts *o, int argc, char **argv);

struct rdzv_opt_prog;
/* agent-options-torchrun.c, for agent_opts_parse. agent_opts_torchrun: torchrun's reading of
 * what was given (the backend, the command, the hosting role); 0 or -EINVAL (printed).
 * agent_opts_port_is_zero: is ep one HOST:0 (not a list of replicas)? agent_opts_name_flags: the
 * endpoint's and the run id's names in messages, as the user named them. */
int agent_opts_torchrun(struct agent_opts *o, int argc, char **argv, int first_arg);
bool agent_opts_port_is_zero(const char *ep);
void agent_opts_name_flags(struct agent_opts *o);

struct rdzv_opt;
/* agent-options-conf.c. agent_conf_bool: 1 (1, true, t, yes, y), 0 (0, false, f, no, n; any
 * case) or -1, as torchrun reads booleans. agent_rdzv_conf_cb: torchrun's --rdzv-conf
 * k1=v1,k2=v2 onto the options p->ud points to (a struct agent_opts); 0, or -EINVAL after
 * saying which entry is wrong (rdzv_opt_bad). */
int agent_conf_bool(const char *v);
/* --python-hooks on|off (or a boolean as agent_conf_bool reads it: RDZV_PYTHON_HOOKS=0): the
 * bool opt->dest points to is whether they are off. 0, or -EINVAL (rdzv_opt_bad). */
int agent_off_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt, const char *val);
int agent_rdzv_conf_cb(const struct rdzv_opt_prog *p, const struct rdzv_opt *opt,
                       const char *val);

/* --print-launch: write the resolved launch to f as one JSON object on one line:
 *   {"nnodes_min", "nnodes_max", "nproc", "backend": "c10d"|"static", "standalone",
 *    "endpoint": "HOST:PORT" (standalone: "127.0.0.1:0", any free port; HOST:0 as given; the
 *    replicas of a replicated rdzvd: "HOST:PORT,HOST:PORT,..."), "run_id",
 *    "node_rank" (null: given by the order of arrival), "node_rank_hint" (from the scheduler),
 *    "max_restarts", "raw_cmd" (rdzv's "-- COMMAND" form), "argv": the worker's command exactly
 *    as it is executed (local rank 0's)}
 * endpoint: the endpoint(s) as parsed (port default applied), ignored when standalone.
 * Returns 0 or -EIO. */
int agent_opts_print_launch(const struct agent_opts *o, const char *endpoint, char *const *argv,
                            FILE *f);
