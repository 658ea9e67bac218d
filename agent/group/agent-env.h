/* SPDX-License-Identifier: Apache-2.0 */
/* agent-env.h: the environment of one worker, as torchrun's LocalElasticAgent gives it: the
 * agent's whole environment, minus the variables set here, plus
 *   RANK = rank of the node's first worker + LOCAL_RANK     ROLE_RANK = RANK (one role)
 *   LOCAL_RANK 0..nproc-1, LOCAL_WORLD_SIZE = nproc          ROLE_WORLD_SIZE = WORLD_SIZE
 *   WORLD_SIZE, GROUP_RANK (node rank), GROUP_WORLD_SIZE     ROLE_NAME (default "default")
 *   MASTER_ADDR, MASTER_PORT: the generation's store        TORCHELASTIC_USE_AGENT_STORE=True
 *   TORCHELASTIC_RESTART_COUNT, _MAX_RESTARTS, _RUN_ID
 *   TORCHELASTIC_ERROR_FILE: the worker's error file; "" when there is none (torchrun's value
 *     when logs go to /dev/null)
 *   TORCHELASTIC_SIGNALS_TO_HANDLE: --signals-to-handle when given, else as inherited
 *   TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING: inherited value, else 1
 *   OMP_NUM_THREADS: inherited value, else 1 when nproc > 1 (torchrun warns and sets it)
 *   CUDA_VISIBLE_DEVICES passed through (or one device per worker with --isolate-gpus)
 *   PYTHON_EXEC, TORCHELASTIC_TIMER_FILE and everything else: passed through, as torchrun does
 * and rdzv's own RDZV_GENERATION, RDZV_NCCL_UNIQUE_ID, RDZV_ENDPOINT, RDZV_AGENT_TOKEN,
 * RDZV_PROGRESS_FD (an inherited one, an agent's above ours, is dropped), and PYTHONPATH as
 * inherited, after the Python hooks' directory (python_hooks) when there is one. A pure
 * function of its inputs: no global state (the inherited environment is a parameter, never environ
 * or getenv()), no I/O, no logging.
 *
 * Ownership: a struct agent_env owns the strings it adds and its array; inherited entries are
 * borrowed from the array given to agent_env_init(), which must not change until agent_env_free().
 * Errors: negative errno (-ENOMEM). Threads: any, one agent_env per thread. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct agent_assignment;

/* Everything that makes one worker's variables. Strings are borrowed for the call. */
struct agent_env_in {
    const struct agent_assignment *a; /* the round: ranks, sizes, store, generation, NCCL id */
    unsigned local_rank;              /* LOCAL_RANK; RANK = a->rank_offset + local_rank */
    unsigned nproc;                   /* LOCAL_WORLD_SIZE */
    unsigned max_restarts;            /* TORCHELASTIC_MAX_RESTARTS */
    const char *role;                 /* ROLE_NAME */
    const char *run_id;               /* TORCHELASTIC_RUN_ID */
    const char *error_file;           /* TORCHELASTIC_ERROR_FILE; NULL: "" (no error file) */
    const char *signals_to_handle;    /* TORCHELASTIC_SIGNALS_TO_HANDLE; NULL: as inherited */
    int progress_fd;                  /* RDZV_PROGRESS_FD, or 0: unset (never inherited); with an
                                       * error file, RDZV_STACKS_FILE (agent_env_stacks_file) and
                                       * RDZV_STACKS_SIGNAL (stacks_signal) are set too */
    int stacks_signal;
    uint64_t progress_wait_ms;        /* RDZV_PROGRESS_WAIT_MS, or 0: unset (never inherited) */
    int control_fd;                   /* RDZV_CONTROL_FD, or 0: unset (never inherited) */
    const char *token;                /* appended to an inherited RDZV_AGENT_TOKEN after a comma */
    const char *endpoint;             /* RDZV_ENDPOINT, or NULL: not set */
    const char *device;               /* CUDA_VISIBLE_DEVICES, or NULL: as inherited; only with
                                       * set_devices given to agent_env_init() */
    const char *python_hooks;         /* first on PYTHONPATH (its sitecustomize.py instruments a
                                       * Python worker, python/rdzv/hooks), or NULL: none */
};

struct agent_env {
    char **v; /* NULL-terminated, as uv_spawn() and execve() take it */
    size_t n, cap, n_borrowed;
    char *const *inherit;
};

/* Start from inherit (NULL-terminated; may be NULL: empty), dropping every variable that
 * agent_env_set() sets, and CUDA_VISIBLE_DEVICES too when set_devices. Returns 0 or -ENOMEM;
 * *e must be zeroed or freed before. */
int agent_env_init(struct agent_env *e, char *const *inherit, bool set_devices);

/* Make e->v the environment of one worker: the inherited part plus in's variables (those of a
 * previous call are replaced). Inherited values are read from the array given to init:
 * TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING keep theirs (else "1"),
 * OMP_NUM_THREADS keeps its value, or is "1" when unset and nproc > 1 (torchrun's rule), else
 * stays unset. Returns 0 or -ENOMEM (then e holds the inherited part only). */
int agent_env_set(struct agent_env *e, const struct agent_env_in *in);

/* Free what e owns; e may be zeroed or already freed. */
void agent_env_free(struct agent_env *e);

/* The value of name in env (NULL-terminated, may be NULL), or NULL: getenv() on an array. */
const char *agent_env_get(char *const *env, const char *name);

/* The control line (train/INPLACE.md, version 1) that tells a running worker of local rank
 * local_rank the generation of a: {"op":"generation","generation":G,"rank":R,"world_size":W,
 * "local_rank":L,"master_addr":"A","master_port":P,"nccl_id":"<hex>"|null,"restart_count":C}
 * into buf (NUL-terminated, no newline: agent_group_control_send() adds it). The same fields as
 * the worker environment of a start for a. Returns its length, -EINVAL when master_addr or the
 * NCCL id holds a character that would need escaping ('"', '\\', control characters) or the
 * rank is out of a's world, -ENOSPC when buf is too small (AGENT_ENV_CONTROL_LINE_MAX is
 * enough for a 256-digit id and a 255-byte address). Pure. */
#define AGENT_ENV_CONTROL_LINE_MAX 1024
/* The file a worker dumps its stacks into (RDZV_STACKS_FILE) beside its error file:
 * ".../error.json" -> ".../stacks.txt", "X.error.json" -> "X.stacks.txt", else "X.stacks.txt".
 * 0 or -ENAMETOOLONG. */
int agent_env_stacks_file(const char *error_file, char *buf, size_t len);

int agent_env_control_line(const struct agent_assignment *a, unsigned local_rank, char *buf,
                           size_t len);
