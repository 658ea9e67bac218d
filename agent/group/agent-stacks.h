/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stacks.h: where a hung worker is stuck, asked for before it is killed.
 *
 *   - A worker that announced "stacks" on its progress channel (python/rdzv does, with
 *     faulthandler) is sent AGENT_STACKS_SIGNAL (when it is stopped, SIGCONT after it: it is
 *     about to be failed, and its culprit ends ", stopped (SIGSTOP)") and dumps every thread's
 *     Python stack into its RDZV_STACKS_FILE (appending); the agent reads what was appended once
 *     the file has been quiet for AGENT_STACKS_SETTLE_MS (inotify through uv_fs_event, not
 *     polling), or after AGENT_STACKS_WAIT_MS. The main thread is the last one faulthandler
 *     lists; its innermost frame names the culprit: "all_reduce (train.py:57)".
 *   - Otherwise (a native worker, or a Python one that wrote nothing: its handler could not
 *     run, or a tracer holds it stopped), its threads are read from /proc/PID/task (name,
 *     state, kernel wait channel), and with gdb installed, `gdb -batch -p PID -ex "thread apply
 *     all bt"` (at most AGENT_STACKS_GDB_MS): the culprit is the innermost frame of thread 1
 *     ("clock_nanosleep", "ncclAllReduce (enqueue.cc:123)"), else the main thread's kernel wait
 *     channel, or "stopped (SIGSTOP)" for a stopped process (gdb is not run on one: it would
 *     wait for it).
 *
 * Ownership: the caller's until done fires (then it frees itself); agent_stacks_cancel() before
 * that: done never fires. Threads: the loop's. Errors: negative errno. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_STACKS_SIGNAL_OFFSET 2 /* the signal: SIGRTMIN + 2 (never SIGUSR1/2: Slurm's) */
#define AGENT_STACKS_WAIT_MS 2000    /* for a Python worker's dump */
#define AGENT_STACKS_SETTLE_MS 100   /* the dump file quiet this long: complete */
#define AGENT_STACKS_GDB_MS 10000    /* for gdb */
#define AGENT_STACKS_TEXT_MAX (256u << 10)
#define AGENT_STACKS_CULPRIT_MAX 160

struct agent_stacks;

struct agent_stacks_result {
    const char *text;    /* the stacks as read ("" when none), valid during the callback */
    const char *culprit; /* the innermost frame of the main thread, or "" when unknown */
    const char *source;  /* "faulthandler", "gdb", "/proc" */
};

typedef void (*agent_stacks_done_fn)(void *ud, const struct agent_stacks_result *r);

/* The signal number a worker's RDZV_STACKS_SIGNAL names. */
int agent_stacks_signal(void);

/* Collect pid's stacks: announced (it said "stacks") with its dump file stacks_file (NULL:
 * none), else as a native process. 0 with *ret set (done fires later, or already did when the
 * process could be judged at once: a stopped one), or -ENOMEM. */
int agent_stacks_collect(uv_loop_t *loop, int pid, bool announced, const char *stacks_file,
                         agent_stacks_done_fn done, void *ud, struct agent_stacks **ret);
/* Give up: done will not fire; what runs (gdb) is killed. NULL: no-op. */
void agent_stacks_cancel(struct agent_stacks *s);

/* Pure parsers (tested on their own): the culprit of a faulthandler dump (its last thread's
 * first frame) and of gdb's "thread apply all bt" (thread 1's frame #0), into out. 0, or
 * -ENOENT when text has none. */
int agent_stacks_python_culprit(const char *text, char *out, size_t len);
int agent_stacks_gdb_culprit(const char *text, char *out, size_t len);
