/* SPDX-License-Identifier: Apache-2.0 */
/* agent-workers.h: the local worker group of one agent: spawn one process per local rank with
 * torchrun's environment contract, prefix and log their output, forward signals, stop them
 * (signal, grace period, SIGKILL), report each exit, and make sure no worker outlives the agent
 * (through a reaper process, agent-reaper.h). Knows nothing of the network.
 *
 * Ownership: the group belongs to its creator, from agent_group_new() until agent_group_free()
 * (whose done callback says when its memory is gone); strings in the cfg are borrowed. Errors:
 * negative errno. Threads: the loop's thread only: call from the creator's code or from any of its
 * libuv callbacks, including the group's own on_exit / on_all_exited (what each may call is said
 * below). Inside, the group is split by concern, each file behind agent-workers-int.h:
 * agent-workers.c (state machine, spawn, this API), agent-relay.c (output relay), agent-stop.c
 * (signals, stop escalation), agent-reaper-link.c (the reaper connection), agent-progress.c (the
 * progress channel and hang detection), with the pure agent-env.h (worker environment),
 * agent-cmd.h (worker command line), agent-redirects.h (torchrun's -r/-t/--local-ranks-filter
 * values) and agent-dirs.h (log and error-file directories). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/group/agent-assignment.h"

struct agent_group;

#define AGENT_MAX_LINE (64u << 10) /* relayed lines longer than this are split */
#define AGENT_DRAIN_MS 2000 /* silence on a worker's output after the last exit, then close */
#define AGENT_FLUSH_MS 5000 /* agent_group_free(): time left to queued relay output */
#define AGENT_ERROR_MAX 255 /* agent_group_worker_error(): a line cut past this many bytes */
#define AGENT_PROGRESS_FD 3 /* the progress channel's descriptor in each worker (cfg.progress) */
#define AGENT_PROGRESS_WAIT_DIV 4 /* a blocked worker says "wait" this many times per timeout */
#define AGENT_PROGRESS_WAIT_MAX 4 /* timeouts a "wait"ing worker may go without a step */
/* --progress-timeout auto: after AGENT_PROGRESS_AUTO_WARMUP step times, a worker's timeout is
 * AGENT_PROGRESS_AUTO_MULT times the 99th percentile of its last AGENT_PROGRESS_AUTO_WINDOW step
 * times, at least the floor (cfg.progress_timeout_ms); during the warm-up it is
 * AGENT_PROGRESS_AUTO_MULT times the floor. */
#define AGENT_PROGRESS_AUTO_WARMUP 20
#define AGENT_PROGRESS_AUTO_WINDOW 128
#define AGENT_PROGRESS_AUTO_MULT 10
#define AGENT_CONTROL_FD 4      /* the control channel's descriptor in each worker (cfg.control) */
#define AGENT_CONTROL_LINE 4096 /* PIPE_BUF: a control line and its newline stay below it */
#define AGENT_ALL_LOCAL_RANKS UINT32_MAX /* agent_group_control_send(): every running worker */


/* Fired once per worker exit: exit_status as from waitpid (exit code), term_signal non-zero when
 * the worker died by a signal. Runs from the loop; may call agent_group_stop/_signal/_free. The
 * worker's last output may still be in its pipes (agent_group_output_open): on_all_exited comes
 * after all of it. Also cfg.on_output_closed, with the same arguments, when the stderr of a worker
 * that had exited is read to its end (EOF): agent_group_worker_error() has its last line then. */
typedef void (*agent_exit_fn)(struct agent_group *g, unsigned local_rank, int64_t exit_status,
                              int term_signal, void *ud);
/* Fired once per start when no worker of it is running any more AND all their output has been
 * read and relayed: pipes at EOF (after the last exit a pipe that a stray descendant keeps open
 * gets AGENT_DRAIN_MS of silence, then is closed) and, unless the group is being stopped, the
 * relay queue for a slow out_fd/err_fd reader written out. Never from inside an agent_group_*
 * call: from the loop only. When it runs the group is idle: it may call agent_group_start (a
 * restart) or agent_group_free. */
typedef void (*agent_all_exited_fn)(struct agent_group *g, void *ud);
/* Fired once per worker and start when a worker with the progress channel (cfg.progress) stays
 * silent too long: progress_timeout_ms after its last report (reported true), or
 * progress_grace_ms after its spawn when it never reported (reported false). last_step is the
 * step of its last report (0 if none), silent_ms how long it has been silent. The group does
 * nothing to the worker: the caller fails it like a crash (agent_group_stop). Runs from the loop;
 * may call agent_group_stop/_signal/_free. */
typedef void (*agent_hang_fn)(struct agent_group *g, unsigned local_rank, bool reported,
                              uint64_t last_step, uint64_t silent_ms, void *ud);
/* Fired at each step report of a worker (cfg.progress): the heartbeat that carries a
 * generation's first may go at once, so that rdzvd dates the end of a recovery to the report,
 * not to the next periodic heartbeat. Runs from the loop. */
typedef void (*agent_step_fn)(struct agent_group *g, unsigned local_rank, void *ud);

struct agent_group_cfg {
    uv_loop_t *loop;
    char **argv;          /* worker command, NULL-terminated; argv[0] looked up in PATH */
    /* 0, or the index in argv (> 0) of the local-rank argument (agent-cmd.h: rank_index), which
     * each worker gets as "<local_rank_flag>=<its local rank>" (rank_flag): one argv array per
     * group, rewritten before each spawn, no allocation per worker. */
    size_t local_rank_argi;
    const char *local_rank_flag; /* "--local-rank" or "--local_rank"; with local_rank_argi */
    unsigned nproc;       /* LOCAL_WORLD_SIZE */
    const char *role;     /* ROLE_NAME, "default" if NULL */
    const char *run_id;   /* TORCHELASTIC_RUN_ID */
    const char *endpoint; /* RDZV_ENDPOINT */
    const char *log_dir;  /* NULL: no files; else <log_dir>/<run_id>/attempt_<k>/<local_rank>/ */
    /* torchrun's -r/--redirects, -t/--tee and --local-ranks-filter, per local rank (nproc
     * entries each, parsed by agent-redirects.h; NULL: all 0 / every rank shown). For local rank
     * i and stream bit b (AGENT_STD_OUT, AGENT_STD_ERR):
     *   console  (relayed to out_fd/err_fd) unless redirects[i] has b and tee[i] has not, and
     *            only when console[i];
     *   file     (<dir>/stdout.log, stderr.log) with log_dir always (as before), else when
     *            (redirects[i] | tee[i]) has b or !console[i].
     * Without log_dir, files go to the private temporary directory (agent_group_new()), which then
     * takes log_dir's layout (error files included) and is kept at free, as torchrun keeps its
     * temporary log directory; its path is logged at info level. */
    const uint8_t *redirects;
    const uint8_t *tee;
    const bool *console;
    const char *self_exe; /* path of rdzv-agent, to start the host's reaper (see agent_group_new) */
    const char *reaper_name;    /* NULL: the job's on this host (agent_reaper_default_name());
                                 * tests give their own, to have a reaper of their own */
    bool no_cgroup; /* the workers run in no cgroup of the agent's (see agent_group_new) */
    const char *const *devices; /* nproc device ids for CUDA_VISIBLE_DEVICES, or NULL to leave
                                 * the variable as inherited */
    unsigned max_restarts;      /* TORCHELASTIC_MAX_RESTARTS */
    const char *signals_to_handle; /* TORCHELASTIC_SIGNALS_TO_HANDLE (--signals-to-handle), or
                                    * NULL: as inherited */
    uint64_t grace_ms;          /* TERM -> KILL grace period when stopping */
    int out_fd; /* where "[rank<N>]: " lines of workers' stdout go; 0: STDOUT_FILENO */
    int err_fd; /* ... and of their stderr; 0: STDERR_FILENO */
    /* Progress channel: each worker inherits the write end of a pipe of its own as fd
     * AGENT_PROGRESS_FD, named by RDZV_PROGRESS_FD, and writes "step N\n" per step (one write,
     * atomic below PIPE_BUF); while blocked on its peers (in a collective) it may write "wait\n"
     * every RDZV_PROGRESS_WAIT_MS (timeout / AGENT_PROGRESS_WAIT_DIV, set with a timeout), so
     * that a hang fails the rank that hangs, not the ones waiting for it (one write,
     * atomic below PIPE_BUF); the agent's loop reads them as they come. Other bytes are ignored
     * (logged at debug level). */
    bool progress;
    uint64_t progress_timeout_ms; /* 0: no hang detection after the first report; with
                                   * progress_auto, the floor of each worker's own timeout */
    bool progress_auto;           /* --progress-timeout auto: from each worker's step times */
    uint64_t progress_grace_ms;   /* 0: no hang detection before the first report */
    /* Control channel (recovery in place): each worker inherits the read end of a pipe
     * of its own as fd AGENT_CONTROL_FD, named by RDZV_CONTROL_FD (blocking for the worker);
     * the agent writes one line at a time (agent_group_control_send), non-blocking, each line in
     * one atomic write. Protocol of the lines: train/INPLACE.md. The channel of a worker closes
     * when it exits (the worker's next read sees EOF only if the agent is gone). */
    bool control;
    /* --warm-workers (agent-standby.c, python/rdzv/standby.py): NULL, or the command of a
     * standby (the workers' interpreter and its options, then -c and the standby's program), one
     * per local rank, started with the group, after each start, with its environment, at nice
     * 10, that imports torch and waits; the next start of its rank runs in it the script at
     * argv[warm_argi] (a module with warm_module) with the arguments after it, the environment,
     * working directory and descriptors of a fresh worker. The standbys are SIGKILLed at
     * agent_group_free(). */
    char **standby_argv;
    size_t warm_argi;
    bool warm_module;
    /* A directory put first on each worker's PYTHONPATH (its sitecustomize.py instruments a
     * Python worker: python/rdzv/hooks), or NULL: PYTHONPATH as inherited. */
    const char *python_hooks;
    agent_exit_fn on_exit;
    agent_exit_fn on_output_closed; /* may be NULL */
    agent_all_exited_fn on_all_exited;
    agent_hang_fn on_hang; /* may be NULL */
    agent_step_fn on_step; /* may be NULL */
    void *ud;
};

/* cfg is copied (strings borrowed: they must outlive the group). run_id ("none" if NULL) must be
 * usable as a file name. Returns 0 or -errno (-EINVAL for a bad cfg; -ENOMEM; the libuv error if
 * a timer or the reaper's pipe cannot be initialised; the uv_spawn() error if no reaper is
 * reachable and none can be started: then the handles already made close on the next loop
 * iterations, as after agent_group_free(), and *ret is untouched).
 *
 * Workers never outlive the agent, even a SIGKILLed one. Here, before any worker and off the
 * workers' critical path, the group connects to the reaper of its job on this host
 * (agent-reaper.h), or starts it (uv_spawn of `self_exe --reaper <name>`) if none listens: a
 * process per job and host, not per agent, so that an agent costs a connect(). The group tells it
 * each worker's process group as it is spawned and once it is gone; when the agent dies its
 * connection reaches EOF and the reaper SIGKILLs those groups (a worker's descendants included) and
 * every process that carries the group's token: each worker gets RDZV_AGENT_TOKEN=<32 hex digits>
 * in its environment (after a comma, if the agent inherited the variable from an agent above it),
 * which is how a worker forked just as the agent died is still found. What the reaper kills for an
 * agent it reports on that agent's stderr. If the reaper is gone, the group logs a warning and
 * connects again (or starts another) within REAPER_RESTART_MS. The connection does not keep the
 * loop running; agent_group_free() tells the reaper this agent ended cleanly, and closes it.
 *
 * Nothing a worker starts outlives its start, however it detaches: unless cfg.no_cgroup, the group
 * makes the workers' cgroup here (agent-cgroup.h: <the agent's cgroup v2>/rdzv-agent.<pid
 * namespace>.<pid>.<hex>, where the agent may write its own cgroup: as root, delegated, Slurm's
 * step), and every worker is forked into it. What is left in it is killed with cgroup.kill as soon
 * as the last worker of a start has exited (its output pipes then end: the drain does not wait for
 * a process writing to them), with the workers' process groups when a stop's grace period is
 * over, and at the end of each start (before on_all_exited); agent_group_free() does the same and
 * removes it; the reaper is passed its directory and cgroup.kill, and kills it when the agent is
 * gone. Without one, what setsid()s and clears its environment escapes the process-group kill and
 * the token scan. Either way the group logs one line at info level saying which it has, and why
 * not.
 *
 * Output relay: each worker's stdout/stderr is a pipe; every line is re-emitted on out_fd/err_fd
 * with the prefix "[rank<global rank>]: " (lines over 64 KiB are split, a last line without a
 * newline gets one). When out_fd/err_fd is a pipe, tty or socket the group writes it without
 * blocking, through a private O_NONBLOCK open file description (/proc/self/fd/N; send() with
 * MSG_DONTWAIT for sockets) and a queue; while more than 1 MiB is queued it stops reading from
 * the workers, so a stalled reader stalls the workers (as if they wrote to it directly) and never
 * the agent's loop. Regular files (and anything that cannot be polled) are written with plain
 * blocking write(2). The caller must ignore SIGPIPE (as any networked program must). */
int agent_group_new(const struct agent_group_cfg *cfg, struct agent_group **ret);

/* Spawn nproc workers for assignment a, each with uv_spawn() straight into the command (one exec),
 * in its own session and process group. Creates <log_dir>/<run_id>/attempt_<restart_count>/
 * <local_rank>/ for error.json and the logs; without log_dir, the error files are
 * attempt_<restart_count>_<local_rank>.error.json in a private temporary directory (made by
 * agent_group_new(), removed by agent_group_free). A stale error file is removed first. A command
 * that cannot be executed
 * (missing, not executable, ...) is a worker that exits 127: its stderr says
 * "rdzv-agent: cannot run '<cmd>': <strerror>" and on_exit reports 127, from the loop. Returns 0;
 * -EBUSY while a previous start has not reported on_all_exited; -EINVAL for a bad assignment; or
 * another negative errno if a directory or pipe failed, or the system could not spawn (EAGAIN,
 * ENOMEM, EMFILE, ...): then the ones that started are stopped (SIGTERM, SIGKILL after grace_ms)
 * and on_all_exited still fires once they are gone (asynchronously, even if none started). A
 * pending notification from agent_group_stop() on an idle group is cancelled.
 *
 * When a start ends, processes left in the process group of an exited worker (descendants that
 * outlived it) are SIGKILLed, as torchrun ends every worker's process group, and so is everything
 * left in the workers' cgroup (agent_group_new()). */
int agent_group_start(struct agent_group *g, const struct agent_assignment *a);

/* Start only the local ranks i with spawn[i] (nproc entries; NULL: all) for assignment a, while the
 * others keep running: recovery in place. On an idle group this is agent_group_start() for those
 * ranks. On an active group (not stopping) each chosen rank must have exited (else -EBUSY, nothing
 * done). What is left in an exited worker's process group is SIGKILLed, and its replacement is
 * spawned once the old one's output is read to the end and its handles are closed (from the loop,
 * normally on the next iteration; pipes that a process outside the group holds open are closed
 * after AGENT_DRAIN_MS of silence; a failure to spawn it then is reported through on_exit with
 * status 127). Workers left running take a's ranks from now on (their "[rank<N>]: " prefix, logs)
 * and a fresh progress timeout (their last step is kept): the caller tells them the new generation
 * through agent_group_control_send(). The start goes on: on_all_exited fires once no worker of
 * either kind runs. Error files and logs of a spawned worker are those of a->restart_count. Returns
 * 0; -EBUSY (stopping or freeing, or a chosen rank still running); -EINVAL (bad assignment, no rank
 * chosen on an idle group); or as agent_group_start(): a failure to spawn one worker stops the
 * whole group (the caller recovers by a restart). On an active group no rank chosen is allowed: the
 * running workers only take a's ranks (a generation change that lost no local worker). */
int agent_group_start_ranks(struct agent_group *g, const struct agent_assignment *a,
                            const bool *spawn);

/* Send one control line (len bytes, no newline in it; the group appends one) to local_rank, or
 * to every running worker with the channel when local_rank is AGENT_ALL_LOCAL_RANKS. Never
 * blocks: a line goes out in one write(2), whole or not at all (atomic below PIPE_BUF). Returns
 * the number of workers it reached (0 is possible with AGENT_ALL_LOCAL_RANKS), or -EINVAL (empty
 * line, a newline in it, len + 1 > AGENT_CONTROL_LINE, local rank out of range), -ENOTCONN (that
 * worker is not running or has no channel: cfg.control off), -EAGAIN (its pipe is full: the
 * worker does not read its channel; with AGENT_ALL_LOCAL_RANKS such a worker is logged and
 * skipped). */
int agent_group_control_send(struct agent_group *g, unsigned local_rank, const char *line,
                             size_t len);

/* Send signum to every running worker's process group (and to the group of an exited worker that
 * still had processes when last looked at: its output still open, held by a descendant). No
 * timer. */
void agent_group_signal(struct agent_group *g, int signum);
/* Send signum to the process group of one worker (running, or exited with processes left in its
 * group); nothing when it has none. No timer. */
void agent_group_signal_rank(struct agent_group *g, unsigned local_rank, int signum);

/* Send signum (normally SIGTERM) to every worker's process group, then SIGKILL the groups still
 * alive after grace_ms. on_all_exited fires when all are gone; if none run (idle group), from a
 * zero timer on the next loop iteration, never inside this call. A second stop while stopping
 * sends its signal but keeps the first deadline. */
void agent_group_stop(struct agent_group *g, int signum);

/* Number of workers still running. */
unsigned agent_group_running(const struct agent_group *g);
/* Whether local_rank's worker runs (spawned, exit not yet seen); false out of range. */
bool agent_group_rank_running(const struct agent_group *g, unsigned local_rank);
/* The workers of the current (or last) start that said "control" on their progress channel: they
 * follow the control channel (a new generation there re-forms them), running or not. */
unsigned agent_group_following(const struct agent_group *g);

/* The last progress report of local_rank in the current (or last) start: its step, and how long
 * ago it came (loop time) in *age_ms. Either pointer may be NULL. 0, -ENODATA when the worker has
 * not reported (or the channel is off), -EINVAL for a local rank out of range. */
int agent_group_progress(const struct agent_group *g, unsigned local_rank, uint64_t *step,
                         uint64_t *age_ms);
/* The compute time (ms) of local_rank's last step report in *ret_ms: 0, -ENODATA when that report
 * did not say one (or there was none), -EINVAL for a local rank out of range. */
int agent_group_compute_ms(const struct agent_group *g, unsigned local_rank, uint32_t *ret_ms);
/* The mean compute time (ms) of the steps local_rank reported since the last take, with one (its
 * last step's when none came since; of AGENT_COMPUTE_TRIM_FROM steps or more, the longest left
 * out: one checkpoint step among them is no slowdown), into *ret_ms, and a new count begins: a
 * stall that hits some steps and not others counts by its share of them, where one step's time
 * is a draw of which step the stall hit. The time the worker was stopped since, shared by those
 * steps, replaces that mean when it is larger. 0, -ENODATA when the last report said no compute
 * time (or there was none), -EINVAL for a local rank out of range. */
#define AGENT_COMPUTE_TRIM_FROM 3
int agent_group_compute_take(struct agent_group *g, unsigned local_rank, uint32_t *ret_ms);

/* Pid of the host's reaper once it has acknowledged this group, else 0 (for logs and tests). */
int agent_group_reaper_pid(const struct agent_group *g);

/* TORCHELASTIC_ERROR_FILE of local_rank for the current (or last) start, or NULL before the first
 * start. Valid until the next start or free. */
const char *agent_group_error_file(const struct agent_group *g, unsigned local_rank);
/* The last non-empty line local_rank's worker wrote to its stderr in the current (or last) start
 * (at most AGENT_ERROR_MAX bytes, cut on a character, control characters as spaces): the error
 * it died of, as "RuntimeError: boom"; or the error it said itself on its progress channel
 * ("error TEXT", rdzv-agent's Python hooks: "RuntimeError: boom (train.py:42)"), which comes
 * first; "" when none (or g NULL, or a local rank out of range). */
const char *agent_group_worker_error(const struct agent_group *g, unsigned local_rank);
/* Whether the stderr of local_rank's worker is still open (not read to its end). */
bool agent_group_output_open(const struct agent_group *g, unsigned local_rank);
/* When local_rank's worker said that error itself (an "error" progress line, before it exited:
 * when it failed), wall clock seconds; 0 when it did not. */
double agent_group_worker_error_time(const struct agent_group *g, unsigned local_rank);

/* The silence after a report that fails local_rank now (ms; --progress-timeout auto: its own), or
 * 0 when none applies (no hang detection, or no report yet). */
uint64_t agent_group_progress_timeout(const struct agent_group *g, unsigned local_rank);
/* A running worker's pid, and whether it said "stacks" on its progress channel (it dumps them
 * into its RDZV_STACKS_FILE on RDZV_STACKS_SIGNAL). 0, -EINVAL (no such rank), -ESRCH (not
 * running). */
int agent_group_hang_info(const struct agent_group *g, unsigned local_rank, int *pid,
                          bool *stacks);

/* The cgroup v2 ids a running worker and what it forks are in (agent_cgroup_worker_ids(): the
 * workers' cgroup, or the agent's own without one): their number (1 or 2), 0 when no worker
 * runs, or -errno (no cgroup v2). Reads a few small files: once a generation, not per question. */
int agent_group_worker_cgroups(const struct agent_group *g, uint64_t ids[2]);

/* Close all handles. Workers should have exited: running ones are SIGKILLed (with a warning),
 * reported to nobody, and their process handles closed when they are reaped, so until then the
 * loop must keep running. Processes left in exited workers' groups are SIGKILLed too, then the
 * reaper is told this agent is done ("q"). Relay output still queued is written first,
 * blocking for at most AGENT_FLUSH_MS. When all workers had exited, every handle of the group is
 * closing when this returns (a later uv_walk that skips closing handles is safe). No callback but
 * done runs afterwards; done (may be NULL) runs from the last close callback, when the memory is
 * released. NULL g is a no-op. May be called from on_exit or on_all_exited. */
void agent_group_free(struct agent_group *g, void (*done)(void *ud), void *ud);
