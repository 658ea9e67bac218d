/* SPDX-License-Identifier: Apache-2.0 */
/* agent-workers.c: the local worker group: its state machine, spawning the workers, their exits,
 * and the API of agent-workers.h. The output relay is in agent-relay.c, the environment in
 * agent-env.c, the directories in agent-dirs.c, signals in agent-stop.c, the reaper link in
 * agent-reaper-link.c, the handle counts in agent-group-handles.c (agent-workers-int.h gives the
 * order). Every change of the group's state is made here. */
#include "agent/group/agent-workers.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-dirs.h"
#include "agent/group/agent-env.h"
#include "agent/group/agent-redirects.h"
#include "agent/group/agent-stacks.h"
#include "agent/group/agent-workers-int.h"

extern char **environ;

static const char *const group_state_names[] = {"idle", "active", "stopping", "freeing"};

/* The only place g->state changes; logs the transition at trace level. */
static void group_set_state(struct agent_group *g, enum group_state st)
{
    assert(st < _GROUP_STATE_MAX);
    log_trace("workers: %s -> %s", group_state_names[g->state], group_state_names[st]);
    g->state = st;
}

/* ---- completion ---- */

static void group_settle(struct agent_group *g);

static void notify_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    if (g->state != GROUP_IDLE)
        group_settle(g); /* a stop that need not wait for queued output */
    else if (g->cfg.on_all_exited)
        g->cfg.on_all_exited(g, g->cfg.ud);
}

static void group_notify_soon(struct agent_group *g)
{
    (void)uv_timer_start(&g->notify_timer, notify_timer_cb, 0, 0);
}

static void group_destroy(struct agent_group *g)
{
    void (*done)(void *) = g->done;
    void *ud = g->done_ud;

    if (g->tmp_dir) {
        agent_dirs_release_tmp(g->tmp_dir, g->tmp_lock, g->logs_only_in_tmp);
        free(g->tmp_dir);
    }
    agent_relay_release(g);
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        free(g->workers[i].error_file);
        for (unsigned k = 0; k < _OUT_MAX; k++)
            free(g->workers[i].out[k].line);
    }
    free(g->workers);
    if (g->argv != g->cfg.argv)
        free(g->argv);
    free(g);
    if (done)
        done(ud);
}

/* g->settle: called from callbacks only (close, poll, timer): reports the end of a start, or
 * finishes a free. A start ends when its handles are closed and, unless it is being stopped, its
 * relayed output has left the queues too (a stop doesn't wait for a slow reader: free()
 * flushes). */
static void group_settle(struct agent_group *g)
{
    if (g->state == GROUP_FREEING) {
        if (g->handles == 0)
            group_destroy(g);
        return;
    }
    if (!agent_group_active(g) || g->worker_handles > 0)
        return;
    if (g->state == GROUP_ACTIVE && agent_relay_queued(g))
        return;
    agent_stop_kill_leftovers(g);
    (void)uv_timer_stop(&g->kill_timer);
    (void)uv_timer_stop(&g->drain_timer);
    (void)uv_timer_stop(&g->progress_timer);
    group_set_state(g, GROUP_IDLE);
    log_debug("workers: all exited and output drained");
    if (g->cfg.on_all_exited)
        g->cfg.on_all_exited(g, g->cfg.ud);
}

static int worker_spawn(struct agent_group *g, struct agent_worker *w,
                        const struct agent_assignment *a, struct agent_env *env);

/* ---- processes ---- */

/* A worker is over: reaped, or its command could not be executed (then exit_status is 127). */
static void worker_exited(struct agent_worker *w, int64_t exit_status, int term_signal)
{
    struct agent_group *g = w->g;

    assert(w->running && g->running > 0);
    w->running = false;
    g->running--;
    agent_progress_close(w);
    agent_control_close(w);
    agent_reaper_link_unlist_if_gone(w);
    if (g->state == GROUP_FREEING)
        return; /* killed by agent_group_free(): nobody to tell */
    if (g->running == 0 && g->pipes_open > 0)
        agent_relay_drain_start(g);
    /* Nothing of this start may outlive its last worker: what a worker left running, however it
     * detached, would keep the drain waiting while it writes (a drain counts silence). Before
     * on_exit, which may spawn workers again. */
    if (g->running == 0)
        agent_stop_kill_cgroup(g);
    agent_relay_exit(w, exit_status, term_signal);
}

static void worker_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct agent_worker *w = agent_group_worker_of(p->data, (uv_handle_t *)p);

    /* The one line per exit (the session adds none): a warning unless it exited 0. */
    if (term_signal)
        log_warn("worker rank %u (local rank %u, pid %d) was killed by signal %d (%s)", w->rank,
                 w->local_rank, w->pid, term_signal, strsignal(term_signal));
    else
        rdzv_log(exit_status ? RDZV_LOG_WARN : RDZV_LOG_INFO,
                 "worker rank %u (local rank %u, pid %d) exited with status %" PRId64, w->rank,
                 w->local_rank, w->pid, exit_status);
    w->proc_open = false;
    uv_close((uv_handle_t *)p, agent_group_worker_close_cb);
    worker_exited(w, exit_status, term_signal);
}

/* The process handle of a worker whose command could not be executed is closed: report the exit
 * (127) now, from the loop, as if a wrapper had tried the exec and failed. */
static void worker_noexec_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;
    struct agent_worker *w = agent_group_worker_of(g, h);

    agent_group_worker_handle_gone(g, h);
    worker_exited(w, 127, 0);
    group_settle(g);
}

static void worker_close_logs(struct agent_worker *w)
{
    for (unsigned k = 0; k < _OUT_MAX; k++)
        if (w->out[k].log_fd >= 0) {
            close(w->out[k].log_fd);
            w->out[k].log_fd = -1;
        }
}

/* Errors of uv_spawn() that are the system's, not the command's: the start fails. Any other
 * (ENOENT, EACCES, ENOEXEC, ...) comes from execvp() in the child: the worker "exits" 127. */
static bool spawn_error_is_resources(int r)
{
    return r == UV_EAGAIN || r == UV_ENOMEM || r == UV_EMFILE || r == UV_ENFILE || r == UV_ENOSYS;
}

/* The command cannot be executed: say so on the worker's stderr (relayed and logged, as a wrapper
 * that failed to exec it would have), then close its pipes. */
static void worker_cannot_run(struct agent_worker *w, int err)
{
    struct worker_out *o = &w->out[OUT_STDERR];
    char msg[PATH_MAX + 128];
    int n;

    n = snprintf(msg, sizeof(msg), "rdzv-agent: cannot run '%s': %s\n", w->g->cfg.argv[0],
                 strerror(-err));
    if (n < 0)
        n = 0;
    else if ((size_t)n >= sizeof(msg))
        n = (int)sizeof(msg) - 1;
    if (o->log_fd >= 0)
        (void)agent_relay_write_all(o->log_fd, msg, (size_t)n);
    if (n > 0)
        agent_relay_line(o, msg, (size_t)n - 1);
    for (unsigned k = 0; k < _OUT_MAX; k++)
        agent_relay_out_close(&w->out[k]);
}

/* The private temporary directory: error files, and the logs of redirected output when there
 * is no log_dir (then kept at free: say where). */
static int group_make_tmp(struct agent_group *g)
{
    int r = agent_dirs_make_tmp(g->cfg.run_id, &g->tmp_dir, &g->tmp_lock);

    if (r >= 0 && g->logs_only_in_tmp)
        log_info("workers' redirected output goes to files under %s", g->tmp_dir);
    else if (r >= 0 && g->logs_in_tmp) /* --tee: copies of what the console shows */
        log_info("workers' output is also written to files under %s, removed at the end; "
                 "--log-dir DIR keeps them", g->tmp_dir);
    return r;
}

/* Where each worker stream goes (agent_group_cfg: redirects, tee, console). */
static void group_setup_streams(struct agent_group *g)
{
    const struct agent_group_cfg *c = &g->cfg;

    for (unsigned i = 0; i < c->nproc; i++) {
        unsigned red = c->redirects ? c->redirects[i] : 0, tee = c->tee ? c->tee[i] : 0;
        bool shown = !c->console || c->console[i];

        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];
            unsigned bit = 1u << k;

            o->console = shown && (!(red & bit) || (tee & bit));
            o->to_file = ((red | tee) & bit) || !shown;
            if (o->to_file && !c->log_dir) {
                g->logs_in_tmp = true;
                g->logs_only_in_tmp |= !o->console;
            }
        }
    }
}

/* The worker's error file of this attempt and, with log_dir, its directory and log files
 * (agent-dirs.h). The private directory of error files is made here if agent_group_new() could
 * not. */
static int worker_prepare_dir(struct agent_group *g, struct agent_worker *w, unsigned attempt)
{
    const char *log_dir = g->cfg.log_dir;
    unsigned mask = AGENT_STD_OUT | AGENT_STD_ERR;
    int fds[_OUT_MAX], r;

    if (!log_dir && !g->tmp_dir) {
        r = group_make_tmp(g);
        if (r < 0)
            return r;
    }
    if (!log_dir && g->logs_in_tmp) {
        log_dir = g->tmp_dir;
        mask = (w->out[OUT_STDOUT].to_file ? AGENT_STD_OUT : 0) |
               (w->out[OUT_STDERR].to_file ? AGENT_STD_ERR : 0);
    }
    r = agent_dirs_worker(log_dir, g->tmp_dir, g->cfg.run_id, attempt, w->local_rank, mask,
                          &w->error_file, fds);
    if (r < 0 || !log_dir)
        return r;
    for (unsigned k = 0; k < _OUT_MAX; k++)
        w->out[k].log_fd = fds[k];
    return 0;
}

static int worker_spawn(struct agent_group *g, struct agent_worker *w,
                        const struct agent_assignment *a, struct agent_env *env)
{
    struct agent_env_in in = agent_group_env_in(w, a);
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[AGENT_CONTROL_FD + 1];
    int child_fd[_OUT_MAX] = {-1, -1}, progress_fd = -1, control_fd = -1;
    bool warm;
    int r;

    w->rank = a->rank_offset + w->local_rank;
    w->prefix_len = (size_t)snprintf(w->prefix, sizeof(w->prefix), "[rank%u]: ", w->rank);
    w->pid = 0;
    w->listed = w->group_killed = false;
    w->error[0] = '\0';
    w->said[0] = '\0';
    w->error_s = 0;
    r = worker_prepare_dir(g, w, a->restart_count);
    if (r < 0)
        goto out_close_logs;
    in.error_file = w->error_file;
    in.progress_fd = g->cfg.progress ? AGENT_PROGRESS_FD : 0;
    in.stacks_signal = agent_stacks_signal();
    in.progress_wait_ms = g->cfg.progress && g->cfg.progress_timeout_ms
                              ? (g->cfg.progress_timeout_ms + AGENT_PROGRESS_WAIT_DIV - 1) /
                                    AGENT_PROGRESS_WAIT_DIV
                              : 0;
    in.control_fd = g->cfg.control ? AGENT_CONTROL_FD : 0;
    r = agent_env_set(env, &in);
    if (r < 0)
        goto out_close_logs;
    if (g->cfg.progress) {
        r = agent_progress_open(w, &progress_fd);
        if (r < 0) {
            log_error_errno(r, "worker rank %u: cannot create its progress pipe", w->rank);
            goto out_close_logs;
        }
    }
    if (g->cfg.control) {
        r = agent_control_open(w, &control_fd);
        if (r < 0) {
            log_error_errno(r, "worker rank %u: cannot create its control pipe", w->rank);
            goto out_close_pipes;
        }
    }

    for (unsigned k = 0; k < _OUT_MAX; k++) {
        r = agent_relay_out_open(&w->out[k], &child_fd[k]);
        if (r < 0) {
            log_error_errno(r, "worker rank %u: cannot create its %s pipe", w->rank,
                            agent_out_name(k));
            goto out_close_pipes;
        }
    }
    /* stdin is inherited, as torchrun does (its own session has no controlling terminal); if the
     * agent has none, fd 0 may now be one of our pipes: give /dev/null instead. */
    stdio[0].flags = g->stdin_open ? UV_INHERIT_FD : UV_IGNORE;
    stdio[0].data.fd = 0;
    for (unsigned k = 0; k < _OUT_MAX; k++) {
        stdio[1 + k].flags = UV_INHERIT_FD;
        stdio[1 + k].data.fd = child_fd[k];
    }
    opts.exit_cb = worker_exit_cb;
    if (g->cfg.local_rank_argi)
        agent_cmd_format_rank(g->rank_arg, g->cfg.local_rank_flag, w->local_rank);
    opts.file = g->cfg.argv[0];
    opts.args = g->argv;
    opts.env = env->v;
    /* UV_IGNORE above 2 leaves the descriptor closed in the worker */
    stdio[AGENT_PROGRESS_FD].flags = g->cfg.progress ? UV_INHERIT_FD : UV_IGNORE;
    stdio[AGENT_PROGRESS_FD].data.fd = progress_fd;
    stdio[AGENT_CONTROL_FD].flags = g->cfg.control ? UV_INHERIT_FD : UV_IGNORE;
    stdio[AGENT_CONTROL_FD].data.fd = control_fd;
    opts.stdio = stdio;
    opts.stdio_count = g->cfg.control ? AGENT_CONTROL_FD + 1
                       : g->cfg.progress ? AGENT_PROGRESS_FD + 1
                                         : 3;
    opts.flags = UV_PROCESS_DETACHED; /* setsid(): the worker leads its own process group */
    warm = agent_standby_take(w, env->v, child_fd, progress_fd, control_fd, worker_exit_cb) == 0;
    r = warm ? 0 : uv_spawn(g->cfg.loop, &w->proc[w->cur], &opts);
    /* uv_spawn initialises the handle even when it fails: it must be closed either way. */
    w->proc[w->cur].data = g;
    if (!warm)
        agent_group_worker_handle_added(g, (uv_handle_t *)&w->proc[w->cur]);
    if (r >= 0 && !warm) {
        w->pid = w->proc[w->cur].pid;
        w->listed = true;
        agent_reaper_link_send_pgid(g, '+', w->pid);
    }
    if (r >= 0) {
        w->proc_open = true;
    } else if (spawn_error_is_resources(r)) {
        log_error_errno(r, "worker rank %u: cannot spawn %s", w->rank, g->cfg.argv[0]);
        uv_close((uv_handle_t *)&w->proc[w->cur], agent_group_worker_close_cb);
        goto out_close_pipes;
    }
    w->running = true;
    g->running++;
    for (unsigned k = 0; k < _OUT_MAX; k++)
        close(child_fd[k]);
    if (progress_fd >= 0)
        close(progress_fd);
    if (control_fd >= 0)
        close(control_fd);
    if (r < 0) {
        log_debug("workers: rank %u: cannot run %s: %s", w->rank, g->cfg.argv[0], uv_strerror(r));
        worker_cannot_run(w, r);
        uv_close((uv_handle_t *)&w->proc[w->cur], worker_noexec_close_cb);
        return 0;
    }
    for (unsigned k = 0; k < _OUT_MAX; k++)
        agent_relay_out_start(&w->out[k]);
    if (g->cfg.progress)
        agent_progress_start(w);
    log_info("started worker rank %u (local rank %u, pid %d)%s: %s", w->rank, w->local_rank,
             w->pid, warm ? " in its warm standby" : "", g->cfg.argv[0]);
    return 0;

out_close_pipes:
    for (unsigned k = 0; k < _OUT_MAX; k++) {
        if (child_fd[k] >= 0)
            close(child_fd[k]);
        agent_relay_out_close(&w->out[k]);
    }
    if (progress_fd >= 0)
        close(progress_fd);
    if (control_fd >= 0)
        close(control_fd);
    agent_progress_close(w);
    agent_control_close(w);
out_close_logs:
    worker_close_logs(w);
    return r;
}

/* ---- public API ---- */

/* The group's five timers and its SIGCHLD watcher (started with cfg.progress: the workers'
 * stops, agent_progress_stops). On failure those initialised are closing and g is freed once they
 * are closed (at once if none was): the caller must not touch g again. */
static int group_init_handles(struct agent_group *g)
{
    uv_timer_t *const timers[] = {&g->kill_timer, &g->drain_timer, &g->notify_timer,
                                  &g->reaper_timer, &g->progress_timer};
    size_t i;
    int r = 0;

    for (i = 0; i < RDZV_ARRAY_SIZE(timers); i++) {
        r = uv_timer_init(g->cfg.loop, timers[i]);
        if (r < 0)
            goto out_close_timers;
        timers[i]->data = g;
        g->handles++;
    }
    uv_unref((uv_handle_t *)&g->reaper_timer);
    r = uv_signal_init(g->cfg.loop, &g->sigchld);
    if (r < 0)
        goto out_close_timers;
    g->sigchld.data = g;
    g->handles++;
    /* libuv reaps exits on its own SIGCHLD watcher; this one only reads stops (no WEXITED). */
    if (g->cfg.progress)
        r = uv_signal_start(&g->sigchld, agent_progress_stops, SIGCHLD);
    uv_unref((uv_handle_t *)&g->sigchld);
    if (r < 0) {
        uv_close((uv_handle_t *)&g->sigchld, agent_group_handle_close_cb);
        goto out_close_timers;
    }
    return 0;

out_close_timers:
    group_set_state(g, GROUP_FREEING);
    if (i == 0) {
        group_destroy(g);
        return r;
    }
    while (i-- > 0)
        uv_close((uv_handle_t *)timers[i], agent_group_handle_close_cb);
    return r;
}

static void worker_respawn(struct agent_worker *w);

int agent_group_new(const struct agent_group_cfg *cfg, struct agent_group **ret)
{
    uint8_t rnd[AGENT_TOKEN_LEN / 2];
    struct agent_group *g;
    size_t argc;
    int r;

    if (!cfg->loop || !cfg->argv || !cfg->argv[0] || !cfg->self_exe || cfg->nproc == 0)
        return -EINVAL;
    if (cfg->run_id && (!*cfg->run_id || strchr(cfg->run_id, '/') ||
                        strcmp(cfg->run_id, ".") == 0 || strcmp(cfg->run_id, "..") == 0))
        return -EINVAL;
    if (cfg->devices)
        for (unsigned i = 0; i < cfg->nproc; i++)
            if (!cfg->devices[i])
                return -EINVAL;
    for (argc = 0; cfg->argv[argc]; argc++)
        ;
    if (cfg->local_rank_argi && (cfg->local_rank_argi >= argc || !cfg->local_rank_flag ||
                                 strlen(cfg->local_rank_flag) > AGENT_CMD_RANK_ARG_MAX - 12))
        return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->cfg = *cfg;
    agent_cgroup_init(&g->cgroup);
    g->settle = group_settle;
    g->slot_free = worker_respawn;
    g->argv = cfg->argv;
    g->workers = calloc(cfg->nproc, sizeof(*g->workers));
    if (cfg->local_rank_argi && g->workers) {
        g->argv = malloc((argc + 1) * sizeof(*g->argv));
        if (g->argv) {
            memcpy(g->argv, cfg->argv, (argc + 1) * sizeof(*g->argv));
            g->argv[cfg->local_rank_argi] = g->rank_arg;
        }
    }
    if (!g->workers || !g->argv) {
        free(g->workers);
        if (g->argv != cfg->argv)
            free(g->argv);
        free(g);
        return -ENOMEM;
    }
    g->stdin_open = fcntl(STDIN_FILENO, F_GETFD) >= 0;
    if (!g->cfg.role)
        g->cfg.role = "default";
    if (!g->cfg.run_id)
        g->cfg.run_id = "none";
    if (g->cfg.out_fd <= 0)
        g->cfg.out_fd = STDOUT_FILENO;
    if (g->cfg.err_fd <= 0)
        g->cfg.err_fd = STDERR_FILENO;
    for (unsigned i = 0; i < cfg->nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        w->g = g;
        w->local_rank = i;
        w->control_fd = w->standby_fd = -1;
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            w->out[k].w = w;
            w->out[k].which = k;
            w->out[k].log_fd = -1;
        }
    }
    group_setup_streams(g);
    for (size_t i = 0; i < sizeof(rnd); i += 8) {
        uint64_t v = rdzv_random_u64();

        memcpy(rnd + i, &v, sizeof(v));
    }
    rdzv_hex(rnd, sizeof(rnd), g->token);
    g->token[AGENT_TOKEN_LEN] = '\0';
    if (cfg->reaper_name)
        r = snprintf(g->reaper_name, sizeof(g->reaper_name), "%s", cfg->reaper_name) >=
                    (int)sizeof(g->reaper_name)
                ? -ENAMETOOLONG
                : 0;
    else
        r = agent_reaper_default_name(g->cfg.run_id, g->reaper_name, sizeof(g->reaper_name));
    if (r < 0) {
        g->done = NULL;
        group_destroy(g);
        return r;
    }
    r = group_init_handles(g);
    if (r < 0)
        return log_error_errno(r, "cannot initialise the worker group's timers");
    agent_relay_setup(g);
    /* Before the reaper link, which tells the reaper where it is. */
    agent_stop_cgroup_open(g);
    /* Now, not when the workers start: a connect() to the host's reaper, or starting one. */
    r = agent_reaper_link_start(g);
    if (r < 0) {
        log_error_errno(r, "cannot start the worker reaper %s", cfg->self_exe);
        agent_group_free(g, NULL, NULL);
        return r;
    }
    /* The private directory of error files: made while the agent waits for the rendezvous;
     * 256 agents starting their workers at once would all queue on /tmp. A failure here is
     * reported by the start, which tries again. */
    if (!g->cfg.log_dir)
        (void)group_make_tmp(g);
    agent_standby_start_all(g); /* a spare's too: its first start is a warm one */
    *ret = g;
    return 0;
}

/* The worker environment of a start: the agent's own, less what the group sets. */
static int group_env_init(struct agent_group *g, struct agent_env *env)
{
    int r = agent_env_init(env, environ, g->cfg.devices != NULL);

    if (r < 0)
        return r;
    if (g->cfg.nproc > 1 && !getenv("OMP_NUM_THREADS") && !g->omp_told) {
        log_info("OMP_NUM_THREADS is not set: each worker gets OMP_NUM_THREADS=1 (as with "
                 "torchrun); set it to tune performance");
        g->omp_told = true;
    }
    return 0;
}

/* A worker of agent_group_start_ranks() whose old handles are now closed: spawn it, unless the
 * group is being stopped or freed meanwhile. A failure is its exit with status 127. */
static void worker_respawn(struct agent_worker *w)
{
    struct agent_group *g = w->g;
    struct agent_env env = {0};
    int r;

    w->respawn = false;
    if (g->state != GROUP_ACTIVE)
        return;
    r = group_env_init(g, &env);
    if (r == 0) {
        agent_stop_cgroup_enter(g);
        r = worker_spawn(g, w, &g->respawn_a, &env);
        agent_stop_cgroup_leave(g);
        agent_standby_start(w);
    }
    agent_env_free(&env);
    if (r == 0) {
        agent_progress_arm(g);
        return;
    }
    log_error_errno(r, "worker local rank %u: cannot start it again", w->local_rank);
    if (g->cfg.on_exit)
        g->cfg.on_exit(g, w->local_rank, 127, 0, g->cfg.ud);
}

/* Keep a copy of a for the workers that agent_group_start_ranks() spawns later. */
static int respawn_save(struct agent_group *g, const struct agent_assignment *a)
{
    g->respawn_a = *a;
    if (snprintf(g->respawn_addr, sizeof(g->respawn_addr), "%s", a->master_addr) >=
            (int)sizeof(g->respawn_addr) ||
        snprintf(g->respawn_nccl, sizeof(g->respawn_nccl), "%s",
                 a->nccl_id_hex ? a->nccl_id_hex : "") >= (int)sizeof(g->respawn_nccl))
        return -EINVAL;
    g->respawn_a.master_addr = g->respawn_addr;
    g->respawn_a.nccl_id_hex = a->nccl_id_hex ? g->respawn_nccl : NULL;
    return 0;
}

/* A running worker that a partial start leaves running: it takes its rank in a, and a fresh
 * progress timeout (the generation change, told on its control channel, takes time). */
static void worker_keep(struct agent_worker *w, const struct agent_assignment *a)
{
    unsigned rank = a->rank_offset + w->local_rank;

    if (rank != w->rank)
        log_info("worker rank %u (local rank %u, pid %d) keeps running as rank %u", w->rank,
                 w->local_rank, w->pid, rank);
    w->rank = rank;
    w->prefix_len = (size_t)snprintf(w->prefix, sizeof(w->prefix), "[rank%u]: ", w->rank);
    uv_update_time(w->g->cfg.loop);
    w->progress.t_ms = w->progress.alive_ms = uv_now(w->g->cfg.loop);
    w->progress.hung = false;
}

static bool chosen(const bool *spawn, unsigned i)
{
    return !spawn || spawn[i];
}

/* Spawn the chosen workers now, or (active group, old handles still closing) once their slot is
 * free. On failure the group is stopped. */
static int group_spawn(struct agent_group *g, const struct agent_assignment *a, const bool *spawn,
                       struct agent_env *env)
{
    unsigned started = 0, n = 0;
    bool entered = false;
    int r = 0;

    /* The agent is in the workers' cgroup from the first spawn to the end of this loop: all in one
     * call, nothing else spawned meanwhile (agent_stop_cgroup_enter). */
    for (unsigned i = 0; i < g->cfg.nproc && r >= 0; i++) {
        struct agent_worker *w = &g->workers[i];

        if (!chosen(spawn, i)) {
            if (w->running)
                worker_keep(w, a);
            continue;
        }
        n++;
        /* Its output is relayed to the end (pipes at EOF once its process group is gone). */
        agent_stop_kill_leftover(w);
        if (w->handles > 0) {
            w->respawn = true;
            /* A process that left the group may hold the old pipes: the drain closes them
             * after AGENT_DRAIN_MS of silence, as after a last exit. */
            if (!uv_is_active((uv_handle_t *)&g->drain_timer))
                agent_relay_drain_start(g);
            continue;
        }
        if (!entered)
            agent_stop_cgroup_enter(g);
        entered = true;
        r = worker_spawn(g, w, a, env);
        if (r >= 0)
            started++;
    }
    if (entered)
        agent_stop_cgroup_leave(g);
    if (r >= 0) {
        agent_standby_start_all(g);
        agent_progress_arm(g);
        return 0;
    }
    log_error("started %u of %u worker%s, stopping them", started, n, rdzv_plural(n));
    if (g->worker_handles == 0) {
        group_set_state(g, GROUP_IDLE);
        group_notify_soon(g);
    } else {
        agent_group_stop(g, SIGTERM);
    }
    return r;
}

int agent_group_start_ranks(struct agent_group *g, const struct agent_assignment *a,
                            const bool *spawn)
{
    struct agent_env env = {0};
    bool any = false;
    int r;

    if (g->state != GROUP_IDLE && g->state != GROUP_ACTIVE)
        return -EBUSY;
    if (!a->master_addr || (uint64_t)a->rank_offset + g->cfg.nproc > a->world_size ||
        a->node_rank >= a->nnodes)
        return -EINVAL;
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        if (chosen(spawn, i)) {
            if (g->workers[i].running)
                return -EBUSY;
            any = true;
        }
    if (!any && g->state != GROUP_ACTIVE)
        return -EINVAL;
    r = respawn_save(g, a);
    if (r == 0)
        r = group_env_init(g, &env);
    if (r < 0)
        return r;
    if (g->state == GROUP_IDLE) {
        (void)uv_timer_stop(&g->notify_timer);
        group_set_state(g, GROUP_ACTIVE);
        g->stop_signal = 0;
    } else if (any) {
        /* the drain after a last exit is over: workers run again */
        (void)uv_timer_stop(&g->drain_timer);
    }
    if (any)
        log_info("starting %s%u worker%s (ranks %u..%u of %u, generation %" PRIu64
                 ", attempt %u)",
                 spawn ? "some of " : "", g->cfg.nproc, rdzv_plural(g->cfg.nproc), a->rank_offset,
                 a->rank_offset + g->cfg.nproc - 1, a->world_size, a->generation, a->restart_count);
    r = group_spawn(g, a, spawn, &env);
    agent_env_free(&env);
    return r;
}

int agent_group_start(struct agent_group *g, const struct agent_assignment *a)
{
    if (g->state != GROUP_IDLE)
        return -EBUSY;
    return agent_group_start_ranks(g, a, NULL);
}

unsigned agent_group_running(const struct agent_group *g)
{
    return g->running;
}

bool agent_group_rank_running(const struct agent_group *g, unsigned local_rank)
{
    return local_rank < g->cfg.nproc && g->workers[local_rank].running;
}

unsigned agent_group_following(const struct agent_group *g)
{
    unsigned n = 0;

    for (unsigned i = 0; i < g->cfg.nproc && g->cfg.progress; i++)
        n += g->workers[i].progress.control;
    return n;
}

int agent_group_reaper_pid(const struct agent_group *g)
{
    return agent_reaper_link_pid(g);
}

const char *agent_group_error_file(const struct agent_group *g, unsigned local_rank)
{
    if (local_rank >= g->cfg.nproc)
        return NULL;
    return g->workers[local_rank].error_file;
}

const char *agent_group_worker_error(const struct agent_group *g, unsigned local_rank)
{
    if (!g || local_rank >= g->cfg.nproc)
        return "";
    return g->workers[local_rank].said[0] ? g->workers[local_rank].said
                                          : g->workers[local_rank].error;
}

bool agent_group_output_open(const struct agent_group *g, unsigned local_rank)
{
    return g && local_rank < g->cfg.nproc && g->workers[local_rank].out[OUT_STDERR].open;
}

double agent_group_worker_error_time(const struct agent_group *g, unsigned local_rank)
{
    return g && local_rank < g->cfg.nproc ? g->workers[local_rank].error_s : 0;
}

void agent_group_free(struct agent_group *g, void (*done)(void *ud), void *ud)
{
    if (!g)
        return;
    assert(g->state != GROUP_FREEING);
    /* Running workers' handles are closed by worker_exit_cb once the SIGKILL lands: closing a
     * process handle here could pull it out of a batch of exits libuv is reporting right now
     * (free() called from on_exit), and would leave the worker unreaped. */
    if (g->running > 0) {
        log_warn("freeing the worker group with %u worker%s running, killing them", g->running,
                 rdzv_plural(g->running));
        agent_stop_kill(g, SIGKILL);
    }
    agent_stop_kill_leftovers(g);
    /* Removed (once empty) before the reaper hears "q": it kills the cgroup if the agent dies
     * meanwhile. */
    agent_stop_cgroup_close(g);
    agent_standby_stop_all(g);
    /* Every listed group is gone or SIGKILLed: the reaper has nothing left to do. */
    agent_reaper_link_stop(g);
    g->done = done;
    g->done_ud = ud;
    group_set_state(g, GROUP_FREEING);
    uv_close((uv_handle_t *)&g->kill_timer, agent_group_handle_close_cb);
    uv_close((uv_handle_t *)&g->notify_timer, agent_group_handle_close_cb);
    uv_close((uv_handle_t *)&g->reaper_timer, agent_group_handle_close_cb);
    uv_close((uv_handle_t *)&g->progress_timer, agent_group_handle_close_cb);
    uv_close((uv_handle_t *)&g->sigchld, agent_group_handle_close_cb);
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        agent_progress_close(w);
        agent_control_close(w);
        w->respawn = false;
        for (unsigned k = 0; k < _OUT_MAX; k++)
            agent_relay_out_close(&w->out[k]);
    }
    /* Everything read is in the sinks now (closing relayed the unfinished lines). */
    agent_relay_close(g);
    uv_close((uv_handle_t *)&g->drain_timer, agent_group_handle_close_cb);
}

void agent_group_stop(struct agent_group *g, int signum)
{
    switch (g->state) {
    case GROUP_IDLE:
        group_notify_soon(g);
        return;
    case GROUP_ACTIVE:
        group_set_state(g, GROUP_STOPPING);
        g->stop_signal = signum;
        agent_stop_arm_kill(g);
        /* Workers all gone, only waiting for a slow reader of their output: end now. */
        if (g->worker_handles == 0)
            group_notify_soon(g);
        if (g->running)
            log_info("stopping %u worker%s with signal %d, SIGKILL in %" PRIu64 " ms",
                     g->running, rdzv_plural(g->running), signum, g->cfg.grace_ms);
        break;
    case GROUP_STOPPING:
        if (g->running)
            log_info("stopping %u worker%s with signal %d", g->running, rdzv_plural(g->running),
                     signum);
        break;
    case GROUP_FREEING:
    case _GROUP_STATE_MAX:
        return;
    }
    agent_stop_kill(g, signum);
}
