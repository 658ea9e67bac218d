/* SPDX-License-Identifier: Apache-2.0 */
/* helper-worker.c: a scriptable stand-in for a training process, for the agent tests. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * Usage: helper-worker ACTION...
 * Actions run in order; an action written "r<N>:ACTION" runs only when LOCAL_RANK is N.
 *   env             print the variables of interest as KEY=VALUE (KEY=<unset> if absent), then
 *                   ENV_DUPLICATES=<number of names that appear more than once in environ>
 *   exit=N          exit with status N
 *   signal=N        die by signal N (disposition reset to default first)
 *   ignore-term     ignore SIGTERM from now on (inherited by later child-sleep)
 *   sleep=MS        sleep
 *   stop-for=MS     stop (SIGSTOP) for MS ms: a child it forks continues it (SIGCONT)
 *   print=TEXT      TEXT and a newline on stdout;  eprint=TEXT: on stderr
 *   partial=TEXT    TEXT without newline on stdout; epartial=TEXT: on stderr
 *   child-sleep=MS  fork a child (same process group) that sleeps MS; print CHILD_PID=<pid>
 *   escape-sleep=MS child-sleep, but the child leaves the process group (setsid) first; the
 *                   worker goes on (prints CHILD_PID) only once it has left
 *   pid             print PID=<pid> PGID=<pgid> SID=<sid>
 *   spam=N          N lines "spam <rank> <i> " padded with '.' to 100 bytes, on stdout
 *   espam=N         the same on stderr
 *   long=N          one line of N 'x' on stdout
 *   write-error     write a torch-style JSON error to $TORCHELASTIC_ERROR_FILE, print
 *                   ERROR_FILE_WRITTEN=1 (or =<errno text>)
 *   fds             print OPEN_FDS=<fds above 2, comma-separated> (leaked by the agent)
 *   progress=N      write "step N\n" to $RDZV_PROGRESS_FD (one write)
 *   progress-raw=T  write T and a newline there;  progress-long=N: N 'x' and a newline
 *   tick=N/MS       progress=1 .. progress=N, one every MS ms (the first at once)
 *   waits=N/MS      "wait" N times, one every MS ms (blocked on peers; the first at once)
 *   control=N       read N lines from $RDZV_CONTROL_FD (blocking), print CONTROL=<line> each
 *                   (CONTROL=<eof> and stop at end of file)
 * An action written "g<N>:ACTION" runs only when RDZV_GENERATION is N; prefixes combine
 * ("g1:r0:exit=3").
 *   --ANYTHING      print ARG=--ANYTHING (a launcher's argument, e.g. --local-rank=N)
 * Exits 0 after the last action.
 */

extern char **environ;

static const char *const keys[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "RDZV_NCCL_UNIQUE_ID",
    "RDZV_GENERATION",
    "RDZV_ENDPOINT",
    "CUDA_VISIBLE_DEVICES",
    "RDZV_TEST_INHERITED",
    "RDZV_AGENT_TOKEN",
    "RDZV_PROGRESS_FD",
    "RDZV_PROGRESS_WAIT_MS",
    "RDZV_CONTROL_FD",
};

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static size_t name_len(const char *e)
{
    const char *eq = strchr(e, '=');

    return eq ? (size_t)(eq - e) : strlen(e);
}

static void print_env(void)
{
    unsigned dups = 0;

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *v = getenv(keys[i]);

        printf("%s=%s\n", keys[i], v ? v : "<unset>");
    }
    for (size_t i = 0; environ[i]; i++)
        for (size_t k = i + 1; environ[k]; k++)
            if (name_len(environ[i]) == name_len(environ[k]) &&
                strncmp(environ[i], environ[k], name_len(environ[i])) == 0)
                dups++;
    printf("ENV_DUPLICATES=%u\n", dups);
}

static void spam(FILE *f, const char *rank, long n)
{
    char line[128];

    for (long i = 0; i < n; i++) {
        int k = snprintf(line, sizeof(line), "spam %s %ld ", rank, i);

        memset(line + k, '.', (size_t)(100 - k));
        line[100] = '\0';
        fprintf(f, "%s\n", line);
    }
}

static void write_error(void)
{
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    FILE *f;

    if (!path) {
        printf("ERROR_FILE_WRITTEN=no variable\n");
        return;
    }
    f = fopen(path, "w");
    if (!f) {
        printf("ERROR_FILE_WRITTEN=%s\n", strerror(errno));
        return;
    }
    fprintf(f,
            "{\"message\": {\"message\": \"RuntimeError: test\", \"extraInfo\": "
            "{\"py_callstack\": \"\", \"timestamp\": \"%ld\"}}}\n",
            (long)time(NULL));
    fclose(f);
    printf("ERROR_FILE_WRITTEN=1\n");
}

static void print_fds(void)
{
    const char *sep = "";

    printf("OPEN_FDS=");
    for (int fd = 3; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) >= 0) {
            printf("%s%d", sep, fd);
            sep = ",";
        }
    printf("\n");
}

/* One write of "<text>\n" (or n 'x' and a newline when text is NULL) to the progress channel. */
static void progress_write(const char *text, long n)
{
    const char *fd = getenv("RDZV_PROGRESS_FD");
    char buf[8192];
    size_t len;

    if (!fd) {
        fprintf(stderr, "helper-worker: no RDZV_PROGRESS_FD\n");
        exit(65);
    }
    if (text) {
        len = (size_t)snprintf(buf, sizeof(buf), "%s\n", text);
    } else {
        len = (size_t)n < sizeof(buf) - 1 ? (size_t)n : sizeof(buf) - 1;
        memset(buf, 'x', len);
        buf[len++] = '\n';
    }
    if (write(atoi(fd), buf, len) != (ssize_t)len) {
        fprintf(stderr, "helper-worker: progress write: %s\n", strerror(errno));
        exit(66);
    }
}

/* control=N: N lines of the control channel, read a byte at a time (no line is split). */
static void control_read(long count)
{
    const char *fd = getenv("RDZV_CONTROL_FD");
    char line[8192];
    size_t len = 0;

    if (!fd) {
        fprintf(stderr, "helper-worker: control: RDZV_CONTROL_FD is not set\n");
        exit(65);
    }
    fflush(NULL);
    while (count > 0) {
        char c;
        ssize_t n = read(atoi(fd), &c, 1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            printf("CONTROL=<eof>\n");
            return;
        }
        if (c != '\n') {
            if (len < sizeof(line) - 1)
                line[len++] = c;
            continue;
        }
        printf("CONTROL=%.*s\n", (int)len, line);
        fflush(NULL);
        len = 0;
        count--;
    }
}

/* Strip the "r<N>:" and "g<N>:" prefixes of act: NULL when one of them does not match. */
static const char *act_for_me(const char *act, const char *rank, const char *gen)
{
    while ((act[0] == 'r' || act[0] == 'g') && act[1] >= '0' && act[1] <= '9' && strchr(act, ':')) {
        const char *colon = strchr(act, ':'), *mine = act[0] == 'r' ? rank : gen;
        size_t n = (size_t)(colon - act - 1);

        if (strncmp(act + 1, mine, n) != 0 || mine[n] != '\0')
            return NULL;
        act = colon + 1;
    }
    return act;
}

static void run(const char *act, const char *rank)
{
    const char *eq = strchr(act, '=');
    const char *arg = eq ? eq + 1 : "";
    size_t n = eq ? (size_t)(eq - act) : strlen(act);

#define IS(name) (n == strlen(name) && strncmp(act, name, n) == 0)
    if (IS("progress")) {
        char text[64];

        snprintf(text, sizeof(text), "step %s", arg);
        progress_write(text, 0);
    } else if (IS("progress-raw")) {
        progress_write(arg, 0);
    } else if (IS("progress-long")) {
        progress_write(NULL, atol(arg));
    } else if (IS("tick")) {
        long count = atol(arg), ms = strchr(arg, '/') ? atol(strchr(arg, '/') + 1) : 0;

        for (long i = 1; i <= count; i++) {
            char text[64];

            if (i > 1)
                sleep_ms(ms);
            snprintf(text, sizeof(text), "step %ld", i);
            progress_write(text, 0);
        }
    } else if (IS("waits")) {
        long count = atol(arg), ms = strchr(arg, '/') ? atol(strchr(arg, '/') + 1) : 0;

        for (long i = 1; i <= count; i++) {
            if (i > 1)
                sleep_ms(ms);
            progress_write("wait", 0);
        }
    } else if (IS("control")) {
        control_read(atol(arg));
    } else if (strncmp(act, "--", 2) == 0) {
        printf("ARG=%s\n", act);
    } else if (IS("env")) {
        print_env();
    } else if (IS("exit")) {
        fflush(NULL);
        exit(atoi(arg));
    } else if (IS("signal")) {
        fflush(NULL);
        signal(atoi(arg), SIG_DFL);
        raise(atoi(arg));
        _exit(99);
    } else if (IS("ignore-term")) {
        signal(SIGTERM, SIG_IGN);
    } else if (IS("sleep")) {
        fflush(NULL);
        sleep_ms(atol(arg));
    } else if (IS("stop-for")) {
        pid_t pid, parent = getpid();

        fflush(NULL);
        pid = fork();
        if (pid == 0) {
            sleep_ms(atol(arg));
            kill(parent, SIGCONT);
            _exit(0);
        }
        if (pid < 0)
            exit(67);
        raise(SIGSTOP);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    } else if (IS("print")) {
        printf("%s\n", arg);
    } else if (IS("eprint")) {
        fprintf(stderr, "%s\n", arg);
    } else if (IS("partial")) {
        printf("%s", arg);
    } else if (IS("epartial")) {
        fprintf(stderr, "%s", arg);
    } else if (IS("child-sleep") || IS("escape-sleep")) {
        int left[2] = {-1, -1};
        pid_t pid;
        char c;

        fflush(NULL);
        /* escape-sleep: go on once the child has left the group (it closes its end of left), or
         * an agent that kills our group when we exit could still find the child in it. */
        if (IS("escape-sleep") && pipe(left) < 0)
            exit(67);
        pid = fork();
        if (pid == 0) {
            if (IS("escape-sleep")) {
                (void)setsid();
                close(left[0]);
                close(left[1]);
            }
            sleep_ms(atol(arg));
            _exit(0);
        }
        if (left[1] >= 0) {
            close(left[1]);
            while (read(left[0], &c, 1) < 0 && errno == EINTR)
                ;
            close(left[0]);
        }
        printf("CHILD_PID=%ld\n", (long)pid);
    } else if (IS("pid")) {
        printf("PID=%ld PGID=%ld SID=%ld\n", (long)getpid(), (long)getpgrp(), (long)getsid(0));
    } else if (IS("spam")) {
        spam(stdout, rank, atol(arg));
    } else if (IS("espam")) {
        spam(stderr, rank, atol(arg));
    } else if (IS("long")) {
        for (long i = 0; i < atol(arg); i++)
            putchar('x');
        putchar('\n');
    } else if (IS("fds")) {
        print_fds();
    } else if (IS("write-error")) {
        write_error();
    } else {
        fprintf(stderr, "helper-worker: unknown action '%s'\n", act);
        exit(64);
    }
#undef IS
    fflush(NULL);
}

int main(int argc, char **argv)
{
    const char *rank = getenv("LOCAL_RANK"), *gen = getenv("RDZV_GENERATION");

    if (!rank)
        rank = "?";
    if (!gen)
        gen = "?";
    for (int i = 1; i < argc; i++) {
        const char *act = act_for_me(argv[i], rank, gen);

        if (!act)
            continue;
        run(act, rank);
    }
    return 0;
}
