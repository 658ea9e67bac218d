/* SPDX-License-Identifier: Apache-2.0 */
/* agent-reaper.c: the reaper process (see agent-reaper.h): a set of process groups fed on stdin,
 * SIGKILLed at EOF together with whatever carries the agent's token. */
#include "agent-reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/rdzv-util.h"

#define RETRY_MAX 256 /* processes looked at twice by the token scan (see token_scan) */

/* The listed process groups: a handful per agent, so a plain array. */
struct pgid_set {
    pid_t *v;
    size_t n, cap;
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

/* One line without its newline: "+<pgid>" or "-<pgid>". Anything else is ignored. */
static void apply_line(struct pgid_set *s, const char *p, size_t n)
{
    int64_t v;

    if (n < 2 || (p[0] != '+' && p[0] != '-'))
        return;
    if (rdzv_parse_i64n((const uint8_t *)p + 1, n - 1, &v) < 0 || v <= 1 || v > INT32_MAX)
        return;
    if (p[0] == '+')
        set_add(s, (pid_t)v);
    else
        set_del(s, (pid_t)v);
}

/* Whether /proc/<pid>/environ holds the entry needle[0..nlen) exactly: 1 yes, 0 no, -1 readable
 * but empty (a kernel thread, a zombie, or a process in the middle of execve), -2 unreadable. */
static int environ_has(pid_t pid, const char *needle, size_t nlen)
{
    char path[48], buf[4096];
    size_t pos = 0;
    bool miss = false, any = false;
    ssize_t k;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -2;
    while ((k = read(fd, buf, sizeof(buf))) > 0) {
        any = true;
        for (ssize_t i = 0; i < k; i++) {
            if (buf[i] == '\0') {
                if (!miss && pos == nlen) {
                    close(fd);
                    return 1;
                }
                pos = 0;
                miss = false;
            } else if (!miss && pos < nlen && buf[i] == needle[pos]) {
                pos++;
            } else {
                miss = true;
            }
        }
    }
    close(fd);
    if (k < 0)
        return -2;
    if (any && !miss && pos == nlen)
        return 1;
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

/* SIGKILL pid's process group (pid alone if the group is not one we may kill), unless the group
 * is in killed already; then add it there. Returns whether it was a group not yet killed. */
static bool kill_group_of(pid_t pid, struct pgid_set *killed)
{
    pid_t pgid = getpgid(pid);

    if (pgid < 0 || set_has(killed, pgid))
        return false;
    if (pgid <= 1 || pgid == getpgrp()) {
        (void)kill(pid, SIGKILL);
        return true;
    }
    (void)kill(-pgid, SIGKILL);
    set_add(killed, pgid);
    return true;
}

/*
 * Every process carrying needle in its environment, by one pass over /proc. A worker that the
 * dead agent forked but that was still inside execve when the pipe reached EOF shows an empty
 * environment for a few microseconds (the new image's is set up after close-on-exec descriptors
 * are closed): such processes are looked at once more after the pass, which takes milliseconds.
 * killed holds the groups killed already: each group found outside it is killed and added.
 * Returns the number of such groups.
 */
static unsigned token_scan(const char *needle, size_t nlen, struct pgid_set *killed)
{
    pid_t retry[RETRY_MAX], self = getpid();
    unsigned nretry = 0, found = 0;
    struct dirent *de;
    DIR *d;

    d = opendir("/proc");
    if (!d) {
        fprintf(stderr, "rdzv-agent: reaper: cannot scan /proc: %s\n", strerror(errno));
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        int64_t v;
        int r;

        if (rdzv_parse_i64n((const uint8_t *)de->d_name, strlen(de->d_name), &v) < 0 || v <= 1 ||
            v > INT32_MAX || (pid_t)v == self)
            continue;
        r = environ_has((pid_t)v, needle, nlen);
        if (r > 0)
            found += kill_group_of((pid_t)v, killed);
        else if (r == -1 && nretry < RETRY_MAX && may_be_execing((pid_t)v))
            retry[nretry++] = (pid_t)v;
    }
    closedir(d);
    for (unsigned i = 0; i < nretry; i++)
        if (environ_has(retry[i], needle, nlen) > 0)
            found += kill_group_of(retry[i], killed);
    return found;
}

int agent_reaper_main(int argc, char **argv)
{
    static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2};
    struct pgid_set set = {0};
    char buf[4096], needle[sizeof(AGENT_TOKEN_ENV) + AGENT_TOKEN_LEN + 1];
    pid_t agent = getppid();
    size_t len = 0, nlen, listed;
    unsigned found;

    if (argc != 3 || strcmp(argv[1], "--reaper") != 0 || strlen(argv[2]) != AGENT_TOKEN_LEN ||
        strspn(argv[2], "0123456789abcdef") != AGENT_TOKEN_LEN) {
        fprintf(stderr, "rdzv-agent: usage: --reaper <%d hex digits> (started by the agent)\n",
                AGENT_TOKEN_LEN);
        return 2;
    }
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(ignored); i++)
        signal(ignored[i], SIG_IGN);
    /* Hold nothing of the agent's but the pipe and stderr: no directory, no inherited socket. */
    (void)!chdir("/");
    (void)close_range(3, ~0u, 0);
    nlen = (size_t)snprintf(needle, sizeof(needle), "%s=%s", AGENT_TOKEN_ENV, argv[2]);

    for (;;) {
        ssize_t k = read(STDIN_FILENO, buf + len, sizeof(buf) - len);
        char *p, *nl, *end;

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
        p = buf;
        end = buf + len;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            apply_line(&set, p, (size_t)(nl - p));
            p = nl + 1;
        }
        len = (size_t)(end - p);
        if (len == sizeof(buf))
            len = 0; /* no line is that long: not the agent talking */
        else if (len > 0 && p != buf)
            memmove(buf, p, len);
    }

    /* The agent is gone: its listed groups first (one syscall each), then the token scan. */
    listed = set.n;
    for (size_t i = 0; i < listed; i++)
        (void)kill(-set.v[i], SIGKILL);
    found = token_scan(needle, nlen, &set);
    if (listed > 0 || found > 0)
        fprintf(stderr,
                "rdzv-agent: agent %d is gone: SIGKILLed the %zu worker process group(s) it had "
                "listed and %u more found by its token\n",
                (int)agent, listed, found);
    free(set.v);
    return 0;
}
