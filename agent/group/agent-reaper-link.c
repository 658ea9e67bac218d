/* SPDX-License-Identifier: Apache-2.0 */
/* agent-reaper-link.c: the worker group's connection to the host's reaper (agent-reaper.h):
 * connect (or start one), register our token and stderr, list each worker's process group as it
 * is spawned and unlist it once gone, reconnect when the reaper dies, say "q" at free. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-workers-int.h"

extern char **environ;

#define REAPER_RESTART_MS 1000 /* most time before reconnecting to a reaper that is gone */

/* Our connection to the host's reaper; on the heap, replaced when it is gone. */
struct reaper {
    uv_pipe_t sock; /* first; lines out, "ok <pid>" in, then EOF when the reaper is gone */
    struct agent_group *g;
    int pid;    /* the reaper's, once acked */
    bool acked; /* "ok" received */
    size_t len;
    char rbuf[64];
};

static void reaper_timer_cb(uv_timer_t *t);

struct reaper_line {
    uv_write_t req;
    char text[]; /* what uv_try_write() left of the line */
};

static void reaper_write_cb(uv_write_t *req, int status)
{
    free(rdzv_container_of(req, struct reaper_line, req));
}

/* Send one line ("+<pgid>", "-<pgid>", "q"). Without a reaper (it is gone, a restart is pending)
 * the line is dropped: agent_reaper_link_start() lists every listed worker again. */
static void reaper_send(struct agent_group *g, const char *text)
{
    struct reaper_line *l;
    size_t n = strlen(text);
    uv_buf_t b;
    int r;

    if (!g->reaper)
        return;
    b = uv_buf_init((char *)text, (unsigned)n);
    /* Nearly always written at once: the reaper reads as fast as it can. */
    r = uv_try_write((uv_stream_t *)&g->reaper->sock, &b, 1);
    if (r == (int)n)
        return;
    if (r < 0 && r != UV_EAGAIN)
        goto out_fail; /* it is gone (EPIPE): the EOF on our end restarts it */
    /* The socket is full or has a queue: queue the rest behind it, in order. */
    if (r < 0)
        r = 0;
    l = malloc(sizeof(*l) + n - (size_t)r);
    if (!l) {
        r = -ENOMEM;
        goto out_fail;
    }
    memcpy(l->text, text + r, n - (size_t)r);
    b = uv_buf_init(l->text, (unsigned)(n - (size_t)r));
    r = uv_write(&l->req, (uv_stream_t *)&g->reaper->sock, &b, 1, reaper_write_cb);
    if (r == 0)
        return;
    free(l);
out_fail:
    log_debug("workers: cannot tell the reaper %.*s: %s", (int)n - 1, text, uv_strerror(r));
}

void agent_reaper_link_send_pgid(struct agent_group *g, char op, int pgid)
{
    char text[24];

    snprintf(text, sizeof(text), "%c%d\n", op, pgid);
    reaper_send(g, text);
}

static void reaper_close_cb(uv_handle_t *h)
{
    struct reaper *rp = h->data;
    struct agent_group *g = rp->g;

    free(rp);
    assert(g->handles > 0);
    g->handles--;
    if (g->state != GROUP_FREEING && !g->reaper) {
        /* Closed before its "ok": it was exiting as we came (its last agent had just gone); try
         * again at once. Else it died: connect again (or start one) after a random delay of up to
         * REAPER_RESTART_MS, so that the agents of a job whose reaper died do not all start one at
         * the same moment. */
        (void)uv_timer_start(&g->reaper_timer, reaper_timer_cb,
                             g->reaper_unacked == 1 ? 0 : rdzv_random_u64() % REAPER_RESTART_MS, 0);
    }
    agent_group_settle(g);
}

static void reaper_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct reaper *rp = h->data;

    buf->base = rp->rbuf + rp->len;
    buf->len = sizeof(rp->rbuf) - rp->len;
}

/* "ok <pid>" once; then EOF (or a reset) when the reaper is gone. */
static void reaper_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct reaper *rp = st->data;
    struct agent_group *g = rp->g;
    char *nl;

    if (nread > 0) {
        rp->len += (size_t)nread;
        nl = memchr(rp->rbuf, '\n', rp->len);
        if (!rp->acked && nl && strncmp(rp->rbuf, "ok ", 3) == 0) {
            *nl = '\0';
            rp->pid = atoi(rp->rbuf + 3);
            rp->acked = true;
            if (g->reaper_lost)
                log_warn("the worker reaper is back (pid %d)", rp->pid);
            else
                log_debug("workers: reaper pid %d has us", rp->pid);
            g->reaper_lost = false;
            g->reaper_unacked = 0;
        }
        if (nl || rp->len == sizeof(rp->rbuf))
            rp->len = 0;
        return;
    }
    if (nread == 0)
        return;
    assert(g->reaper == rp);
    g->reaper = NULL;
    if (!rp->acked)
        g->reaper_unacked++;
    /* Without an "ok" it closed as we came (its last agent had just gone): no news. */
    if (rp->acked) {
        log_warn("the worker reaper (pid %d) is gone (%s); starting another (until then, "
                 "workers would outlive a SIGKILLed agent)",
                 rp->pid, uv_strerror((int)nread));
        g->reaper_lost = true;
    }
    uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
}

static void reaper_spawn_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    free(h);
    assert(g->handles > 0);
    g->handles--;
    agent_group_settle(g);
}

/* The process we spawned daemonized (or failed): its handle has done its job. */
static void reaper_spawn_exit_cb(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct agent_group *g = p->data;

    if (exit_status != 0 || term_signal != 0)
        log_warn("the worker reaper %s exited with status %" PRId64 " (signal %d) as it started",
                 g->cfg.self_exe, exit_status, term_signal);
    g->reaper_spawn = NULL;
    p->data = g;
    uv_close((uv_handle_t *)p, reaper_spawn_close_cb);
}

/* environ without RDZV_AGENT_TOKEN, for the reaper: it is the host's, not an agent's worker.
 * Returns a heap array of borrowed strings, or NULL. */
static char **reaper_env(void)
{
    size_t n = 0, k = 0;
    char **v;

    while (environ && environ[n])
        n++;
    v = calloc(n + 1, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], AGENT_TOKEN_ENV "=", sizeof(AGENT_TOKEN_ENV)) != 0)
            v[k++] = environ[i];
    return v;
}

/* Nobody serves the name: start `self_exe --reaper <name>` with one end of a socket pair as its
 * first connection. Returns the other end in *ret_fd, or a negative errno. */
static int reaper_spawn(struct agent_group *g, int *ret_fd)
{
    char *args[] = {(char *)g->cfg.self_exe, "--reaper", g->reaper_name, NULL};
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    uv_process_t *p;
    char **env;
    int sv[2], r;

    if (g->reaper_spawn)
        return -EBUSY; /* the one we started is still starting */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    p = calloc(1, sizeof(*p));
    env = reaper_env();
    if (!p || !env) {
        r = -ENOMEM;
        goto out_free;
    }
    stdio[0].flags = UV_INHERIT_FD;
    stdio[0].data.fd = sv[1];
    stdio[1].flags = stdio[2].flags = UV_IGNORE;
    opts.file = g->cfg.self_exe;
    opts.args = args;
    opts.env = env;
    opts.stdio = stdio;
    opts.stdio_count = 3;
    opts.exit_cb = reaper_spawn_exit_cb;
    /* Its own session: a signal for the agent's process group (Ctrl-C) does not reach it. */
    opts.flags = UV_PROCESS_DETACHED;
    r = uv_spawn(g->cfg.loop, p, &opts);
    free(env);
    env = NULL;
    close(sv[1]);
    sv[1] = -1;
    p->data = g;
    g->handles++;
    if (r < 0) {
        uv_close((uv_handle_t *)p, reaper_spawn_close_cb);
        p = NULL;
        goto out_free;
    }
    uv_unref((uv_handle_t *)p);
    g->reaper_spawn = p;
    *ret_fd = sv[0];
    return 0;

out_free:
    free(env);
    free(p);
    close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    return r;
}

/* The host's reaper, if one of our user listens on the name. Returns the socket or -errno. */
static int reaper_connect(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    struct ucred cr;
    socklen_t len = sizeof(cr);
    int fd, r;

    memcpy(sa.sun_path + 1, name, n); /* abstract: sun_path[0] == '\0' */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0) {
        r = -errno;
        goto out_close;
    }
    /* Anyone may bind an abstract name: serve only with one of ours. */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != geteuid() ||
        cr.pid <= 0) {
        r = -EPERM;
        goto out_close;
    }
    return fd;

out_close:
    close(fd);
    return r;
}

/* "=<token> <pid>", with our stderr, where the reaper reports what it kills for us, and if there
 * is a workers' cgroup, its directory and its cgroup.kill open for writing (then /dev/null stands
 * for a closed stderr): what the reaper kills when we are gone, as descriptors, not a name. */
static int reaper_register(struct agent_group *g, int fd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(3 * sizeof(int))];
    } cm;
    struct msghdr msg = {0};
    struct iovec iov;
    char text[AGENT_TOKEN_LEN + 32];
    int fds[3] = {STDERR_FILENO, g->cgroup.dir_fd, g->cgroup.kill_fd}, nul = -1, r = 0;
    size_t n = agent_cgroup_on(&g->cgroup) ? 3 : 1;

    iov.iov_base = text;
    iov.iov_len = (size_t)snprintf(text, sizeof(text), "=%s %ld\n", g->token, (long)getpid());
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fcntl(STDERR_FILENO, F_GETFD) < 0) {
        if (n == 3)
            nul = fds[0] = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (nul < 0)
            n = 0;
    }
    if (n > 0) {
        memset(&cm, 0, sizeof(cm));
        msg.msg_control = cm.buf;
        msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
        cm.h.cmsg_level = SOL_SOCKET;
        cm.h.cmsg_type = SCM_RIGHTS;
        cm.h.cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(&cm.h), fds, n * sizeof(int));
    }
    while (r == 0 && sendmsg(fd, &msg, MSG_NOSIGNAL) < 0)
        if (errno != EINTR)
            r = -errno;
    if (nul >= 0)
        close(nul);
    return r;
}

/* Connect to the host's reaper (or start one), register, and list every worker whose group may be
 * alive. Returns 0 or a negative errno. */
int agent_reaper_link_start(struct agent_group *g)
{
    struct reaper *rp;
    int fd, r;

    assert(!g->reaper);
    for (int attempt = 1;; attempt++) {
        bool spawned = false;

        fd = reaper_connect(g->reaper_name);
        if (fd < 0) {
            r = reaper_spawn(g, &fd);
            if (r < 0)
                return r;
            spawned = true;
        }
        r = reaper_register(g, fd);
        if (r == 0)
            break;
        close(fd);
        /* A reaper exits once its last agent has left; one reached just as it did so (its name
         * still bound) takes no registration (EPIPE, ECONNRESET): connect again, or start one. */
        if (spawned || attempt == 3 || (r != -EPIPE && r != -ECONNRESET))
            return r;
    }
    rp = calloc(1, sizeof(*rp));
    if (!rp) {
        close(fd);
        return -ENOMEM;
    }
    r = uv_pipe_init(g->cfg.loop, &rp->sock, 0);
    if (r < 0) {
        free(rp);
        close(fd);
        return r;
    }
    rp->sock.data = rp;
    rp->g = g;
    g->handles++;
    r = uv_pipe_open(&rp->sock, fd);
    if (r < 0)
        close(fd);
    else
        r = uv_read_start((uv_stream_t *)&rp->sock, reaper_alloc_cb, reaper_read_cb);
    if (r < 0) {
        uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
        return r;
    }
    /* The reaper alone must not keep the loop running. */
    uv_unref((uv_handle_t *)&rp->sock);
    g->reaper = rp;
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        if (g->workers[i].listed)
            agent_reaper_link_send_pgid(g, '+', g->workers[i].pid);
    return 0;
}

static void reaper_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;
    int r;

    r = agent_reaper_link_start(g);
    if (r < 0) {
        log_error_errno(r, "cannot reach or start the worker reaper, retrying in %d ms",
                        REAPER_RESTART_MS);
        (void)uv_timer_start(t, reaper_timer_cb, REAPER_RESTART_MS, 0);
    }
}

/* At free: every listed group is gone or SIGKILLed. "q": no need to look for our token. */
void agent_reaper_link_stop(struct agent_group *g)
{
    struct reaper *rp = g->reaper;

    (void)uv_timer_stop(&g->reaper_timer);
    if (g->reaper_spawn) {
        /* Still starting: it gets the EOF of our end like any agent's. */
        uv_close((uv_handle_t *)g->reaper_spawn, reaper_spawn_close_cb);
        g->reaper_spawn = NULL;
    }
    if (!rp)
        return;
    /* Running workers whose groups were SIGKILLed are doomed: nothing left for it to do. */
    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (w->listed && w->group_killed) {
            w->listed = false;
            agent_reaper_link_send_pgid(g, '-', w->pid);
        }
    }
    reaper_send(g, "q\n");
    g->reaper = NULL;
    uv_close((uv_handle_t *)&rp->sock, reaper_close_cb);
}

int agent_reaper_link_pid(const struct agent_group *g)
{
    return g->reaper && g->reaper->acked ? g->reaper->pid : 0;
}

/* ---- process groups listed with the reaper ---- */

bool agent_reaper_link_pgroup_gone(int pgid)
{
    return kill(-pgid, 0) < 0 && errno == ESRCH;
}

/* Unlist w's group ("-pid") once it is known gone: its worker reaped and no process left in it,
 * or SIGKILL sent to it (its processes are doomed, and the id cannot be reused before the last of
 * them is gone). An exited worker's group that still has processes (a lingering descendant)
 * stays listed: it is checked again when the worker's pipes close and at the end of the start. */
void agent_reaper_link_unlist_if_gone(struct agent_worker *w)
{
    if (!w->listed || w->running)
        return;
    if (!w->group_killed && !agent_reaper_link_pgroup_gone(w->pid))
        return;
    w->listed = false;
    agent_reaper_link_send_pgid(w->g, '-', w->pid);
}
