/* SPDX-License-Identifier: Apache-2.0 */
/* train-alive.h: "wait" lines on the progress channel (RDZV_PROGRESS_FD) while the training
 * thread is blocked on its peers (train/INPLACE.md). When one rank hangs, the others
 * stop making progress too, blocked in a collective on it; the agent fails a worker that says
 * "wait" only when those lines stop as well. So the rank that hangs is the one failed, not the
 * first of its victims to time out.
 *
 * A thread of its own: the training thread marks the spans in which it waits for its peers
 * (train_alive_block / _unblock: a mutex and, on block, a condition signal; no system call);
 * the thread writes "wait\n" once a span has lasted every_ms, and again every every_ms while it
 * lasts. A span shorter than every_ms writes nothing, so a healthy job's steps cost no writes.
 * A stopped or dead process writes nothing: that is the point. */
#pragma once
#include <stdint.h>

struct train_alive;

/* Start the thread for progress descriptor fd (borrowed: it must stay open until
 * train_alive_free) and period every_ms (> 0). 0, -ENOMEM, or pthread_create's -errno. */
int train_alive_new(int fd, uint64_t every_ms, struct train_alive **ret);

/* Training thread only. NULL a is a no-op. Spans do not nest. */
void train_alive_block(struct train_alive *a);
void train_alive_unblock(struct train_alive *a);

/* Stop and join the thread, free a. NULL is a no-op. */
void train_alive_free(struct train_alive *a);
