/* SPDX-License-Identifier: Apache-2.0 */
/* agent-dirs.h: the workers' directories and files: with --log-dir,
 * <log_dir>/<run_id>/attempt_<k>/<local_rank>/{error.json,stdout.log,stderr.log} (torchrun's
 * layout); without, the error files of all workers flat in one private temporary directory,
 * <TMPDIR>/rdzv-<run_id>-XXXXXX/attempt_<k>_<local_rank>.error.json (or, when some output is
 * redirected to files without --log-dir, that directory used as log_dir, agent-workers.h).
 *
 * Ownership: strings returned through ret_* are the caller's to free(); file descriptors returned
 * are the caller's to close(). Errors: negative errno, logged at error level here when they are
 * the file system's (the caller need not log them again), not logged for -ENOMEM. Threads: any;
 * blocking file system calls, so the agent calls them between loop callbacks (from
 * agent_group_new()/agent_group_start()), never in bulk. */
#pragma once

#include <stdbool.h>

#define AGENT_DIRS_LOCK ".rdzv-agent.lock" /* in the private directory: its agent's lock */
#define AGENT_DIRS_SWEEP_MAX 64            /* gone agents' directories removed per sweep */

/* mkdir -p path, 0755: parents that exist are not touched. 0 or a negative errno. */
int agent_dirs_mkdir_p(const char *path);
/* mkdtemp <TMPDIR or /tmp>/rdzv-<run_id>-XXXXXX. Returns 0 and the path in *ret_dir, or -errno.
 * The directory holds AGENT_DIRS_LOCK, locked (flock) through *ret_lock, a descriptor this
 * process holds until agent_dirs_release_tmp(): its lock is how the next agent of this user on
 * the host knows that the directory's agent is gone, SIGKILLed or crashed. The first call of a
 * process first removes such directories (unlocked: their agent is gone), at most
 * AGENT_DIRS_SWEEP_MAX, and only this user's (one read of TMPDIR). Where the lock cannot be made
 * (said at warn level), *ret_lock is -1 and the directory is made all the same. */
int agent_dirs_make_tmp(const char *run_id, char **ret_dir, int *ret_lock);
/* The end of a directory from agent_dirs_make_tmp(): removed with everything in it, or with keep
 * (logs a user reads) kept, its lock file removed so that no later agent removes it; lock
 * closed. */
void agent_dirs_release_tmp(const char *dir, int lock, bool keep);

/* Remove dir and everything below it (best effort; failures are logged at debug level). */
void agent_dirs_remove_tree(const char *dir);

/* Prepare one worker's files for attempt: replaces *error_file (freed, then set; NULL after
 * -ENOMEM) by its TORCHELASTIC_ERROR_FILE, removes a stale one, and with log_dir makes its
 * directory and opens the logs that log_mask names (bit 0: stdout, bit 1: stderr) into
 * ret_log_fds[0] (stdout.log) and [1] (stderr.log), appending; -1 for a log not named.
 * Without log_dir, tmp_dir (from agent_dirs_make_tmp()) holds the error file and ret_log_fds is
 * untouched. On failure no descriptor is left open and ret_log_fds is untouched. */
int agent_dirs_worker(const char *log_dir, const char *tmp_dir, const char *run_id,
                      unsigned attempt, unsigned local_rank, unsigned log_mask, char **error_file,
                      int ret_log_fds[2]);
