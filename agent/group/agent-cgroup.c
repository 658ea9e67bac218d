/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cgroup.c: the workers' cgroup (agent-cgroup.h): finding where the agent's own cgroup is,
 * making one below it, moving the agent in and out around the spawns, killing and removing it. */
#include "agent/group/agent-cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "common/rdzv-util.h"

#define TREE_DEPTH_MAX 8 /* nested agents' cgroups below ours that a removal goes through */

void agent_cgroup_init(struct agent_cgroup *cg)
{
    cg->dir_fd = cg->procs_fd = cg->home_fd = cg->kill_fd = cg->events_fd = -1;
    cg->inside = cg->stuck = cg->killed = false;
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

int agent_cgroup_worker_ids(const struct agent_cgroup *cg, uint64_t ids[2])
{
    char own[AGENT_CGROUP_PATH_MAX], dir[AGENT_CGROUP_PATH_MAX];
    struct stat st;
    size_t off, n = 0;
    int r;

    if (cg->dir_fd >= 0) {
        if (fstat(cg->dir_fd, &st) < 0)
            return -errno;
        ids[n++] = (uint64_t)st.st_ino;
        if (!cg->stuck)
            return (int)n;
    }
    /* Forks land in the agent's own cgroup. */
    if ((r = own_cgroup(own, sizeof(own))) < 0 || (r = find_dir(own, dir, sizeof(dir), &off)) < 0)
        return n ? (int)n : r;
    if (stat(dir, &st) < 0)
        return n ? (int)n : -errno;
    ids[n++] = (uint64_t)st.st_ino;
    return (int)n;
}

/* rmdir parent/name, and first the cgroups below it when it has some: only for a cgroup whose
 * processes are all gone (killed, or found empty), where every cgroup below is empty too. A
 * populated one stays (EBUSY). */
static int remove_tree_at(int parent, const char *name, unsigned depth)
{
    struct dirent *de;
    DIR *d;
    int fd;

    if (unlinkat(parent, name, AT_REMOVEDIR) == 0)
        return 0;
    if ((errno != EBUSY && errno != ENOTEMPTY) || depth >= TREE_DEPTH_MAX)
        return -errno;
    fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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

/* Our PID namespace's inode, which names our cgroups: pids mean nothing across namespaces. */
static unsigned long pid_ns(void)
{
    struct stat st;

    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* Digits up to sep (a '\0' included) into *v; the end, or NULL when that is not what p holds. */
static const char *parse_num(const char *p, char sep, unsigned long *v)
{
    const char *start = p;

    *v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (*v > (ULONG_MAX - 9) / 10)
            return NULL;
        *v = *v * 10 + (unsigned long)(*p - '0');
    }
    return p > start && *p == sep ? p : NULL;
}

/* The agent pid in a name rdzv-agent.<ns>.<pid>.<hex> of our PID namespace, or 0 when it is not
 * such a name. */
static long agent_of_name(const char *name, unsigned long ns)
{
    const char *p = name + sizeof(AGENT_CGROUP_PREFIX) - 1;
    unsigned long n, pid;

    if (strncmp(name, AGENT_CGROUP_PREFIX, sizeof(AGENT_CGROUP_PREFIX) - 1) != 0 ||
        !(p = parse_num(p, '.', &n)) || n != ns || !(p = parse_num(p + 1, '.', &pid)) ||
        pid == 0 || pid > INT32_MAX || !p[1])
        return 0;
    for (p++; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return (long)pid;
}

/* An agent gone: in our PID namespace, not us, and no process has its pid. */
static bool agent_gone(const char *name, unsigned long ns)
{
    long pid = agent_of_name(name, ns);

    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Below dir: the cgroups of agents gone, deepest first (agent_cgroup_remove_stale()). */
static void remove_stale_at(int dir, unsigned long ns, unsigned depth)
{
    struct dirent *de;
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* an offset of its own */
    DIR *d;

    if (fd < 0)
        return;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        int sub;

        if (de->d_type != DT_DIR || !agent_gone(de->d_name, ns))
            continue;
        sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0 && depth < TREE_DEPTH_MAX)
            remove_stale_at(sub, ns, depth + 1);
        if (sub >= 0)
            close(sub);
        (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

void agent_cgroup_remove_stale(int dir_fd)
{
    remove_stale_at(dir_fd, pid_ns(), 0);
}

static void close_fds(struct agent_cgroup *cg)
{
    int *const fds[] = {&cg->dir_fd, &cg->procs_fd, &cg->home_fd, &cg->kill_fd, &cg->events_fd};

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

/* mkdir home/rdzv-agent.<ns>.<pid>.<random hex>, into cg->path; another random part if taken. */
static int make_dir(struct agent_cgroup *cg, const char *home)
{
    unsigned long ns = pid_ns();
    int r = -EEXIST;

    for (unsigned i = 0; i < 8 && r == -EEXIST; i++) {
        if (snprintf(cg->path, sizeof(cg->path), "%s/%s%lu.%d.%08" PRIx32, home,
                     AGENT_CGROUP_PREFIX, ns, (int)getpid(),
                     (uint32_t)rdzv_random_u64()) >= (int)sizeof(cg->path))
            return -ENAMETOOLONG;
        r = mkdir(cg->path, 0755) == 0 ? 0 : -errno;
    }
    return r;
}

int agent_cgroup_open(struct agent_cgroup *cg, char *why, size_t len)
{
    static const struct {
        const char *file, *what;
        int flags;
        size_t off;
    } files[] = {
        {"cgroup.procs", "cgroup.procs", O_WRONLY, offsetof(struct agent_cgroup, procs_fd)},
        {"cgroup.kill", "cgroup.kill (Linux 5.14 or later)", O_WRONLY,
         offsetof(struct agent_cgroup, kill_fd)},
        {"cgroup.events", "cgroup.events", O_RDONLY, offsetof(struct agent_cgroup, events_fd)},
    };
    char own[AGENT_CGROUP_PATH_MAX], home[AGENT_CGROUP_PATH_MAX];
    size_t name_off = 0;
    int home_dir, r;

    agent_cgroup_init(cg);
    r = own_cgroup(own, sizeof(own));
    if (r < 0) {
        snprintf(why, len, "no cgroup v2 hierarchy: %s",
                 r == -ENOENT ? "no 0:: line in /proc/self/cgroup" : strerror(-r));
        return r;
    }
    r = find_dir(own, home, sizeof(home), &name_off);
    if (r < 0) {
        snprintf(why, len, "%s%s",
                 r == -ENOENT ? "no cgroup2 file system mounted shows its cgroup " : "",
                 r == -ENOENT ? own : strerror(-r));
        return r;
    }
    home_dir = open(home[0] ? home : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (home_dir < 0) {
        r = -errno;
        snprintf(why, len, "cannot open %s: %s", home[0] ? home : "/", strerror(-r));
        return r;
    }
    agent_cgroup_remove_stale(home_dir);
    cg->home_fd = openat(home_dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    r = cg->home_fd < 0 ? -errno : 0;
    close(home_dir);
    if (r < 0) {
        snprintf(why, len, "cannot open %s/cgroup.procs: %s", home[0] ? home : "", strerror(-r));
        return r;
    }
    r = make_dir(cg, home);
    if (r < 0) {
        snprintf(why, len, "cannot create %s: %s", cg->path, strerror(-r));
        goto out_close;
    }
    cg->name = cg->path + name_off;
    cg->dir_fd = open(cg->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cg->dir_fd < 0) {
        r = -errno;
        snprintf(why, len, "cannot open %s: %s", cg->name, strerror(-r));
        goto out_remove;
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        int *fd = (int *)((char *)cg + files[i].off);

        *fd = openat(cg->dir_fd, files[i].file, files[i].flags | O_CLOEXEC);
        if (*fd < 0) {
            r = -errno; /* the first failure's */
            snprintf(why, len, "cannot open %s's %s: %s", cg->name, files[i].what, strerror(-r));
            goto out_remove;
        }
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
        cg->inside = cg->stuck = false;
        return -EDEADLK;
    }
    return 0;

out_remove:
    (void)rmdir(cg->path);
out_close:
    close_fds(cg);
    cg->path[0] = '\0';
    cg->name = cg->path;
    cg->stuck = false;
    return r;
}

int agent_cgroup_enter(struct agent_cgroup *cg)
{
    int r;

    if (!agent_cgroup_on(cg))
        return -ENOENT;
    if (cg->stuck)
        return -EPERM;
    r = move_to(cg->procs_fd);
    if (r == 0)
        cg->inside = true;
    else
        cg->stuck = true;
    cg->killed = false;
    return r;
}

int agent_cgroup_move(struct agent_cgroup *cg, int pid)
{
    char buf[24];
    int n = snprintf(buf, sizeof(buf), "%d", pid);

    if (!agent_cgroup_movable(cg))
        return -ENOENT;
    while (write(cg->procs_fd, buf, (size_t)n) < 0)
        if (errno != EINTR)
            return -errno;
    cg->killed = false;
    return 0;
}

int agent_cgroup_leave(struct agent_cgroup *cg)
{
    int r;

    if (!agent_cgroup_on(cg))
        return -ENOENT;
    if (!cg->inside)
        return 0;
    r = move_to(cg->home_fd);
    if (r == 0)
        cg->inside = false;
    else
        cg->stuck = true;
    return r;
}

/* "populated 0|1" in a cgroup.events; reading it also re-arms poll() (kernfs). */
int agent_cgroup_events_populated(int fd)
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
    return agent_cgroup_events_populated(cg->events_fd);
}

static int write_kill(int fd)
{
    while (write(fd, "1", 1) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

int agent_cgroup_kill(struct agent_cgroup *cg)
{
    int r;

    if (!agent_cgroup_on(cg))
        return -ENOENT;
    if (cg->inside)
        return -EDEADLK;
    r = write_kill(cg->kill_fd);
    if (r == 0)
        cg->killed = true;
    return r;
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
        int r = agent_cgroup_events_populated(fd);
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
    cg->inside = cg->stuck = false;
    return r;
}

/* ---- the reaper's side ---- */

static int fd_on_cgroup2(int fd)
{
    struct statfs sf;

    if (fstatfs(fd, &sf) < 0)
        return -errno;
    return sf.f_type == CGROUP2_SUPER_MAGIC ? 0 : -EINVAL;
}

int agent_cgroup_dir_check(int fd)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return fd_on_cgroup2(fd);
}

int agent_cgroup_open_at(int dir, const char *file, int flags)
{
    int fd, r = agent_cgroup_dir_check(dir);

    if (r < 0)
        return r;
    fd = openat(dir, file, flags | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = fd_on_cgroup2(fd);
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

int agent_cgroup_kill_check(int dir, int kill_fd)
{
    struct stat st, kst;
    int r = agent_cgroup_dir_check(dir), fl;

    if (r < 0)
        return r;
    if (fstat(kill_fd, &kst) < 0 || (fl = fcntl(kill_fd, F_GETFL)) < 0)
        return -errno;
    if ((fl & O_ACCMODE) != O_WRONLY && (fl & O_ACCMODE) != O_RDWR)
        return -EBADF;
    if (fstatat(dir, "cgroup.kill", &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || st.st_dev != kst.st_dev || st.st_ino != kst.st_ino)
        return -EINVAL;
    return fd_on_cgroup2(kill_fd);
}

int agent_cgroup_kill_at(int dir, int kill_fd)
{
    int ev = agent_cgroup_open_at(dir, "cgroup.events", O_RDONLY), r;

    if (ev < 0)
        return ev;
    r = agent_cgroup_events_populated(ev);
    close(ev);
    if (r <= 0)
        return r;
    r = write_kill(kill_fd);
    return r < 0 ? r : 1;
}

int agent_cgroup_remove_at(int dir)
{
    struct stat st, pst, est;
    struct dirent *de;
    int parent, r;
    DIR *d;

    r = agent_cgroup_dir_check(dir);
    if (r < 0 || fstat(dir, &st) < 0)
        return r < 0 ? r : -errno;
    parent = agent_cgroup_open_at(dir, "..", O_RDONLY | O_DIRECTORY);
    if (parent < 0)
        return parent;
    if (fstat(parent, &pst) < 0 || pst.st_dev != st.st_dev) {
        close(parent); /* the mount's root: not one we made */
        return -EINVAL;
    }
    d = fdopendir(parent);
    if (!d) {
        close(parent);
        return -ENOMEM;
    }
    r = -ENOENT;
    while (r == -ENOENT && (de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && de->d_ino == st.st_ino && strcmp(de->d_name, ".") != 0 &&
            strcmp(de->d_name, "..") != 0 &&
            fstatat(dirfd(d), de->d_name, &est, AT_SYMLINK_NOFOLLOW) == 0 &&
            est.st_dev == st.st_dev && est.st_ino == st.st_ino)
            r = remove_tree_at(dirfd(d), de->d_name, 0);
    closedir(d);
    return r;
}
