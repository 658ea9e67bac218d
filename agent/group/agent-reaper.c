/* SPDX-License-Identifier: Apache-2.0 */
/* agent-reaper.c: the host's reaper process (see agent-reaper.h): per connected agent, a set of
 * process groups; when an agent's connection ends, its groups and its token's processes die. */
#include "agent/group/agent-reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "agent/group/agent-cgroup.h"

#define RETRY_MAX 256       /* processes looked at twice by the token scan (see token_scan) */
#define LINE_MAX_LEN 128    /* longest line an agent sends ("=<token> <pid>") */
#define TOKENS_MAX_LEN 4096 /* RDZV_AGENT_TOKEN values longer than this are cut (124 levels) */
#define EVENTS_MAX 64
#define CGROUP_REMOVE_MS 30000 /* a killed cgroup is removed once empty, until then at most */
#define CGROUP_RECHECK_MS 1000 /* ... looked at again after 10, 20, 40 ms ..., then this */

/* What an epoll event is for (the listening socket's is NULL): the first member of each. */
enum ev_kind { EV_CONN = 1, EV_CGROUP };

/* A set of process groups: a handful per agent, so a plain array. */
struct pgid_set {
    pid_t *v;
    size_t n, cap;
};

/* One agent's connection. */
struct conn {
    enum ev_kind kind; /* EV_CONN */
    int fd;
    int err_fd; /* the agent's stderr, received with its first line; -1 until then */
    int cg_fd;  /* its workers' cgroup directory, received with it (checked); -1: none */
    int kill_fd; /* that cgroup's cgroup.kill, opened for writing by the agent; -1 with cg_fd */
    int agent;  /* its pid, from its "=" line */
    bool named; /* "=" received: token is set */
    bool quit;  /* "q" received: a clean end, no scan */
    char token[AGENT_TOKEN_LEN + 1];
    struct pgid_set set;
    size_t listed;  /* groups SIGKILLed at its end */
    unsigned found; /* more groups found by its token */
    size_t len;     /* bytes of an unfinished line in line[] */
    char line[LINE_MAX_LEN];
};

/* The workers' cgroup of an agent gone, killed: removed once empty (its cgroup.events wakes
 * epoll with EPOLLPRI when that changes; looked at again after a growing delay too, in case the
 * change came before rmdir could succeed, or its notice was lost), or left for the next agent when
 * CGROUP_REMOVE_MS have passed. */
struct gone_cgroup {
    enum ev_kind kind; /* EV_CGROUP */
    int dir, ev;       /* the directory the agent passed, its cgroup.events */
    uint64_t deadline, recheck; /* rdzv_now_ms() */
    unsigned delay_ms;          /* from recheck to the one after */
    struct gone_cgroup *next;
};

struct reaper {
    int ep;
    int lfd; /* listening socket, -1 if another reaper owns the name */
    unsigned conns;
    struct conn **ended; /* ended this round: one /proc scan for all of them */
    size_t nended, cap;
    struct gone_cgroup *gone; /* killed, not removed yet: the reaper stays for them */
};

static bool set_has(const struct pgid_set *s, pid_t pgid)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == pgid)
            return true;
    return false;
}

static void set_add(struct pgid_set *s, pid_t pgid)
{
    if (set_has(s, pgid))
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        pid_t *v = realloc(s->v, cap * sizeof(*v));

        /* Out of memory: the token scan at EOF still finds this group's processes. */
        if (!v)
            return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = pgid;
}

static void set_del(struct pgid_set *s, pid_t pgid)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == pgid) {
            s->v[i] = s->v[--s->n];
            return;
        }
}

static bool token_valid(const char *p, size_t n)
{
    if (n != AGENT_TOKEN_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return false;
    return true;
}

/* A line to fd (the agent's stderr) with one write(2). */
static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n;

    if (fd < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 1)
        n = (int)sizeof(buf) - 1;
    if (n > 0)
        (void)!write(fd, buf, (size_t)n);
}

int agent_reaper_default_name(const char *run_id, char *buf, size_t len)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a: run ids may be longer than a socket name */
    struct stat st;
    int n;

    for (const char *p = run_id; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    /* Another PID namespace means other pids: its agents must not share our reaper. */
    if (stat("/proc/self/ns/pid", &st) < 0)
        st.st_ino = 0;
    n = snprintf(buf, len, "rdzv-reaper.1.%u.%lu.%016llx", (unsigned)geteuid(),
                 (unsigned long)st.st_ino, (unsigned long long)h);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* ---- the token scan ---- */

/* The RDZV_AGENT_TOKEN value in /proc/<pid>/environ, NUL-terminated in out (cut at len - 1).
 * Returns 1 if found, 0 if not, -1 if the environment reads empty (a kernel thread, a zombie, or a
 * process in the middle of execve), -2 if unreadable. */
static int environ_tokens(pid_t pid, char *out, size_t len)
{
    static const char prefix[] = AGENT_TOKEN_ENV "=";
    enum { IN_NAME, IN_VALUE, SKIP } st = IN_NAME;
    char path[48], buf[4096];
    size_t pos = 0, o = 0;
    bool any = false;
    ssize_t k;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -2;
    while ((k = read(fd, buf, sizeof(buf))) > 0) {
        any = true;
        for (ssize_t i = 0; i < k; i++) {
            char c = buf[i];

            if (st == IN_NAME) {
                if (c == prefix[pos]) {
                    if (++pos == sizeof(prefix) - 1)
                        st = IN_VALUE;
                } else {
                    st = c ? SKIP : IN_NAME;
                    pos = 0;
                }
            } else if (st == IN_VALUE) {
                if (!c) {
                    out[o] = '\0';
                    close(fd);
                    return 1;
                }
                if (o + 1 < len)
                    out[o++] = c;
            } else if (!c) {
                st = IN_NAME;
                pos = 0;
            }
        }
    }
    close(fd);
    if (k < 0)
        return -2;
    if (st == IN_VALUE) {
        out[o] = '\0';
        return 1;
    }
    return any ? 0 : -1;
}

/* A user process with an empty environment as seen in /proc: not a kernel thread (child of
 * kthreadd, pid 2) and not a zombie. */
static bool may_be_execing(pid_t pid)
{
    char path[48], buf[512], *p;
    long ppid;
    ssize_t k;
    int fd;

    if (pid == 2)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    k = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (k <= 0)
        return false;
    buf[k] = '\0';
    /* "<pid> (<comm>) <state> <ppid> ...": comm may hold anything, so look after the last ')' */
    p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == '\0' || p[3] != ' ')
        return false;
    if (p[2] == 'Z' || p[2] == 'X')
        return false;
    ppid = strtol(p + 4, NULL, 10);
    return ppid != 2;
}

/* The ended connection whose token is one of the comma-separated tokens, or NULL. */
static struct conn *match_tokens(struct reaper *r, const char *tokens)
{
    const char *p = tokens;

    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);

        if (n == AGENT_TOKEN_LEN)
            for (size_t i = 0; i < r->nended; i++) {
                struct conn *c = r->ended[i];

                if (c->named && !c->quit && memcmp(c->token, p, AGENT_TOKEN_LEN) == 0)
                    return c;
            }
        if (!comma)
            return NULL;
        p = comma + 1;
    }
}

/* SIGKILL pid's process group (pid alone if the group is not one we may kill), unless c killed that
 * group already. */
static void kill_group_of(pid_t pid, struct conn *c)
{
    pid_t pgid = getpgid(pid);

    if (pgid < 0 || set_has(&c->set, pgid))
        return;
    if (pgid <= 1 || pgid == getpgrp()) {
        (void)kill(pid, SIGKILL);
    } else {
        (void)kill(-pgid, SIGKILL);
        set_add(&c->set, pgid);
    }
    c->found++;
}

/* Check one process; remember it for a second look if its environment is empty for now. */
static void scan_one(struct reaper *r, pid_t pid, pid_t *retry, unsigned *nretry, char *tokens)
{
    struct conn *c;
    int k = environ_tokens(pid, tokens, TOKENS_MAX_LEN);

    if (k > 0 && (c = match_tokens(r, tokens)))
        kill_group_of(pid, c);
    else if (k == -1 && retry && *nretry < RETRY_MAX && may_be_execing(pid))
        retry[(*nretry)++] = pid;
}

/*
 * One pass over /proc for the tokens of every connection that ended this round (several agents
 * killed at once cost one scan). A worker that the dead agent forked but that was still inside
 * execve when the connection reached EOF shows an empty environment for a few microseconds (the new
 * image's is set up after close-on-exec descriptors are closed): such processes are looked at once
 * more after the pass, which takes milliseconds.
 */
static void token_scan(struct reaper *r)
{
    pid_t retry[RETRY_MAX], self = getpid();
    unsigned nretry = 0;
    struct dirent *de;
    char *tokens;
    DIR *d;

    tokens = malloc(TOKENS_MAX_LEN);
    d = opendir("/proc");
    if (!d || !tokens) {
        for (size_t i = 0; i < r->nended; i++)
            say(r->ended[i]->err_fd, "rdzv-agent: reaper: cannot scan /proc: %s\n",
                strerror(errno));
        if (d)
            closedir(d);
        free(tokens);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        int64_t v;

        if (rdzv_parse_i64n((const uint8_t *)de->d_name, strlen(de->d_name), &v) < 0 || v <= 1 ||
            v > INT32_MAX || (pid_t)v == self)
            continue;
        scan_one(r, (pid_t)v, retry, &nretry, tokens);
    }
    closedir(d);
    for (unsigned i = 0; i < nretry; i++)
        scan_one(r, retry[i], NULL, NULL, tokens);
    free(tokens);
}

/* ---- connections ---- */

static int conn_add(struct reaper *r, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
    struct conn *c = calloc(1, sizeof(*c));

    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->kind = EV_CONN;
    c->fd = fd;
    c->err_fd = c->cg_fd = c->kill_fd = -1;
    ev.data.ptr = c;
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        free(c);
        return -errno;
    }
    r->conns++;
    return 0;
}

/* The agent is gone (or said "q" and closed): its listed groups die now, the rest after the
 * round's scan. */
static void conn_free(struct conn *c)
{
    if (c->err_fd >= 0)
        close(c->err_fd);
    if (c->cg_fd >= 0)
        close(c->cg_fd);
    if (c->kill_fd >= 0)
        close(c->kill_fd);
    free(c->set.v);
    free(c);
}

static void conn_end(struct reaper *r, struct conn *c)
{
    (void)epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    r->conns--;
    c->listed = c->set.n;
    for (size_t i = 0; i < c->set.n; i++)
        (void)kill(-c->set.v[i], SIGKILL);
    if (r->nended == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        struct conn **v = realloc(r->ended, cap * sizeof(*v));

        if (!v) {
            /* No room to scan for it: its listed groups and its cgroup are dead, that is all
             * we can do. */
            say(c->err_fd,
                "rdzv-agent: reaper: out of memory, not scanning for agent %d's "
                "workers\n",
                c->agent);
            if (c->cg_fd >= 0 && !c->quit)
                (void)agent_cgroup_kill_at(c->cg_fd, c->kill_fd);
            conn_free(c);
            return;
        }
        r->ended = v;
        r->cap = cap;
    }
    r->ended[r->nended++] = c;
}

/* Where the directory fd is, for messages only (nothing is done by this name). */
static void fd_path(int fd, char *out, size_t len)
{
    char link[48];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, out, len - 1);
    if (n < 0)
        n = snprintf(out, len, "(descriptor %d)", fd) < 0 ? 0 : (ssize_t)strlen(out);
    out[n] = '\0';
}

/* Hand c's cgroup over to the list of those to remove once empty. */
static void gone_add(struct reaper *r, struct conn *c)
{
    struct epoll_event ev = {.events = EPOLLPRI};
    struct gone_cgroup *gc = calloc(1, sizeof(*gc));
    int k;

    if (!gc)
        return; /* left to the next agent on the host (agent_cgroup_remove_stale()) */
    gc->kind = EV_CGROUP;
    gc->dir = c->cg_fd;
    c->cg_fd = -1;
    gc->deadline = rdzv_now_ms() + CGROUP_REMOVE_MS;
    gc->delay_ms = 10;
    k = agent_cgroup_open_at(gc->dir, "cgroup.events", O_RDONLY);
    gc->ev = k;
    ev.data.ptr = gc;
    /* Without it, it is looked at on every wakeup until the deadline. */
    if (k >= 0)
        (void)epoll_ctl(r->ep, EPOLL_CTL_ADD, k, &ev);
    gc->next = r->gone;
    r->gone = gc;
}

/* The workers' cgroups of the agents gone without a "q": everything in them is SIGKILLed, however
 * it left its worker's process group and environment; each is removed once empty (gone_check). */
static void cgroups_kill(struct reaper *r)
{
    for (size_t i = 0; i < r->nended; i++) {
        struct conn *c = r->ended[i];
        char where[AGENT_CGROUP_PATH_MAX];
        int k;

        if (c->cg_fd < 0 || c->quit)
            continue;
        k = agent_cgroup_kill_at(c->cg_fd, c->kill_fd);
        if (k != 0)
            fd_path(c->cg_fd, where, sizeof(where));
        if (k > 0)
            say(c->err_fd,
                "rdzv-agent: agent %d is gone: SIGKILLed what was left in its workers' cgroup "
                "%s\n",
                c->agent, where);
        else if (k < 0)
            say(c->err_fd, "rdzv-agent: reaper: cannot kill what is in the cgroup %s: %s\n",
                where, strerror(-k));
        gone_add(r, c);
    }
}

/* Remove the killed cgroups that are empty now; forget those past their deadline (the next agent
 * in this PID namespace removes them). Returns the milliseconds until the next look (a recheck or
 * a deadline), or -1 when none is left. */
static int gone_check(struct reaper *r)
{
    uint64_t now = rdzv_now_ms(), next = UINT64_MAX;
    struct gone_cgroup **pp = &r->gone;

    while (*pp) {
        struct gone_cgroup *gc = *pp;
        int k = gc->ev >= 0 ? agent_cgroup_events_populated(gc->ev) : 0;

        if (k == 0)
            k = agent_cgroup_remove_at(gc->dir);
        if (k != -EBUSY && k != 1)
            k = 0; /* removed, or it cannot be: done */
        if (k != 0 && now < gc->deadline) {
            if (now >= gc->recheck) {
                gc->recheck = now + gc->delay_ms;
                gc->delay_ms = gc->delay_ms * 2 < CGROUP_RECHECK_MS ? gc->delay_ms * 2
                                                                    : CGROUP_RECHECK_MS;
            }
            if (gc->recheck < next)
                next = gc->recheck;
            if (gc->deadline < next)
                next = gc->deadline;
            pp = &gc->next;
            continue;
        }
        *pp = gc->next;
        if (gc->ev >= 0)
            close(gc->ev); /* out of the epoll set with it */
        close(gc->dir);
        free(gc);
    }
    return next == UINT64_MAX ? -1 : (int)(next - now);
}

/* After the scan: report and free what ended this round. */
static void conns_finish(struct reaper *r)
{
    bool scan = false;

    for (size_t i = 0; i < r->nended; i++)
        scan |= r->ended[i]->named && !r->ended[i]->quit;
    if (scan)
        token_scan(r);
    for (size_t i = 0; i < r->nended; i++) {
        struct conn *c = r->ended[i];

        if (c->listed > 0 || c->found > 0)
            say(c->err_fd,
                "rdzv-agent: agent %d is gone: SIGKILLed the %zu worker process group(s) it had "
                "listed and %u more found by its token\n",
                c->agent, c->listed, c->found);
    }
    cgroups_kill(r);
    for (size_t i = 0; i < r->nended; i++)
        conn_free(r->ended[i]);
    r->nended = 0;
}

static void conn_line(struct conn *c, const char *p, size_t n)
{
    int64_t v;

    if (n == 1 && p[0] == 'q') {
        c->quit = true;
        return;
    }
    if (n >= 2 && p[0] == '=') {
        const char *sp = memchr(p, ' ', n);
        char ok[48];
        int k;

        if (!sp || !token_valid(p + 1, (size_t)(sp - p - 1)) ||
            rdzv_parse_i64n((const uint8_t *)sp + 1, n - (size_t)(sp + 1 - p), &v) < 0 || v < 1 ||
            v > INT32_MAX)
            return;
        memcpy(c->token, p + 1, AGENT_TOKEN_LEN);
        c->token[AGENT_TOKEN_LEN] = '\0';
        c->agent = (int)v;
        c->named = true;
        k = snprintf(ok, sizeof(ok), "ok %d\n", (int)getpid());
        (void)!send(c->fd, ok, (size_t)k, MSG_NOSIGNAL | MSG_DONTWAIT);
        return;
    }
    if (n < 2 || (p[0] != '+' && p[0] != '-'))
        return;
    if (rdzv_parse_i64n((const uint8_t *)p + 1, n - 1, &v) < 0 || v <= 1 || v > INT32_MAX)
        return;
    if (p[0] == '+')
        set_add(&c->set, (pid_t)v);
    else
        set_del(&c->set, (pid_t)v);
}

/* The descriptors that came with the agent's first line: its stderr, then, if it has a workers'
 * cgroup, the cgroup's directory and its cgroup.kill, opened for writing by the agent; any other,
 * or any later, is closed. The cgroup is kept only if the directory is on a cgroup2 file system
 * and the file is its cgroup.kill: the reaper writes what the agent could write itself, never
 * what a path names. */
static void conn_fds(struct conn *c, int *fds, size_t n)
{
    int k = n >= 3 ? agent_cgroup_kill_check(fds[1], fds[2]) : 0;

    if (c->named || c->err_fd >= 0 || n == 0) {
        for (size_t i = 0; i < n; i++)
            close(fds[i]);
        return;
    }
    c->err_fd = fds[0];
    /* ENOENT: the cgroup is gone already (an agent that ended at once removed it before the
     * reaper read its first line): nothing to kill, and nothing to say after the agent's last
     * line (rendezvous-wrong-endpoint saw this line follow the agent's own). */
    if (n >= 3 && k < 0 && k != -ENOENT)
        say(c->err_fd,
            "rdzv-agent: reaper: the workers' cgroup passed is not a cgroup v2 directory and "
            "its cgroup.kill open for writing (%s): ignored\n",
            strerror(-k));
    if (n >= 3 && k == 0) {
        c->cg_fd = fds[1];
        c->kill_fd = fds[2];
    } else {
        for (size_t i = 1; i < n; i++)
            close(fds[i]);
    }
}

/* Read what the agent sent; the agent's stderr (and cgroup) come with its first bytes. */
static void conn_read(struct reaper *r, struct conn *c)
{
    for (;;) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(3 * sizeof(int))];
        } cm;
        struct iovec iov = {.iov_base = c->line + c->len, .iov_len = sizeof(c->line) - c->len};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *h;
        char *p, *nl, *end;
        ssize_t k;

        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
        k = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        /* The control data is ours to read only when recvmsg() succeeded. */
        for (h = k >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; h; h = CMSG_NXTHDR(&msg, h))
            if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
                h->cmsg_len >= CMSG_LEN(sizeof(int))) {
                int fds[3];
                size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                n = n < 3 ? n : 3; /* no more fit: the kernel closed the rest (MSG_CTRUNC) */
                memcpy(fds, CMSG_DATA(h), n * sizeof(int));
                conn_fds(c, fds, n);
            }
        if (k <= 0) {
            conn_end(r, c);
            return;
        }
        c->len += (size_t)k;
        p = c->line;
        end = c->line + c->len;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            conn_line(c, p, (size_t)(nl - p));
            p = nl + 1;
        }
        c->len = (size_t)(end - p);
        if (c->len == sizeof(c->line))
            c->len = 0; /* no line is that long: not an agent talking */
        else if (c->len > 0 && p != c->line)
            memmove(c->line, p, c->len);
    }
}

static void accept_all(struct reaper *r)
{
    for (;;) {
        struct ucred cr;
        socklen_t len = sizeof(cr);
        int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
                /* Full: new agents find nobody listening and start a reaper of their own. */
                close(r->lfd);
                r->lfd = -1;
            }
            return;
        }
        /* Only agents of our own user: the abstract namespace has no permissions. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != geteuid()) {
            close(fd);
            continue;
        }
        (void)conn_add(r, fd);
    }
}

/* Own the name, or leave it to the reaper that has it (then serve the first connection only). */
static void listen_on(struct reaper *r, const char *name)
{
    struct epoll_event ev = {.events = EPOLLIN};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);

    r->lfd = -1;
    if (n + 1 > sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path + 1, name, n); /* sun_path[0] == '\0': abstract */
    r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->lfd < 0)
        return;
    if (bind(r->lfd, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0 ||
        listen(r->lfd, SOMAXCONN) < 0 || epoll_ctl(r->ep, EPOLL_CTL_ADD, r->lfd, &ev) < 0) {
        close(r->lfd);
        r->lfd = -1;
    }
}

int agent_reaper_main(int argc, char **argv)
{
    static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2};
    struct epoll_event evs[EVENTS_MAX];
    struct reaper r = {0};
    struct rlimit rl;
    int fd, nul, timeout = -1;
    pid_t pid;

    if (argc != 3 || strcmp(argv[1], "--reaper") != 0 || !*argv[2] ||
        strlen(argv[2]) > AGENT_REAPER_NAME_MAX) {
        fprintf(stderr, "rdzv-agent: usage: --reaper <name> (started by the agent)\n");
        return 2;
    }
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(ignored); i++)
        signal(ignored[i], SIG_IGN);
    /* Not the child of the agent that started us: it may exit long before we do, and must not be
     * left with a zombie or a process handle to keep. */
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0)
        _exit(0);
    /* Hold nothing of the agent's: not its directory, not a descriptor but our first connection
     * (moved off stdin, which becomes /dev/null). Three descriptors per agent (its connection,
     * stderr and cgroup): take all we may. */
    (void)!chdir("/");
    (void)close_range(STDERR_FILENO + 1, ~0u, 0);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || nul < 0 || dup2(nul, STDIN_FILENO) < 0)
        return 1;
    close(nul);
    r.ep = epoll_create1(EPOLL_CLOEXEC);
    if (r.ep < 0)
        return 1;
    (void)fcntl(fd, F_SETFL, O_NONBLOCK);
    if (conn_add(&r, fd) < 0)
        return 1;
    listen_on(&r, argv[2]);
    /* Until the last agent is gone and the cgroups killed for them are removed (or past their
     * deadline). */
    while (r.conns > 0 || r.gone) {
        int n = epoll_wait(r.ep, evs, EVENTS_MAX, timeout);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        for (int i = 0; i < n; i++) {
            const enum ev_kind *kind = evs[i].data.ptr;

            if (!kind)
                accept_all(&r);
            else if (*kind == EV_CONN)
                conn_read(&r, evs[i].data.ptr);
            /* EV_CGROUP: its cgroup.events changed; gone_check() reads it */
        }
        conns_finish(&r);
        timeout = gone_check(&r);
    }
    /* The last agent is gone. One that connected since is reset when the listening socket closes
     * at exit: it has no "ok" yet, and starts a reaper of its own. */
    free(r.ended);
    return 0;
}
