/* SPDX-License-Identifier: Apache-2.0 */
/* agent-dirs.c: the workers' log and error-file directories (agent-dirs.h). */
#include "agent/group/agent-dirs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv-log.h"

static const char *const log_names[] = {"stdout", "stderr"};

/* mkdir -p, 0755, from the leaf up: parents that exist are not touched. A mkdir() locks the parent
 * directory, and 256 agents starting their workers at once would queue on the lock of /tmp or of
 * a shared log directory. buf (PATH_MAX) is modified and restored. */
static int mkdir_up(char *buf, size_t n)
{
    char *slash;
    int r;

    if (mkdir(buf, 0755) == 0 || errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return -errno;
    slash = memrchr(buf, '/', n);
    if (!slash || slash == buf)
        return -ENOENT;
    *slash = '\0';
    r = mkdir_up(buf, (size_t)(slash - buf));
    *slash = '/';
    if (r < 0)
        return r;
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int agent_dirs_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);

    if (n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    return mkdir_up(buf, n);
}

/* The lock of directory name in tmp (an open directory), taken: its agent is gone. Returns the
 * lock's descriptor (held while it is removed), or -1: not a directory of this user's (links
 * not followed), no lock in it (kept logs), or its agent alive. */
static int owner_gone(int tmp, const char *name)
{
    struct stat st;
    int dir, lock;

    if (fstatat(tmp, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
        return -1;
    dir = openat(tmp, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return -1;
    lock = openat(dir, AGENT_DIRS_LOCK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    if (lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) < 0) {
        close(lock);
        return -1;
    }
    return lock;
}

/* Remove the private directories, rdzv-*, of this user's agents that are gone (SIGKILLed,
 * crashed): their lock is free. Best effort; said at info level. */
static void sweep_tmp(const char *tmp)
{
    unsigned removed = 0;
    struct dirent *e;
    char path[PATH_MAX];
    DIR *d = opendir(tmp);
    int lock;

    if (!d)
        return;
    while (removed < AGENT_DIRS_SWEEP_MAX && (e = readdir(d))) {
        if (strncmp(e->d_name, "rdzv-", 5) != 0 || (lock = owner_gone(dirfd(d), e->d_name)) < 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", tmp, e->d_name) < (int)sizeof(path)) {
            agent_dirs_remove_tree(path);
            log_info("removed %s, left by an agent that is gone (SIGKILLed or crashed)", path);
            removed++;
        }
        close(lock);
    }
    closedir(d);
}

/* dir's lock file, locked before it has its name: a sweep never finds it free while this
 * process lives. The descriptor into *ret_lock. */
static int lock_tmp(const char *dir, int *ret_lock)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    int fd, r;

    if (snprintf(tmp, sizeof(tmp), "%s/%s.new", dir, AGENT_DIRS_LOCK) >= (int)sizeof(tmp) ||
        snprintf(path, sizeof(path), "%s/%s", dir, AGENT_DIRS_LOCK) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX) < 0 || rename(tmp, path) < 0) {
        r = -errno;
        (void)unlink(tmp);
        close(fd);
        return r;
    }
    *ret_lock = fd;
    return 0;
}

int agent_dirs_make_tmp(const char *run_id, char **ret_dir, int *ret_lock)
{
    static bool swept;
    const char *tmp = getenv("TMPDIR");
    char *dir;
    int r;

    if (!tmp || !*tmp)
        tmp = "/tmp";
    if (!swept) {
        swept = true;
        sweep_tmp(tmp);
    }
    if (asprintf(&dir, "%s/rdzv-%s-XXXXXX", tmp, run_id) < 0)
        return -ENOMEM;
    if (!mkdtemp(dir)) {
        r = -errno;
        log_error_errno(r, "cannot create a directory for error files like %s", dir);
        free(dir);
        return r;
    }
    *ret_lock = -1;
    r = lock_tmp(dir, ret_lock);
    if (r < 0) /* a file system without locks: only a SIGKILL of this agent leaves it */
        log_warn_errno(r, "cannot lock %s: if this agent is SIGKILLed, it stays", dir);
    *ret_dir = dir;
    return 0;
}

void agent_dirs_release_tmp(const char *dir, int lock, bool keep)
{
    char path[PATH_MAX];

    if (!keep)
        agent_dirs_remove_tree(dir);
    else if (snprintf(path, sizeof(path), "%s/%s", dir, AGENT_DIRS_LOCK) < (int)sizeof(path))
        (void)unlink(path);
    if (lock >= 0)
        close(lock);
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    /* Not remove(): its unlink() of a directory fails only after locking the parent, which for
     * the top directory is $TMPDIR, shared with every agent of the host. */
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) < 0)
        log_debug("workers: remove %s: %s", path, strerror(errno));
    return 0;
}

void agent_dirs_remove_tree(const char *dir)
{
    (void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh error_file path in *error_file (the old one freed), a stale file of that name removed:
 * torchrun gets a fresh directory per attempt; ours is fixed, so a leftover error file would be
 * taken for this attempt's. */
static int error_file_reset(char **error_file, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int error_file_reset(char **error_file, const char *fmt, ...)
{
    va_list ap;
    int r;

    free(*error_file);
    va_start(ap, fmt);
    r = vasprintf(error_file, fmt, ap);
    va_end(ap);
    if (r < 0) {
        *error_file = NULL;
        return -ENOMEM;
    }
    if (unlink(*error_file) < 0 && errno != ENOENT)
        log_warn_errno(-errno, "cannot remove stale %s", *error_file);
    return 0;
}

int agent_dirs_worker(const char *log_dir, const char *tmp_dir, const char *run_id,
                      unsigned attempt, unsigned local_rank, unsigned log_mask, char **error_file,
                      int ret_log_fds[2])
{
    char dir[PATH_MAX], path[PATH_MAX];
    int fds[2] = {-1, -1};
    int n, r;

    if (!log_dir)
        return error_file_reset(error_file, "%s/attempt_%u_%u.error.json", tmp_dir, attempt,
                                local_rank);
    n = snprintf(dir, sizeof(dir), "%s/%s/attempt_%u/%u", log_dir, run_id, attempt, local_rank);
    if (n < 0 || (size_t)n + sizeof("/stdout.log") > sizeof(dir))
        return log_error_errno(-ENAMETOOLONG, "worker log directory under %s", log_dir);
    r = agent_dirs_mkdir_p(dir);
    if (r < 0)
        return log_error_errno(r, "cannot create %s", dir);
    r = error_file_reset(error_file, "%s/error.json", dir);
    if (r < 0)
        return r;
    for (unsigned k = 0; k < 2; k++) {
        if (!(log_mask & (1u << k)))
            continue;
        if (snprintf(path, sizeof(path), "%s/%s.log", dir, log_names[k]) >= (int)sizeof(path)) {
            r = log_error_errno(-ENAMETOOLONG, "--log-dir path too long: %s", dir);
            goto out_close;
        }
        fds[k] = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
        if (fds[k] < 0) {
            r = log_error_errno(-errno, "cannot open %s", path);
            goto out_close;
        }
    }
    ret_log_fds[0] = fds[0];
    ret_log_fds[1] = fds[1];
    return 0;

out_close:
    for (unsigned k = 0; k < 2; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    return r;
}
