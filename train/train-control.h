/* SPDX-License-Identifier: Apache-2.0 */
/* train-control.h: rdzv-train's end of the agent's control channel (RDZV_CONTROL_FD, recovery in
 * place; the line and its parser are proto/rdzv-worker.h's, proto/WORKER.md): a watcher thread
 * reads one JSON object per line and keeps the newest generation; the training thread asks for it
 * between steps and after a failed collective. On a new generation the watcher interrupts the
 * current collective through the communicator's interrupt op, when it has one (NCCL:
 * ncclCommAbort), so that a step blocked on a dead peer returns.
 *
 * Ownership: the caller owns the struct from train_control_start() to train_control_free(); the
 * watcher thread only reads the channel and writes the struct under its mutex. Errors: negative
 * errno. Threads: every function is called from the training thread; the interrupt op runs on
 * the watcher thread, under the mutex that train_control_set_comm() takes. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "../proto/rdzv-worker.h"
#include "train-comm.h"

struct train_control;

/* Start watching fd (blocking reads on a thread of its own). generation: the one the process
 * started with (RDZV_GENERATION); only newer ones count. 0, -ENOMEM, or pthread_create's. */
int train_control_start(int fd, uint64_t generation, struct train_control **ret);

/* The communicator a new generation interrupts (NULL: none). Takes the mutex: after it returns
 * with NULL, the watcher no longer touches the previous one, which may be destroyed. */
void train_control_set_comm(struct train_control *c, struct train_comm *comm);

/* Whether a generation newer than after has come. */
bool train_control_pending(struct train_control *c, uint64_t after);

/* Wait up to timeout_ms for a generation newer than after: 0 (*g the newest), -ETIMEDOUT, or
 * -EPIPE when the channel ended first (the agent is gone). */
int train_control_wait(struct train_control *c, uint64_t after, uint64_t timeout_ms,
                       struct rdzv_worker_gen *g);

/* A descriptor that is readable while a generation newer than the one train_control_wait() last
 * returned (or the start's) has come: the store client's cancel descriptor
 * (rdzv_store_client_connect_cancel), so that forming a communicator on a store the job has
 * left ends at once. Owned by c; -1 for NULL. */
int train_control_cancel_fd(const struct train_control *c);

/* Stop the watcher (cancelled in its read) and free. NULL is a no-op. */
void train_control_free(struct train_control *c);
