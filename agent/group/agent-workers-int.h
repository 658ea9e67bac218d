/* SPDX-License-Identifier: Apache-2.0 */
/* agent-workers-int.h: the worker group's private struct, shared by the files that make up the
 * group. Calls go down this list, never up (tests/layering.py reads them from the objects); a
 * lower file reaches a higher one only through the callbacks the group registers (g->settle,
 * g->slot_free):
 *   agent-workers.c: the state machine (every change of g->state), spawn, the API;
 *   agent-standby.c: the warm standbys (--warm-workers);
 *   agent-progress.c: the progress channel;
 *   agent-stop.c: signals, stop escalation, the end of a start's leftover processes, the
 *     workers' cgroup (agent-cgroup.h);
 *   agent-relay.c: the output relay and the drain of output left open after the last exit;
 *   agent-reaper-link.c: the link to the host's reaper, the listed process groups;
 *   agent-workers-control.c: the control channel;
 *   agent-group-handles.c: the count of open handles, their close callbacks, "settled".
 * Nothing outside those files includes it: everyone else sees agent-workers.h, where the group is
 * opaque.
 *
 * Threads: one. Every function declared here runs on the group's loop thread, from an
 * agent_group_* call or from one of the group's libuv callbacks; none may be called after
 * agent_group_free() except where it says so. Errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-worker.h"
#include "agent/group/agent-cgroup.h"
#include "agent/group/agent-cmd.h"
#include "agent/group/agent-env.h"
#include "agent/group/agent-reaper.h"
#include "agent/group/agent-workers.h"

/* A progress line's buffer: the longest line (an error line's, RDZV_PROGRESS_ERROR_LINE_MAX
 * bytes), its newline and a NUL. Longer lines are ignored. */
#define AGENT_PROGRESS_LINE (RDZV_PROGRESS_ERROR_LINE_MAX + 2)

enum group_state {
    GROUP_IDLE,     /* no start active: every worker handle is closed */
    GROUP_ACTIVE,   /* a start's processes or output pipes are open */
    GROUP_STOPPING, /* ACTIVE, and a stop was asked for: kill_timer is armed */
    GROUP_FREEING,  /* agent_group_free(): closing everything */
    _GROUP_STATE_MAX,
};

enum { OUT_STDOUT, OUT_STDERR, _OUT_MAX };

/* Where relayed lines go: the agent's stdout or stderr (or cfg->out_fd/err_fd). */
struct out_sink {
    uv_poll_t poll; /* queued mode only: writable events on fd */
    struct agent_group *g;
    int fd;         /* what we write to */
    bool queued;    /* fd is non-blocking: bytes that don't fit wait in q */
    bool own_fd;    /* fd is our private open file description: close it */
    bool is_socket; /* write with send(MSG_DONTWAIT), the description stays blocking */
    bool poll_open; /* poll initialised, uv_close not yet called */
    bool polling;
    bool failed; /* a write failed: this sink's output is dropped from now on */
    struct rdzv_buf q;
};

/* One output pipe of one worker: the read end, the partial line, the raw log file. */
struct worker_out {
    uv_pipe_t pipe; /* first: callbacks recover us via container_of */
    struct agent_worker *w;
    unsigned which; /* OUT_STDOUT or OUT_STDERR */
    bool open;      /* initialised, uv_close not yet called */
    bool console;   /* relayed to the group's sink (else only to the log file) */
    bool to_file;   /* wants a log file even without cfg.log_dir */
    int log_fd;     /* <dir>/stdout.log or stderr.log, or -1 */
    size_t len;     /* bytes of an unfinished line in line[] */
    char *line;     /* AGENT_MAX_LINE bytes, allocated at the first read: most workers of a
                     * large job never write, and 8 GPUs' worth would be a 1 MiB calloc */
};

/* The read end of a worker's progress channel (cfg.progress) and what it said. */
struct worker_progress {
    uv_pipe_t pipe; /* first: callbacks recover us via container_of */
    struct agent_worker *w;
    bool open;     /* initialised, uv_close not yet called */
    bool reported; /* a valid report came in this start */
    bool hung;     /* on_hang fired for this start */
    bool skip;     /* discarding an overlong line up to its newline */
    bool waiting;  /* the last line was "wait": blocked on its peers, alive */
    bool stacks;   /* it said "stacks": it dumps them on the signal (agent-stacks.h) */
    bool done;     /* it said "done": exiting, no longer watched, no stacks signal */
    bool control;  /* it said "control": it follows the control channel (re-forms in place) */
    bool slow_step;    /* "slow N" came during the step under way: its time is not a sample */
    uint64_t slow_until; /* loop time until which the step under way may run ("slow N") */
    /* --progress-timeout auto: the last step times (ms), and the timeout they give (0: none yet,
     * the warm-up's). */
    uint32_t iv[AGENT_PROGRESS_AUTO_WINDOW];
    unsigned niv, iv_pos;
    uint64_t auto_ms;
    uint64_t step; /* of the last report */
    bool has_compute;    /* the last report said its compute time */
    uint32_t compute_ms; /* that compute time ("step N compute_ms M") */
    /* The compute times of the steps reported since the last agent_group_compute_take: their
     * sum, count and longest. */
    uint64_t compute_sum;
    uint32_t compute_n, compute_max;
    /* The time it spent stopped (SIGSTOP, by a debugger, a throttle, a user) since the last take,
     * as its parent sees it: waitid(WSTOPPED | WCONTINUED) on SIGCHLD (agent_progress_stops). A
     * stop that lands in a step's wait on its peers is no compute time to the worker, yet the
     * others wait for it: the take counts it. stopped_since: loop time of the stop under way. */
    uint64_t stopped_ms, stopped_since;
    bool stopped;
    uint64_t t_ms; /* loop time of the last report, or of the spawn */
    uint64_t alive_ms; /* loop time of the last "wait" line */
    size_t len;
    char line[AGENT_PROGRESS_LINE];
};

struct agent_worker {
    /* Its process handle is proc[cur]; with cfg.standby_argv the other holds its standby's
     * (agent-standby.c), which takes the next start: then the two swap. */
    uv_process_t proc[2];
    unsigned cur;
    struct agent_group *g;
    unsigned local_rank;
    unsigned rank;     /* global rank of the current start */
    int pid;           /* also the worker's process group and session id */
    int control_fd;    /* our (non-blocking) end of its control channel, or -1 */
    unsigned handles;  /* its process and pipe handles not yet closed back */
    bool respawn;      /* agent_group_start_ranks(): spawn it once handles reaches 0 */
    bool proc_open;    /* initialised by uv_spawn, uv_close not yet called */
    bool standby_open; /* proc[!cur] is its standby's handle, not yet closed back */
    bool standby_killed; /* its standby was SIGKILLed (not wanted any more) */
    int standby_pid;   /* its standby, running (also its process group), or 0 */
    int standby_fd;    /* our end of its standby's start socket, or -1 */
    bool running;      /* spawned (or failed to exec, until that is reported), exit not yet seen */
    bool listed;       /* its process group may be alive: the reaper has it ("+pid") */
    bool group_killed; /* SIGKILL was sent to its process group */
    char *error_file;  /* TORCHELASTIC_ERROR_FILE of the current start */
    char prefix[32];   /* "[rank<N>]: " */
    size_t prefix_len;
    struct worker_out out[_OUT_MAX];
    struct worker_progress progress;
    char error[AGENT_ERROR_MAX + 1]; /* agent_group_worker_error(), of this start */
    /* The error it said itself ("error TEXT" on its progress channel, before it exited), which
     * agent_group_worker_error() prefers to its last stderr line, and when (wall clock, s). */
    char said[AGENT_ERROR_MAX + 1];
    double error_s;
    /* Its exit (agent_relay_exit), and whether its stderr was still open then: its end is
     * reported too (cfg.on_output_closed). */
    bool exited_open;
    int exit_sig;
    int64_t exit_status;
};

struct reaper; /* agent-reaper-link.c */

struct agent_group {
    struct agent_group_cfg cfg;
    char **argv; /* cfg.argv, or our copy whose local-rank entry points to rank_arg */
    char rank_arg[AGENT_CMD_RANK_ARG_MAX];
    enum group_state state;       /* changed only in agent-workers.c (group_set_state) */
    struct agent_worker *workers; /* cfg.nproc of them */
    unsigned running;             /* workers spawned and not exited */
    unsigned worker_handles;      /* process and pipe handles of this start not yet closed back */
    unsigned pipes_open;          /* worker_out with open == true */
    unsigned handles;             /* every handle of the group not yet closed back */
    uv_timer_t kill_timer;        /* STOPPING: grace period, then SIGKILL */
    uv_timer_t drain_timer;       /* after the last exit: silence on output still open */
    uv_timer_t notify_timer;      /* on_all_exited for a stop on an idle group or a failed start */
    uv_timer_t progress_timer;    /* the next progress deadline of a running worker */
    uv_signal_t sigchld;          /* with cfg.progress: workers stopped and continued */
    /* agent_group_start_ranks() with workers waiting for their old handles to close: the
     * assignment they get (strings copied into the two buffers). */
    struct agent_assignment respawn_a;
    char respawn_addr[256];
    char respawn_nccl[520];
    int stop_signal;
    bool paused; /* a sink is over SINK_HIGH: worker pipes are not read */
    struct out_sink sink[_OUT_MAX];
    struct rdzv_buf scratch;    /* one line, for blocking sinks */
    char *tmp_dir;              /* private directory for error files when there is no log_dir */
    int tmp_lock;               /* its lock (agent_dirs_make_tmp), with tmp_dir */
    bool logs_in_tmp; /* no log_dir but some stream goes to a file: tmp_dir has log_dir's layout
                       * and is kept at free when... */
    bool logs_only_in_tmp; /* ...one of them is not on the console (--redirects, a filter); only
                            * teed ones (--tee: copies) go with it */
    struct reaper *reaper;      /* connected as far as we know; NULL before a reconnection */
    uv_process_t *reaper_spawn; /* a reaper we started, until it has daemonized */
    uv_timer_t reaper_timer;    /* reconnection after the reaper is gone */
    char reaper_name[AGENT_REAPER_NAME_MAX + 1];
    bool reaper_lost;        /* a reaper that had acked us is gone: say so when one is back */
    unsigned reaper_unacked; /* connections in a row that ended before their "ok" */
    char token[AGENT_TOKEN_LEN + 1]; /* RDZV_AGENT_TOKEN of this group's workers */
    struct agent_cgroup cgroup;      /* the workers' cgroup, if any (agent-stop.c) */
    bool stdin_open;                 /* fd 0 was open at agent_group_new(): workers inherit it */
    bool omp_told;
    bool warm_off; /* a standby could not start or died unused: no more standbys */
    void (*done)(void *ud);
    void *done_ud;
    /* Registered by agent-workers.c for agent-group-handles.c: a handle closed back or another
     * event that may end a start or finish a free happened (settle); w's last handle closed and
     * w->respawn is set (slot_free). */
    void (*settle)(struct agent_group *g);
    void (*slot_free)(struct agent_worker *w);
};

static inline const char *agent_out_name(unsigned which)
{
    return which == OUT_STDOUT ? "stdout" : "stderr";
}

static inline bool agent_group_active(const struct agent_group *g)
{
    return g->state == GROUP_ACTIVE || g->state == GROUP_STOPPING;
}

/* The environment of w's worker for a, but its channels and error file (the caller's). */
static inline struct agent_env_in agent_group_env_in(const struct agent_worker *w,
                                                     const struct agent_assignment *a)
{
    const struct agent_group *g = w->g;

    return (struct agent_env_in){
        .a = a,
        .local_rank = w->local_rank,
        .nproc = g->cfg.nproc,
        .max_restarts = g->cfg.max_restarts,
        .role = g->cfg.role,
        .run_id = g->cfg.run_id,
        .token = g->token,
        .endpoint = g->cfg.endpoint,
        .signals_to_handle = g->cfg.signals_to_handle,
        .device = g->cfg.devices ? g->cfg.devices[w->local_rank] : NULL,
        .python_hooks = g->cfg.python_hooks,
    };
}

/* ---- agent-group-handles.c: open handles and "settled" (the bottom) ---- */

/* From callbacks only (close, poll, timer): g->settle(g), which reports the end of a start
 * (on_all_exited), or finishes a free (g's memory is gone when it returns in that case). */
void agent_group_settle(struct agent_group *g);
/* The worker whose struct holds handle h (h->data is g): every worker handle is a member of its
 * worker. */
struct agent_worker *agent_group_worker_of(struct agent_group *g, const uv_handle_t *h);
/* Count a handle of g->handles (a standby's) as w's from now on (it became the worker's). */
void agent_group_worker_handle_adopt(struct agent_group *g, uv_handle_t *h);
/* Close callback of a worker's process or pipe handle (h->data is the group). */
void agent_group_worker_close_cb(uv_handle_t *h);
/* Close callback of any other handle of the group (h->data is the group). */
void agent_group_handle_close_cb(uv_handle_t *h);
/* Count a new process or pipe handle of a worker (h->data must be g; h inside g->workers[]). */
void agent_group_worker_handle_added(struct agent_group *g, uv_handle_t *h);
/* One handle of a worker closed back: the counts, then g->slot_free(w) when it was w's last and
 * a respawn waits for the slot. Does not settle (the caller does, once it is done). */
void agent_group_worker_handle_gone(struct agent_group *g, uv_handle_t *h);

/* ---- agent-relay.c: workers' output to the agent's stdout/stderr ---- */

/* Choose how to write cfg.out_fd / cfg.err_fd (queued and polled, or blocking). Cannot fail: falls
 * back to blocking writes. Counts the poll handles it opens in g->handles. */
void agent_relay_setup(struct agent_group *g);
/* Write all of p to fd, waiting in poll() if fd happens to be non-blocking. 0 or -errno. */
int agent_relay_write_all(int fd, const void *p, size_t n);
/* Relay one line of o's worker (prefix, bytes, newline) to o's sink, if o->console. */
void agent_relay_line(struct worker_out *o, const char *p, size_t n);
/* Whether relayed bytes still wait in a sink's queue. */
bool agent_relay_queued(const struct agent_group *g);
/* After the last exit: close pipes held open by descendants after AGENT_DRAIN_MS of silence
 * (each read restarts the count, unless the group is stopping). */
void agent_relay_drain_start(struct agent_group *g);
/* Pause or resume reading the workers' pipes after a sink's queue grew or shrank. */
void agent_relay_update_pause(struct agent_group *g);
/* A pipe to a worker: pipe (uninitialised) becomes our non-blocking read end, counted as a worker
 * handle (its close callback is agent_group_worker_close_cb), *ret_child_fd the worker's blocking
 * write end. 0 or a negative errno; on failure nothing is left open (pipe may be closing). */
int agent_group_pipe_open(struct agent_group *g, uv_pipe_t *pipe, int *ret_child_fd);
/* Make one output pipe of o's worker; *ret_child_fd is the worker's end (blocking). On failure
 * nothing is left open. Returns 0 or a negative errno. */
int agent_relay_out_open(struct worker_out *o, int *ret_child_fd);
/* Start reading an opened pipe (unless the relay is paused). */
void agent_relay_out_start(struct worker_out *o);
/* Relay o's unfinished last line, close its log file and its pipe. No-op when not open. */
void agent_relay_out_close(struct worker_out *o);
/* w exited (status and signal as on_exit has them): report it through on_exit now; if its stderr
 * is still open, its end is reported through on_output_closed. */
void agent_relay_exit(struct agent_worker *w, int64_t status, int sig);
/* At agent_group_free(): write queued output (blocking, AGENT_FLUSH_MS at most), close polls. */
void agent_relay_close(struct agent_group *g);
/* At destruction, after every handle closed: close private fds, free the queues. */
void agent_relay_release(struct agent_group *g);

/* ---- agent-stop.c: signals, stop escalation, the end of a start's leftovers ---- */

/* STOPPING: SIGKILL to what still runs after cfg.grace_ms from now. */
void agent_stop_arm_kill(struct agent_group *g);
/* Signal the process group of each worker that may still have one (w->listed). */
void agent_stop_kill(struct agent_group *g, int signum);
/* The same for one exited worker (before its slot is reused by agent_group_start_ranks()). */
void agent_stop_kill_leftover(struct agent_worker *w);
/* End of a start (or free): SIGKILL what is left in exited workers' process groups, unlist them,
 * and what is left in the workers' cgroup. */
void agent_stop_kill_leftovers(struct agent_group *g);
/* SIGKILL what is in the workers' cgroup, unless it is empty or was killed since the last spawn
 * (logged when no worker runs): when the last worker of a start has exited (before anything is
 * spawned again), when the stop's grace period is over, at the end of a start. */
void agent_stop_kill_cgroup(struct agent_group *g);
/* agent_group_new(): make the workers' cgroup (unless cfg.no_cgroup), and say which the group has,
 * a cgroup or the token scan. g->cgroup must have been through agent_cgroup_init(). */
void agent_stop_cgroup_open(struct agent_group *g);
/* Around the spawns of a start: the agent moves into the workers' cgroup, so that each worker is
 * forked into it, and back. Nothing but workers may be spawned in between. A failure is logged;
 * no worker goes in from then on, and what is in it is still killed (at the end of each start, at
 * free, by the reaper) unless the agent could not get out (then only the reaper, once the agent is
 * gone). */
void agent_stop_cgroup_enter(struct agent_group *g);
void agent_stop_cgroup_leave(struct agent_group *g);
/* agent_group_free(): kill what is left in it, wait for it to empty (AGENT_CGROUP_WAIT_MS at
 * most) and remove it. */
void agent_stop_cgroup_close(struct agent_group *g);

/* ---- agent-standby.c: warm standbys (cfg.standby_argv) ---- */

/* Start w's standby (outside the workers' cgroup: call between starts, never inside
 * agent_stop_cgroup_enter/_leave), unless the group has none, w has one, or one died unused. Its
 * environment is the worker's of the last start (progress and control channels, error file
 * left out), or of none before the first. A failure is logged: no more standbys. */
void agent_standby_start(struct agent_worker *w);
void agent_standby_start_all(struct agent_group *g);
/* agent_group_free(): SIGKILL every standby and close its handle (unless its exit is being
 * reported: then its exit callback closes it). */
void agent_standby_stop_all(struct agent_group *g);
/* w's standby takes w's start: it gets env, the descriptors (child_fd[0..1] as its stdout and
 * stderr, progress_fd and control_fd, when >= 0, as AGENT_PROGRESS_FD and AGENT_CONTROL_FD) and
 * the command from cfg.warm_argi on; it moves into the workers' cgroup; its handle becomes the
 * worker's (w->cur swaps, exit_cb is set, w->pid, w->listed). 0; -ENOENT when w has no standby;
 * another negative errno when it could not be sent (the standby is then SIGKILLed): spawn
 * cold. */
int agent_standby_take(struct agent_worker *w, char *const *env, const int *child_fd,
                       int progress_fd, int control_fd, uv_exit_cb exit_cb);

/* ---- agent-progress.c: the workers' progress channel and hang detection ---- */

/* Make w's progress pipe; *ret_child_fd is the worker's end (blocking). 0 or a negative errno,
 * nothing left open on failure. */
int agent_progress_open(struct agent_worker *w, int *ret_child_fd);
/* Start reading it; the worker counts as spawned now (the grace period starts). */
void agent_progress_start(struct agent_worker *w);
/* Close it (the worker exited, or the group is freed). No-op when not open. */
void agent_progress_close(struct agent_worker *w);
/* (Re)arm progress_timer for the earliest deadline of a running worker, or stop it. */
void agent_progress_arm(struct agent_group *g);
/* SIGCHLD: which running workers stopped or continued since (waitid without WEXITED: libuv's own
 * watcher reaps the exits); their stopped time is kept for agent_group_compute_take. */
void agent_progress_stops(uv_signal_t *h, int signum);

/* ---- agent-workers-control.c: the control channel (agent -> worker) ---- */

/* Make w's control pipe: w->control_fd our non-blocking end, *ret_child_fd the worker's blocking
 * read end. 0 or a negative errno, nothing left open on failure. */
int agent_control_open(struct agent_worker *w, int *ret_child_fd);
/* Close our end (the worker exited, or the group is freed). No-op when not open. */
void agent_control_close(struct agent_worker *w);

/* ---- agent-reaper-link.c: our connection to the host's reaper (agent-reaper.h) ---- */

/* Connect to the host's reaper (or start one), register, list every listed worker. 0 or -errno. */
int agent_reaper_link_start(struct agent_group *g);
/* Tell the reaper "+pgid" (op '+') or "-pgid" (op '-'); dropped while no reaper is connected. */
void agent_reaper_link_send_pgid(struct agent_group *g, char op, int pgid);
/* At free: unlist SIGKILLed groups, say "q", close the connection and any reaper still starting. */
void agent_reaper_link_stop(struct agent_group *g);
/* The reaper's pid once it has acknowledged us, else 0. */
int agent_reaper_link_pid(const struct agent_group *g);
/* Whether the process group pgid is gone (no process left in it). */
bool agent_reaper_link_pgroup_gone(int pgid);
/* Unlist w's process group from the reaper once it is known to be gone. */
void agent_reaper_link_unlist_if_gone(struct agent_worker *w);
