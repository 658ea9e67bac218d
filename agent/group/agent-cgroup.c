/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cgroup.c: the workers' cgroup (agent-cgroup.h): finding where the agent's own cgroup is,
 * making one below it, moving the agent in and out around the spawns, killing and removing it. */
#include "agent/group/agent-cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TREE_DEPTH_MAX 8 /* nested agents' cgroups below ours that a removal goes through */

void agent_cgroup_init(struct agent_cgroup *cg)
{
    cg->procs_fd = cg->home_fd = cg->kill_fd = cg->events_fd = -1;
    cg->inside = cg->killed = false;
    cg->path[0] = '\0';
    cg->name = cg->path;
}

/* The agent's cgroup in the v2 hierarchy: the "0::PATH" line of /proc/self/cgroup. */
static int own_cgroup(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int r = -ENOENT;

    if (!f)
        return -errno;
    while (r == -ENOENT && (n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] == '\n')
            line[--n] = '\0';
        if (strncmp(line, "0::/", 4) == 0)
            r = snprintf(out, len, "%s", line + 3) >= (int)len ? -ENAMETOOLONG : 0;
    }
    free(line);
    fclose(f);
    return r;
}

/* mountinfo's octal escapes (\040 for a space) decoded in place. */
static void unescape(char *s)
{
    char *o = s;

    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

/* If line of /proc/self/mountinfo is a cgroup2 mount whose root is own or above it (a container
 * may mount only its part of the hierarchy), where own is in the file system: out gets the
 * directory, *ret_name_off the offset in out of the part that the hierarchy names. 0, -ENOENT (not
 * such a mount) or -ENAMETOOLONG. */
static int mount_dir(char *line, const char *own, char *out, size_t len, size_t *ret_name_off)
{
    char *f[5], *sep = strstr(line, " - "), *save = NULL;
    const char *rest;
    size_t rl, ml;
    int i;

    if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
        return -ENOENT;
    *sep = '\0';
    /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ..." */
    for (i = 0; i < 5 && (f[i] = strtok_r(i ? NULL : line, " ", &save)); i++)
        ;
    if (i < 5)
        return -ENOENT;
    unescape(f[3]);
    unescape(f[4]);
    rl = strcmp(f[3], "/") == 0 ? 0 : strlen(f[3]);
    if (strncmp(own, f[3], rl) != 0 || (own[rl] != '/' && own[rl] != '\0'))
        return -ENOENT;
    rest = strcmp(own + rl, "/") == 0 ? "" : own + rl;
    ml = strcmp(f[4], "/") == 0 ? 0 : strlen(f[4]);
    if (snprintf(out, len, "%s%s", ml ? f[4] : "", rest) >= (int)len)
        return -ENAMETOOLONG;
    *ret_name_off = ml;
    return 0;
}

/* Where own (as /proc/self/cgroup names it) is in the file system, from the first cgroup2 mount
 * that shows it. 0, -ENOENT (none) or -errno. */
static int find_dir(const char *own, char *out, size_t len, size_t *ret_name_off)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0;
    int r = -ENOENT;

    if (!f)
        return -errno;
    while (r == -ENOENT && getline(&line, &cap, f) > 0)
        r = mount_dir(line, own, out, len, ret_name_off);
    free(line);
    fclose(f);
    return r;
}

/* rmdir parent/name, and first the cgroups below it (a nested agent's) when it has some. Only
 * empty cgroups can go: a populated one stays (EBUSY). */
static int remove_tree_at(int parent, const char *name, unsigned depth)
{
    struct dirent *de;
    DIR *d;
    int fd;

    if (unlinkat(parent, name, AT_REMOVEDIR) == 0)
        return 0;
    if ((errno != EBUSY && errno != ENOTEMPTY) || depth >= TREE_DEPTH_MAX)
        return -errno;
    fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -ENOMEM;
    }
    while ((de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void)remove_tree_at(dirfd(d), de->d_name, depth + 1);
    closedir(d);
    return unlinkat(parent, name, AT_REMOVEDIR) == 0 ? 0 : -errno;
}

static int remove_tree(const char *path)
{
    char parent[AGENT_CGROUP_PATH_MAX];
    const char *slash = strrchr(path, '/');
    int fd, r;

    if (!slash || (size_t)(slash - path) >= sizeof(parent))
        return -EINVAL;
    memcpy(parent, path, (size_t)(slash - path));
    parent[slash - path] = '\0';
    fd = open(slash == path ? "/" : parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = remove_tree_at(fd, slash + 1, 0);
    close(fd);
    return r;
}

/* The agent pid in a name rdzv-agent.<pid>, or 0 when it is not such a name. */
static long agent_of_name(const char *name)
{
    const char *p = name + sizeof(AGENT_CGROUP_PREFIX) - 1;
    long pid = 0;

    if (strncmp(name, AGENT_CGROUP_PREFIX, sizeof(AGENT_CGROUP_PREFIX) - 1) != 0 || !*p)
        return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || pid > INT32_MAX / 10)
            return 0;
        pid = pid * 10 + (*p - '0');
    }
    return pid;
}

/* The empty cgroups beside ours that an agent gone left (its removal found it still populated):
 * rmdir only succeeds on an empty one, so a live agent's busy cgroup cannot go; an idle one's
 * cannot either, as its agent is alive (kill(pid, 0)). Our own pid's is a dead agent's too. */
static void remove_stale(const char *home)
{
    struct dirent *de;
    DIR *d = opendir(home);

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        long pid = de->d_type == DT_DIR ? agent_of_name(de->d_name) : 0;

        if (pid > 0 && (pid == getpid() || (kill((pid_t)pid, 0) < 0 && errno == ESRCH)))
            (void)remove_tree_at(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

static int open_in(const char *dir, const char *file, int flags)
{
    char p[AGENT_CGROUP_PATH_MAX + 32];

    snprintf(p, sizeof(p), "%s/%s", dir, file);
    return open(p, flags | O_CLOEXEC);
}

static void close_fds(struct agent_cgroup *cg)
{
    int *const fds[] = {&cg->procs_fd, &cg->home_fd, &cg->kill_fd, &cg->events_fd};

    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

/* One write of "0" (the writer itself) to a cgroup.procs. */
static int move_to(int procs_fd)
{
    while (write(procs_fd, "0", 1) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

int agent_cgroup_open(struct agent_cgroup *cg, char *why, size_t len)
{
    char own[AGENT_CGROUP_PATH_MAX], home[AGENT_CGROUP_PATH_MAX];
    size_t name_off = 0;
    int r;

    agent_cgroup_init(cg);
    r = own_cgroup(own, sizeof(own));
    if (r < 0) {
        snprintf(why, len, "no cgroup v2 hierarchy: %s",
                 r == -ENOENT ? "no 0:: line in /proc/self/cgroup" : strerror(-r));
        return r;
    }
    r = find_dir(own, home, sizeof(home), &name_off);
    if (r == 0 && snprintf(cg->path, sizeof(cg->path), "%s/%s%d", home, AGENT_CGROUP_PREFIX,
                           (int)getpid()) >= (int)sizeof(cg->path))
        r = -ENAMETOOLONG;
    if (r < 0) {
        snprintf(why, len, "%s%s",
                 r == -ENOENT ? "no cgroup2 file system mounted shows its cgroup " : "",
                 r == -ENOENT ? own : strerror(-r));
        cg->path[0] = '\0';
        return r;
    }
    cg->name = cg->path + name_off;
    remove_stale(home[0] ? home : "/");
    if (mkdir(cg->path, 0755) < 0) {
        r = -errno;
        snprintf(why, len, "cannot create %s: %s", cg->path, strerror(-r));
        cg->path[0] = '\0';
        cg->name = cg->path;
        return r;
    }
    cg->procs_fd = open_in(cg->path, "cgroup.procs", O_WRONLY);
    cg->home_fd = open_in(home, "cgroup.procs", O_WRONLY);
    cg->kill_fd = open_in(cg->path, "cgroup.kill", O_WRONLY);
    cg->events_fd = open_in(cg->path, "cgroup.events", O_RDONLY);
    if (cg->procs_fd < 0 || cg->home_fd < 0 || cg->kill_fd < 0 || cg->events_fd < 0) {
        r = -errno;
        snprintf(why, len, "cannot open %s's %s: %s", cg->name,
                 cg->procs_fd < 0   ? "cgroup.procs"
                 : cg->home_fd < 0  ? "parent's cgroup.procs"
                 : cg->kill_fd < 0  ? "cgroup.kill (Linux 5.14 or later)"
                                    : "cgroup.events",
                 strerror(-r));
        goto out_remove;
    }
    r = agent_cgroup_enter(cg);
    if (r < 0) {
        snprintf(why, len, "cannot move into %s: %s", cg->name, strerror(-r));
        goto out_remove;
    }
    r = agent_cgroup_leave(cg);
    if (r < 0) {
        /* Inside with no way out: cgroup.kill would kill the agent. Give the cgroup up. */
        snprintf(why, len, "moved into %s and cannot move back out (%s): the agent stays there",
                 cg->name, strerror(-r));
        close_fds(cg);
        return -EDEADLK;
    }
    return 0;

out_remove:
    close_fds(cg);
    (void)rmdir(cg->path);
    cg->path[0] = '\0';
    cg->name = cg->path;
    return r;
}

int agent_cgroup_enter(struct agent_cgroup *cg)
{
    int r;

    if (!agent_cgroup_on(cg))
        return -ENOENT;
    r = move_to(cg->procs_fd);
    if (r == 0)
        cg->inside = true;
    cg->killed = false;
    return r;
}

int agent_cgroup_leave(struct agent_cgroup *cg)
{
    int r;

    if (!agent_cgroup_on(cg))
        return -ENOENT;
    r = move_to(cg->home_fd);
    if (r == 0)
        cg->inside = false;
    return r;
}

/* "populated 0|1" in a cgroup.events; reading it also re-arms poll() (kernfs). */
static int events_populated(int fd)
{
    char buf[128], *p;
    ssize_t n;

    while ((n = pread(fd, buf, sizeof(buf) - 1, 0)) < 0)
        if (errno != EINTR)
            return -errno;
    buf[n] = '\0';
    p = strstr(buf, "populated ");
    if (!p)
        return -EINVAL;
    return p[10] == '1';
}

int agent_cgroup_populated(const struct agent_cgroup *cg)
{
    if (!agent_cgroup_on(cg))
        return -ENOENT;
    return events_populated(cg->events_fd);
}

int agent_cgroup_kill(struct agent_cgroup *cg)
{
    if (!agent_cgroup_on(cg))
        return -ENOENT;
    if (cg->inside)
        return -EDEADLK;
    while (write(cg->kill_fd, "1", 1) < 0)
        if (errno != EINTR)
            return -errno;
    cg->killed = true;
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Until cgroup.events (fd) says "populated 0", or wait_ms: each change of the file wakes poll()
 * with POLLPRI (kernfs). 0, -EBUSY when still populated at the deadline, or -errno. */
static int wait_empty(int fd, unsigned wait_ms)
{
    uint64_t end = mono_ms() + wait_ms;

    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLPRI};
        int r = events_populated(fd);
        uint64_t now = mono_ms();

        if (r <= 0)
            return r;
        if (now >= end)
            return -EBUSY;
        if (poll(&pfd, 1, (int)(end - now)) < 0 && errno != EINTR)
            return -errno;
    }
}

int agent_cgroup_close(struct agent_cgroup *cg, unsigned wait_ms)
{
    int r = 0;

    if (!agent_cgroup_on(cg))
        return 0;
    if (cg->inside && agent_cgroup_leave(cg) < 0) {
        r = -EDEADLK; /* left as it is: the agent is in it */
        goto out_close;
    }
    r = agent_cgroup_populated(cg);
    if (r > 0)
        r = agent_cgroup_kill(cg);
    if (r >= 0)
        r = wait_empty(cg->events_fd, wait_ms);
    if (r >= 0)
        r = remove_tree(cg->path);
out_close:
    close_fds(cg);
    return r;
}

void agent_cgroup_forget(struct agent_cgroup *cg)
{
    close_fds(cg);
    cg->inside = false;
}

bool agent_cgroup_path_valid(const char *path)
{
    const char *last = strrchr(path, '/');
    size_t n = strlen(path);

    if (path[0] != '/' || n >= AGENT_CGROUP_PATH_MAX || !last || agent_of_name(last + 1) <= 0)
        return false;
    for (const char *p = path; p; p = strchr(p + 1, '/'))
        if (strncmp(p, "/./", 3) == 0 || strncmp(p, "/../", 4) == 0 || strncmp(p, "//", 2) == 0)
            return false;
    return true;
}

int agent_cgroup_kill_dir(const char *path)
{
    int ev = open_in(path, "cgroup.events", O_RDONLY), kfd, r;

    if (ev < 0)
        return -errno;
    r = events_populated(ev);
    close(ev);
    if (r <= 0)
        return r;
    kfd = open_in(path, "cgroup.kill", O_WRONLY);
    if (kfd < 0)
        return -errno;
    while (write(kfd, "1", 1) < 0)
        if (errno != EINTR) {
            r = -errno;
            break;
        }
    close(kfd);
    return r;
}

int agent_cgroup_remove_dir(const char *path, unsigned wait_ms)
{
    int ev = open_in(path, "cgroup.events", O_RDONLY), r;

    if (ev < 0)
        return -errno;
    r = wait_empty(ev, wait_ms);
    close(ev);
    return r < 0 ? r : remove_tree(path);
}
