/* SPDX-License-Identifier: Apache-2.0 */
/* agent-nccl.h: NCCL unique ids for a generation. ncclGetUniqueId() starts a bootstrap root that
 * must live until every rank has joined, so the ids are made in a small child process (the agent
 * binary run as `rdzv-agent --nccl-root N`) that holds them: libnccl is never loaded into the agent
 * itself, and a generation's root is killed when the next one starts, never leaked.
 *
 * Ownership: a root holder belongs to its caller from agent_nccl_root_start() until
 * agent_nccl_root_stop(), which releases it (asynchronously, in close callbacks). Errors: negative
 * errno. Threads: the loop's thread only: from the caller's code or its libuv callbacks; cb runs
 * from the loop and may call agent_nccl_root_stop(). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "proto/rdzv-msg.h"

struct agent_nccl_root;

/* Fires once: err 0 and n ids, or a negative errno and msg saying why (-ENOENT: no libnccl). */
typedef void (*agent_nccl_cb)(struct agent_nccl_root *r, int err, unsigned n,
                              char (*ids)[RDZV_NCCL_HEX_LEN + 1], const char *msg, void *ud);

/* Start a root holder for count ids. Returns 0 (cb fires later, from the loop) or a negative
 * errno (-ENOMEM, a uv_pipe_init() or uv_spawn() error): then cb never fires, *ret is untouched,
 * and what was made is released by close callbacks on the next loop iteration. */
int agent_nccl_root_start(uv_loop_t *loop, const char *self_exe, unsigned count, agent_nccl_cb cb,
                          void *ud, struct agent_nccl_root **ret);

/* Stop the holder (its roots die with it) and release it; no callback fires after this. With
 * now, the process handle is closed at once (the agent is exiting: nothing will reap the child
 * later anyway); otherwise it is released after the child's exit is seen, leaving no zombie. */
void agent_nccl_root_stop(struct agent_nccl_root *r, bool now);

/* The child's main(): make argv[2] ids, print them, hold them until standard input closes. */
int agent_nccl_root_main(int argc, char **argv);
