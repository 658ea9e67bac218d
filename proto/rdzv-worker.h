/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-worker.h: the two line protocols between rdzv-agent and each worker it starts, one
 * codec for both ends (the agent, rdzv-train; python/rdzv mirrors it). Format: proto/WORKER.md.
 *
 *   progress channel (worker -> agent, RDZV_PROGRESS_FD): "step N\n" after each step (or
 *     "step N compute_ms M\n", with its compute time), "wait\n"
 *     while blocked on the peers (alive), "stacks\n" once: it dumps its threads' stacks into
 *     RDZV_STACKS_FILE on signal RDZV_STACKS_SIGNAL; "slow N\n" before a step that may take up
 *     to N seconds; "done\n" once its work is over and it is exiting (no longer watched);
 *     "control\n" once: it follows the control channel (recovery in place); "error TEXT\n"
 *     before it dies of an error (rdzv-agent's Python hooks: an uncaught exception and where);
 *   control channel (agent -> worker, RDZV_CONTROL_FD, recovery in place): one JSON object per
 *     line, {"op":"generation",...}: the worker's rank, world and store in a new generation.
 *
 * Pure functions: no I/O, no allocation kept, any thread. Errors: negative errno. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"

/* A line and its newline never exceed PIPE_BUF, so that a write of one is atomic on a pipe. */
#define RDZV_WORKER_LINE_MAX 4096
/* A progress line longer than this (newline excluded) is not one; the reader skips it. */
#define RDZV_PROGRESS_LINE_MAX 63
/* An error line's text: 1 to this many bytes, no control character; the line "error TEXT" may so
 * be longer than RDZV_PROGRESS_LINE_MAX, up to RDZV_PROGRESS_ERROR_LINE_MAX. */
#define RDZV_PROGRESS_ERROR_MAX 255
#define RDZV_PROGRESS_ERROR_LINE_MAX (6 + RDZV_PROGRESS_ERROR_MAX)

/* ---- progress channel ---- */

enum rdzv_progress_kind {
    RDZV_PROGRESS_STEP, /* "step N": step N is done */
    RDZV_PROGRESS_WAIT, /* "wait": alive, blocked on its peers since its last step */
    RDZV_PROGRESS_STACKS, /* "stacks": dumps its stacks on RDZV_STACKS_SIGNAL (a hang's culprit) */
    RDZV_PROGRESS_SLOW,   /* "slow N": the step under way may take up to N seconds (an
                           * evaluation, a checkpoint): not a hang until then */
    RDZV_PROGRESS_DONE,   /* "done": its work is over and it is exiting (an interpreter's
                           * shutdown may take a while): its progress is no longer watched, and
                           * it no longer dumps its stacks on the signal (whose default action
                           * would end it) */
    RDZV_PROGRESS_CONTROL, /* "control": it follows the control channel (a new generation there
                            * re-forms it in place); a worker that never says it is restarted
                            * with its generation under --recovery inplace */
    RDZV_PROGRESS_ERROR,   /* "error TEXT": it dies of this error ("RuntimeError: boom
                            * (train.py:42)"), said before it exits: the root cause's words */
};

#define RDZV_PROGRESS_SLOW_MAX 604800 /* a week, in seconds */

struct rdzv_progress_line {
    enum rdzv_progress_kind kind;
    uint64_t step; /* STEP: the step; SLOW: the seconds, 1..RDZV_PROGRESS_SLOW_MAX */
    bool has_compute;    /* STEP: the line said its compute time */
    uint32_t compute_ms; /* STEP: the time the rank spent not waiting on the step's
                          * collectives, 0..RDZV_COMPUTE_MS_MAX */
    const char *text;    /* ERROR: its text (in the parsed line, not NUL-terminated) */
    size_t text_len;     /* ERROR: 1..RDZV_PROGRESS_ERROR_MAX bytes */
};

/* p as a line with its newline in buf (NUL-terminated). The length, or -ENOSPC, -EINVAL (kind). */
int rdzv_progress_format(const struct rdzv_progress_line *p, char *buf, size_t len);
/* The n bytes of one line (no newline) into *p: 0, or -EINVAL when it is neither form. A step
 * line may carry its compute time, "step N compute_ms M"; without it has_compute is false. An
 * error line's text is refused when empty, too long or holding a control character. */
int rdzv_progress_parse(const char *line, size_t n, struct rdzv_progress_line *p);

/* ---- control channel ---- */

/* One generation as the agent tells a worker. */
struct rdzv_worker_gen {
    uint64_t generation;
    unsigned rank, world, local_rank;
    char master_addr[RDZV_HOST_MAX + 1];
    uint16_t master_port;
    char nccl_id[RDZV_NCCL_HEX_LEN + 1]; /* "" when none */
    unsigned restart_count;
};

/* g as one control line, without its newline, in buf (NUL-terminated). The length; -EINVAL when
 * rank >= world, or a string would need escaping (a quote, a backslash or a control character:
 * the agent never has such a host or id); -ENOSPC when buf is too small. */
int rdzv_worker_gen_format(const struct rdzv_worker_gen *g, char *buf, size_t len);
/* Parse one control line (NUL-terminated, no newline). 1 for a generation (*g filled), 0 for a
 * line to ignore (another "op", for later versions), -EINVAL for a malformed one. */
int rdzv_worker_gen_parse(const char *line, struct rdzv_worker_gen *g);
