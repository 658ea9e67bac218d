/* SPDX-License-Identifier: Apache-2.0 */
/* agent-options.h: rdzv-agent's command line and environment (RDZV_<OPTION>, RDZV_ID, the
 * scheduler's SLURM_* / OMPI_* / PBS_* variables), parsed into one struct with the rdzv-opt
 * table parser.
 *
 * Ownership: string fields point into argv, the environment or the struct itself (run_id_buf);
 * the struct owns no memory and needs no freeing.
 * Threads: call agent_opts_parse() from main() before the loop runs.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "../common/rdzv-log.h"
#include "../proto/rdzv-msg.h"

struct agent_opts {
    int64_t min_nodes, max_nodes;
    int64_t nproc;           /* 0 until resolved */
    const char *nproc_arg;   /* as given: a number, "gpu" or "auto" (resolved by the caller) */
    const char *endpoint;
    const char *run_id;
    int64_t node_rank;       /* -1: not asked for */
    int64_t max_restarts;
    bool standalone;
    const char *log_dir;
    const char *role;
    double last_call_s;
    double grace_s;
    double connect_timeout_s;
    double heartbeat_s;
    double heartbeat_timeout_s;
    double join_timeout_s;
    bool scale_up_now;
    bool rank_hint;          /* node_rank came from the scheduler's environment */
    enum rdzv_nccl_mode nccl;
    int64_t nccl_ids;
    const char *host;        /* advertised host name */
    bool isolate_gpus;
    enum rdzv_log_level level;
    const char *token_file;  /* prove this secret to rdzvd (--token-file) */
    char **argv;             /* worker command; NULL: none given (the built-in trainer) */
    char run_id_buf[64];     /* --standalone's generated run id */
};

/* Fill *o from the defaults, the scheduler's and RDZV_* environment variables and argv, and
 * check what needs the whole picture (an endpoint or --standalone, a job id, the node rank's
 * range). Returns 0, 1 when the program should exit 0 now (--help, --version), or -EINVAL
 * after printing one line to stderr. */
int agent_opts_parse(struct agent_opts *o, int argc, char **argv);
