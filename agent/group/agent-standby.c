/* SPDX-License-Identifier: Apache-2.0 */
/* agent-standby.c: warm standbys (--warm-workers, cfg.standby_argv): one Python interpreter per
 * local rank that has imported torch and waits on a socket (python/rdzv/standby.py says what it
 * is sent). Each is a child of the agent like a worker: uv_spawn()ed in a session of its own (its
 * pid is its process group), listed with the reaper, carrying the group's token; it runs outside
 * the workers' cgroup, which is killed at the end of every start, until it takes its rank. Its
 * process handle is the worker's other one (w->proc[!w->cur]): when it takes the rank the two
 * swap, and the agent has a worker whose pid, process group, exit and pipes are those of one it
 * spawned. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-env.h"
#include "agent/group/agent-workers-int.h"

extern char **environ;

#define STANDBY_FD 3 /* the start socket's descriptor in the standby */
#define STANDBY_FDS 4 /* stdout, stderr, the progress and the control channel */

static void standby_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    agent_group_worker_of(g, h)->standby_open = false;
    agent_group_handle_close_cb(h);
}

/* Its end of the socket and its listing; its process group SIGKILLed if anything is left. */
static void standby_forget(struct agent_worker *w)
{
    if (w->standby_fd >= 0)
        close(w->standby_fd);
    w->standby_fd = -1;
    if (w->standby_pid > 0) {
        if (!agent_reaper_link_pgroup_gone(w->standby_pid))
            (void)kill(-w->standby_pid, SIGKILL);
        agent_reaper_link_send_pgid(w->g, '-', w->standby_pid);
    }
    w->standby_pid = 0;
}

/* A standby that exited before it took a rank: killed by us, or it failed (then no more). */
static void standby_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct agent_group *g = p->data;
    struct agent_worker *w = agent_group_worker_of(g, (uv_handle_t *)p);

    if (!w->standby_killed && g->state != GROUP_FREEING && !g->warm_off) {
        log_warn("--warm-workers: the standby of local rank %u (pid %d) %s %d before it was "
                 "used: workers start cold from now on (is the rdzv Python package importable "
                 "by %s?)",
                 w->local_rank, w->standby_pid, sig ? "was killed by signal" : "exited with status",
                 sig ? sig : (int)status, g->cfg.standby_argv[0]);
        g->warm_off = true;
    }
    standby_forget(w);
    uv_close((uv_handle_t *)p, standby_close_cb);
}

static void standby_kill(struct agent_worker *w)
{
    if (w->standby_pid > 0 && !w->standby_killed && kill(-w->standby_pid, SIGKILL) == 0)
        w->standby_killed = true;
}

void agent_standby_start(struct agent_worker *w)
{
    struct agent_group *g = w->g;
    uv_process_t *p = &w->proc[!w->cur];
    struct agent_assignment none = {.master_addr = "", .world_size = g->cfg.nproc, .nnodes = 1};
    struct agent_env_in in = agent_group_env_in(w, g->respawn_a.master_addr ? &g->respawn_a
                                                                            : &none);
    uv_stdio_container_t stdio[STANDBY_FD + 1];
    struct agent_env env = {0};
    int sv[2], r;

    if (!g->cfg.standby_argv || g->warm_off || w->standby_open || g->state == GROUP_FREEING)
        return;
    r = agent_env_init(&env, environ, g->cfg.devices != NULL);
    if (r == 0)
        r = agent_env_set(&env, &in);
    if (r == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        r = -errno;
    if (r < 0) {
        agent_env_free(&env);
        log_warn_errno(r, "--warm-workers: cannot start the standby of local rank %u",
                       w->local_rank);
        return;
    }
    stdio[0].flags = g->stdin_open ? UV_INHERIT_FD : UV_IGNORE;
    stdio[0].data.fd = 0;
    stdio[1].flags = UV_IGNORE; /* it keeps its output until it takes the rank */
    stdio[2].flags = UV_INHERIT_FD; /* what the interpreter says if it cannot even start */
    stdio[2].data.fd = g->cfg.err_fd;
    stdio[STANDBY_FD].flags = UV_INHERIT_FD;
    stdio[STANDBY_FD].data.fd = sv[1];
    r = uv_spawn(g->cfg.loop, p,
                 &(uv_process_options_t){.exit_cb = standby_exit_cb,
                                         .file = g->cfg.standby_argv[0],
                                         .args = g->cfg.standby_argv, .env = env.v,
                                         .stdio = stdio, .stdio_count = STANDBY_FD + 1,
                                         .flags = UV_PROCESS_DETACHED});
    agent_env_free(&env);
    close(sv[1]);
    p->data = g;
    g->handles++;
    w->standby_open = true;
    w->standby_killed = false;
    if (r < 0) {
        close(sv[0]);
        log_warn("--warm-workers: cannot start the standby of local rank %u (%s): workers start "
                 "cold",
                 w->local_rank, uv_strerror(r));
        g->warm_off = true;
        uv_close((uv_handle_t *)p, standby_close_cb);
        return;
    }
    w->standby_pid = p->pid;
    w->standby_fd = sv[0];
    agent_reaper_link_send_pgid(g, '+', w->standby_pid);
    log_info("--warm-workers: standby of local rank %u started (pid %d)", w->local_rank,
             w->standby_pid);
}

void agent_standby_start_all(struct agent_group *g)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        agent_standby_start(&g->workers[i]);
}

void agent_standby_stop_all(struct agent_group *g)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];
        uv_process_t *p = &w->proc[!w->cur];

        standby_kill(w);
        /* Its handle is closed now, not at its exit: the agent closes every handle left once the
         * group is freed (rdzv-agent's end), and the group goes only once this one is closed
         * back. Not one whose exit libuv reports in this very batch (free() from on_exit): it
         * was reaped then (kill(pid, 0) fails), and its exit callback closes it. What is killed
         * here is reaped by init once the agent is gone. */
        if (w->standby_open && w->standby_pid > 0 && !uv_is_closing((uv_handle_t *)p) &&
            kill(w->standby_pid, 0) == 0) {
            standby_forget(w);
            uv_close((uv_handle_t *)p, standby_close_cb);
        }
    }
}

/* The message of python/rdzv/standby.py. */
static int standby_message(struct agent_worker *w, char *const *env, const int *targets,
                           unsigned n, struct rdzv_buf *b)
{
    const struct agent_group_cfg *c = &w->g->cfg;
    char cwd[PATH_MAX];
    size_t cwd_len = sizeof(cwd), argc = 0, envc = 0;
    int r = uv_cwd(cwd, &cwd_len);

    while (w->g->argv[c->warm_argi + argc])
        argc++;
    while (env[envc])
        envc++;
    if (r == 0)
        r = rdzv_buf_printf(b, "rdzv-standby 1%c%s%c%s%c", 0, c->warm_module ? "module" : "path",
                            0, cwd, 0);
    for (unsigned i = 0; r == 0 && i < n; i++)
        r = rdzv_buf_printf(b, "%s%d", i ? "," : "", targets[i]);
    if (r == 0)
        r = rdzv_buf_printf(b, "%c%zu%c", 0, argc, 0);
    for (size_t i = 0; r == 0 && i < argc; i++)
        r = rdzv_buf_put(b, w->g->argv[c->warm_argi + i], strlen(w->g->argv[c->warm_argi + i]) + 1);
    if (r == 0)
        r = rdzv_buf_printf(b, "%zu%c", envc, 0);
    for (size_t i = 0; r == 0 && i < envc; i++)
        r = rdzv_buf_put(b, env[i], strlen(env[i]) + 1);
    return r;
}

/* The whole message and the descriptors in one sendmsg, or an error: the socket is empty and the
 * standby ready, so a message that does not fit its buffer (an environment of 200 KiB) fails. */
static int standby_send(int fd, const struct rdzv_buf *b, const int *fds, unsigned n)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * STANDBY_FDS)];
    } u = {0};
    struct iovec iov = {b->data, b->len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    ssize_t sent;

    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * n);
    do
        sent = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (sent < 0 && errno == EINTR);
    if (sent < 0)
        return -errno;
    return (size_t)sent == b->len ? 0 : -EMSGSIZE;
}

int agent_standby_take(struct agent_worker *w, char *const *env, const int *child_fd,
                       int progress_fd, int control_fd, uv_exit_cb exit_cb)
{
    struct agent_group *g = w->g;
    uv_process_t *p = &w->proc[!w->cur];
    int fds[STANDBY_FDS] = {child_fd[0], child_fd[1]}, targets[STANDBY_FDS] = {1, 2};
    unsigned n = 2;
    struct rdzv_buf b = {0};
    int r;

    if (w->standby_pid <= 0 || w->standby_killed || w->standby_fd < 0)
        return -ENOENT;
    if (progress_fd >= 0) {
        fds[n] = progress_fd;
        targets[n++] = AGENT_PROGRESS_FD;
    }
    if (control_fd >= 0) {
        fds[n] = control_fd;
        targets[n++] = AGENT_CONTROL_FD;
    }
    r = standby_message(w, env, targets, n, &b);
    if (r == 0)
        r = standby_send(w->standby_fd, &b, fds, n);
    rdzv_buf_free(&b);
    if (r < 0) {
        log_warn_errno(r, "--warm-workers: cannot hand local rank %u to its standby (pid %d): "
                          "starting it cold",
                       w->local_rank, w->standby_pid);
        standby_kill(w);
        return r;
    }
    close(w->standby_fd); /* its EOF: the message is whole */
    w->standby_fd = -1;
    /* Everything it starts from now on is the worker's: in the workers' cgroup. */
    r = agent_cgroup_movable(&g->cgroup) ? agent_cgroup_move(&g->cgroup, w->standby_pid) : 0;
    if (r < 0)
        log_warn_errno(r, "--warm-workers: cannot move the standby %d into the workers' cgroup %s: "
                          "what it starts is tracked by its process group and the token scan",
                       w->standby_pid, g->cgroup.name);
    p->exit_cb = exit_cb;
    w->cur = !w->cur;
    w->pid = w->standby_pid;
    w->standby_pid = 0;
    w->standby_open = false;
    w->listed = true; /* since its start */
    agent_group_worker_handle_adopt(g, (uv_handle_t *)p);
    return 0;
}
