/* SPDX-License-Identifier: Apache-2.0 */
/* agent-test-proc.h: what every agent test executable shares: the helper worker's path, our own
 * path and reaper name, and waiting for processes outside any loop. Header-only (static
 * functions), included by one test executable's single source file; the test's thread only. */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent/group/agent-reaper.h"
#include "agent/group/agent-workers.h"
#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "../tap.h"

#ifndef HELPER_WORKER_PATH
#error "HELPER_WORKER_PATH must name tests/agent/helper-worker"
#endif
#define HELPER HELPER_WORKER_PATH
#define MAXW 8
/* Helpers here are static (each executable has its own) and some executables use only a few. */
#define TEST_UNUSED __attribute__((unused))

static char self_exe[PATH_MAX];
static char reaper_name[64]; /* a reaper of our own: tests never share one with other runs */

static uint64_t now_ms(void)
{
    return rdzv_now_ms();
}

/* A process is gone once it is reaped or a zombie (its reaper is not ours to wait for). */
TEST_UNUSED static bool pid_gone(long pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
        return true;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Poll (outside any loop) until pid is gone; returns the milliseconds it took, or -1. */
TEST_UNUSED static long wait_gone(long pid, unsigned ms)
{
    uint64_t t0 = now_ms();
    struct timespec ts = {0, 5 * 1000000L};

    for (;;) {
        if (pid_gone(pid))
            return (long)(now_ms() - t0);
        if (now_ms() - t0 > ms)
            return -1;
        nanosleep(&ts, NULL);
    }
}

TEST_UNUSED static void kill_leftover(long pid)
{
    if (pid > 0 && !pid_gone(pid))
        (void)kill((pid_t)pid, SIGKILL);
}

/* main()'s start, after a --reaper check: SIGPIPE ignored (worker output goes to pipes we read; a
 * test reader that went away must not kill us), logging, self_exe and a reaper name of our own. */
TEST_UNUSED static void proc_setup(const char *name)
{
    ssize_t n;

    signal(SIGPIPE, SIG_IGN);
    rdzv_log_setup(name, getenv("RDZV_TEST_LOG") ? RDZV_LOG_DEBUG : RDZV_LOG_WARN);
    n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    ASSERT_TRUE(n > 0);
    self_exe[n] = '\0';
    snprintf(reaper_name, sizeof(reaper_name), "rdzv-test-reaper.%d.%08x", (int)getpid(),
             (unsigned)rdzv_random_u64());
}
