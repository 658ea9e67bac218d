/* SPDX-License-Identifier: Apache-2.0 */
/* fault-worker.c: the training script of the fault-injection tests and the restart benchmark.
 * Works under rdzv-agent and under torchrun (--no-python): it only reads torchrun's environment.
 *
 * FAULT_DIR (required): where it records itself.
 *   FAULT_DIR/events  one line appended per start and per crash (a single O_APPEND write):
 *                     "start <realtime us> gen=<G> rank=<R> restart=<C> world=<W> pid=<P>
 *                      node=<N> agent=<PPID>" (on one line), "crash ..." (the same fields)
 *                     (gen: RDZV_GENERATION, or restart + 1 under torchrun)
 *   FAULT_DIR/env.<G>.<R>  its environment, one VAR=value a line (written, then renamed)
 *   FAULT_DIR/pid.<G>.<R>  its pid
 * FAULT_CRASH=R[:CODE[:MAXRESTART]]: the worker of global rank R exits with CODE (default 1;
 *   "sigN" kills itself with signal N) FAULT_CRASH_AFTER_MS (default 0) after it started, in every
 *   generation whose restart count is below MAXRESTART (default 1: only the first; -1: always).
 *   With FAULT_MAX_CRASHES=N it crashes instead while FAULT_DIR/events holds fewer than N crash
 *   lines (torchrun's restart counts are per agent, so they cannot tell the generations apart).
 * Otherwise it runs until FAULT_DIR/release exists (polled every 10 ms), then exits 0; or after
 *   FAULT_RUN_MS when that is set. It gives up with exit code 3 after FAULT_MAX_S (default 120).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long env_long(const char *name, long def)
{
    const char *s = getenv(name);

    return s && *s ? strtol(s, NULL, 10) : def;
}

static long long now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void record(const char *dir, const char *what, long gen, long rank, long restart)
{
    char path[4096], line[256];
    int fd, n;

    n = snprintf(line, sizeof(line),
                 "%s %lld gen=%ld rank=%ld restart=%ld world=%ld pid=%d node=%ld agent=%d\n", what,
                 now_us(), gen, rank, restart, env_long("WORLD_SIZE", -1), (int)getpid(),
                 env_long("GROUP_RANK", -1), (int)getppid());
    snprintf(path, sizeof(path), "%s/events", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, line, (size_t)n) < 0) {
        fprintf(stderr, "fault-worker: %s: %s\n", path, strerror(errno));
        exit(4);
    }
    close(fd);
}

static long count_crashes(const char *dir)
{
    char path[4096], line[256];
    long n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/events", dir);
    if (!(f = fopen(path, "re")))
        return 0;
    while (fgets(line, sizeof(line), f))
        n += strncmp(line, "crash ", 6) == 0;
    fclose(f);
    return n;
}

static void write_file(const char *dir, const char *name, long gen, long rank, const char *text,
                       size_t len)
{
    char tmp[4200], path[4096];
    int fd;

    snprintf(path, sizeof(path), "%s/%s.%ld.%ld", dir, name, gen, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, text, len) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        fprintf(stderr, "fault-worker: %s: %s\n", path, strerror(errno));
        exit(4);
    }
}

static void write_env(const char *dir, long gen, long rank)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);

    for (char **e = environ; buf && *e; e++) {
        size_t n = strlen(*e);

        if (len + n + 2 > cap) {
            cap = (len + n + 2) * 2;
            buf = realloc(buf, cap);
            if (!buf)
                break;
        }
        memcpy(buf + len, *e, n);
        len += n;
        buf[len++] = '\n';
    }
    if (!buf) {
        fprintf(stderr, "fault-worker: out of memory\n");
        exit(4);
    }
    write_file(dir, "env", gen, rank, buf, len);
    free(buf);
}

int main(void)
{
    const char *dir = getenv("FAULT_DIR"), *crash = getenv("FAULT_CRASH");
    long rank = env_long("RANK", -1), restart = env_long("TORCHELASTIC_RESTART_COUNT", 0);
    long gen = env_long("RDZV_GENERATION", restart + 1);
    long run_ms = env_long("FAULT_RUN_MS", -1), max_ms = env_long("FAULT_MAX_S", 120) * 1000;
    char path[4096], pid[32];
    struct stat st;

    if (!dir) {
        fprintf(stderr, "fault-worker: FAULT_DIR is not set\n");
        return 4;
    }
    write_env(dir, gen, rank);
    write_file(dir, "pid", gen, rank, pid,
               (size_t)snprintf(pid, sizeof(pid), "%d\n", (int)getpid()));
    record(dir, "start", gen, rank, restart);

    if (crash && *crash) {
        long crank = strtol(crash, NULL, 10), max_restart = 1;
        const char *code = strchr(crash, ':'), *mr = code ? strchr(code + 1, ':') : NULL;
        int sig = 0, status = 1;

        if (code && strncmp(code + 1, "sig", 3) == 0)
            sig = (int)strtol(code + 4, NULL, 10);
        else if (code)
            status = (int)strtol(code + 1, NULL, 10);
        if (mr)
            max_restart = strtol(mr + 1, NULL, 10);
        long max_crashes = env_long("FAULT_MAX_CRASHES", -1);
        bool again = max_crashes >= 0 ? count_crashes(dir) < max_crashes
                                      : max_restart < 0 || restart < max_restart;

        if (crank == rank && again) {
            sleep_ms(env_long("FAULT_CRASH_AFTER_MS", 0));
            record(dir, "crash", gen, rank, restart);
            if (sig) {
                signal(sig, SIG_DFL);
                raise(sig);
            }
            return status;
        }
    }
    snprintf(path, sizeof(path), "%s/release", dir);
    for (long waited = 0; waited < max_ms; waited += 10) {
        if (run_ms >= 0 ? waited >= run_ms : stat(path, &st) == 0)
            return 0;
        sleep_ms(10);
    }
    fprintf(stderr, "fault-worker: rank %ld: not released within %ld s\n", rank, max_ms / 1000);
    return 3;
}
