/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-bench-proc.c: rdzv-bench's readings of the server process: CPU time, VmRSS, idleness. */
#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "tests/bench/rdzv-bench.h"

/* ---- server process: CPU idleness and VmRSS ---- */

/* utime + stime of pid in clock ticks. */
static int proc_cpu_ticks(int pid, uint64_t *ret)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "re");
    if (!f)
        return -errno;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    /* After "pid (comm)": state, then 10 fields before utime and stime. */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -EIO;
    *ret = ut + st;
    return 0;
}

/* CPU time pid has used, in ns, and whether it is precise: the sum of every thread's
 * sum_exec_runtime (/proc/PID/task/TID/schedstat, ns) where the kernel has schedstat, else
 * utime + stime in clock ticks (10 ms each at 100 Hz). A thread that exits between two reads
 * takes its time with it; the servers measured keep theirs for the whole window. */
int bench_proc_cpu_ns(int pid, uint64_t *ret, bool *ret_precise)
{
    char path[96];
    unsigned long long ns, sum = 0;
    struct dirent *de;
    uint64_t ticks;
    long hz;
    DIR *d;
    int r;

    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    d = opendir(path);
    if (!d)
        return -errno;
    r = -ENOENT;
    while ((de = readdir(d))) {
        FILE *f;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", pid, de->d_name);
        f = fopen(path, "re");
        if (!f)
            continue; /* the thread is gone, or no schedstat */
        if (fscanf(f, "%llu", &ns) == 1) {
            sum += ns;
            r = 0;
        }
        fclose(f);
    }
    closedir(d);
    if (r == 0) {
        *ret = sum;
        *ret_precise = true;
        return 0;
    }
    r = proc_cpu_ticks(pid, &ticks);
    if (r < 0)
        return r;
    hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    *ret = ticks * (NS_PER_S / (uint64_t)hz);
    *ret_precise = false;
    return 0;
}

int bench_proc_rss_kb(int pid, uint64_t *ret)
{
    char path[64], line[256];
    unsigned long long kb;
    int r = -ENOENT;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    f = fopen(path, "re");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            *ret = kb;
            r = 0;
            break;
        }
    fclose(f);
    return r;
}

/* Wait until each process uses less than ~10% of a CPU over 200 ms (a server may still be
 * tearing down the previous run's connections), for up to 30 s in all. Gone processes count as
 * idle. */
void bench_wait_idle(const int *pids, size_t n)
{
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t t0 = rdzv_now_ns(), a[MAX_IDLE_PIDS + 1], c;
    bool idle = false;

    if (hz <= 0)
        hz = 100;
    while (!idle && rdzv_now_ns() - t0 < 30 * NS_PER_S) {
        for (size_t i = 0; i < n; i++)
            if (proc_cpu_ticks(pids[i], &a[i]) < 0)
                a[i] = UINT64_MAX;
        sleep_ns(NS_PER_S / 5);
        idle = true;
        for (size_t i = 0; i < n; i++)
            /* ticks in 0.2 s <= hz/50, i.e. <= 10% of a CPU */
            if (a[i] != UINT64_MAX && proc_cpu_ticks(pids[i], &c) == 0 &&
                (c - a[i]) * 50 > (uint64_t)hz)
                idle = false;
    }
    if (!idle)
        fprintf(stderr, "rdzv-bench: a server is still busy after 30 s, going on\n");
}
