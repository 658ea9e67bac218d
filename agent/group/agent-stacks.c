/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stacks.c: a hung worker's stacks, from its own dump, gdb or /proc (agent-stacks.h). */
#include "agent/group/agent-stacks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"

struct agent_stacks {
    uv_loop_t *loop;
    int pid;
    agent_stacks_done_fn done;
    void *ud;
    char file[PATH_MAX];
    off_t start;         /* the dump file's size before the signal */
    uv_fs_event_t fsev;  /* the dump file */
    uv_timer_t timer;    /* the overall deadline */
    uv_timer_t settle;   /* the dump file quiet */
    uv_process_t gdb;
    uv_pipe_t out;       /* gdb's stdout */
    unsigned open;       /* handles not closed back */
    bool fsev_on, gdb_on, out_on, reported, cancelled;
    bool continued;      /* a stopped Python worker continued for its dump */
    char culprit[AGENT_STACKS_CULPRIT_MAX];
    char wchan[64];      /* the main thread's kernel wait channel */
    const char *source;
    char *text;
    size_t len;
};

int agent_stacks_signal(void)
{
    return SIGRTMIN + AGENT_STACKS_SIGNAL_OFFSET;
}

/* ---- parsers ---- */

/* "  File "/a/b/train.py", line 57 in all_reduce" -> "all_reduce (train.py:57)". */
static int python_frame(const char *line, size_t n, char *out, size_t len)
{
    const char *q1, *q2, *in, *end = line + n, *base;
    char file[256], fn[128];
    unsigned long ln;

    q1 = memchr(line, '"', n);
    q2 = q1 ? memchr(q1 + 1, '"', (size_t)(end - q1 - 1)) : NULL;
    if (!q2 || strncmp(q2, "\", line ", 8) != 0)
        return -ENOENT;
    ln = strtoul(q2 + 8, (char **)&in, 10);
    if (strncmp(in, " in ", 4) != 0)
        return -ENOENT;
    in += 4;
    snprintf(file, sizeof(file), "%.*s", (int)(q2 - q1 - 1), q1 + 1);
    snprintf(fn, sizeof(fn), "%.*s", (int)(end - in), in);
    base = strrchr(file, '/');
    snprintf(out, len, "%s (%s:%lu)", fn, base ? base + 1 : file, ln);
    return 0;
}

int agent_stacks_python_culprit(const char *text, char *out, size_t len)
{
    const char *p = text, *block = NULL;

    /* Each thread: a line "Thread 0x..." or "Current thread 0x..." then its frames. */
    for (p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, "Thread 0x", 9) == 0 || strncmp(p, "Current thread 0x", 17) == 0)
            block = p;
    if (!block)
        return -ENOENT;
    p = strchr(block, '\n');
    if (!p)
        return -ENOENT;
    p++;
    {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);

        return python_frame(p, n, out, len);
    }
}

/* "#0  0x00007f... in clock_nanosleep () from /lib/..." or "#0  fn (a=1) at x.c:12" ->
 * "clock_nanosleep", "fn (x.c:12)". */
static int gdb_frame(const char *line, size_t n, char *out, size_t len)
{
    const char *end = line + n, *p = line + 2, *fn, *fe, *at;
    char file[256];

    while (p < end && *p == ' ')
        p++;
    if (p + 2 < end && p[0] == '0' && p[1] == 'x') {
        const char *in = strstr(p, " in ");

        if (!in || in >= end)
            return -ENOENT;
        p = in + 4;
    }
    fn = p;
    fe = fn;
    while (fe < end && *fe != ' ' && *fe != '(')
        fe++;
    if (fe == fn)
        return -ENOENT;
    at = NULL;
    for (const char *s = fe; s + 4 <= end; s++)
        if (memcmp(s, " at ", 4) == 0)
            at = s + 4;
    if (at) {
        const char *base = at, *e = end;

        for (const char *s = at; s < end; s++)
            if (*s == '/')
                base = s + 1;
        while (e > base && (e[-1] == ' ' || e[-1] == '\r'))
            e--;
        snprintf(file, sizeof(file), "%.*s", (int)(e - base), base);
        snprintf(out, len, "%.*s (%s)", (int)(fe - fn), fn, file);
    } else {
        snprintf(out, len, "%.*s", (int)(fe - fn), fn);
    }
    return 0;
}

int agent_stacks_gdb_culprit(const char *text, char *out, size_t len)
{
    const char *t1 = strstr(text, "\nThread 1 "), *p;

    t1 = t1 ? t1 + 1 : strncmp(text, "Thread 1 ", 9) == 0 ? text : NULL;
    /* One thread only: gdb prints no "Thread" header with some versions; frame #0 is its. */
    p = t1 ? strstr(t1, "\n#0 ") : strncmp(text, "#0 ", 3) == 0 ? text - 1 : strstr(text, "\n#0 ");
    if (!p)
        return -ENOENT;
    p++;
    {
        const char *nl = strchr(p, '\n');

        return gdb_frame(p, nl ? (size_t)(nl - p) : strlen(p), out, len);
    }
}

/* ---- collecting ---- */

static void text_add(struct agent_stacks *s, const char *p, size_t n)
{
    char *t;

    if (s->len + n + 1 > AGENT_STACKS_TEXT_MAX)
        n = AGENT_STACKS_TEXT_MAX - 1 - s->len;
    if (n == 0)
        return;
    t = realloc(s->text, s->len + n + 1);
    if (!t)
        return;
    s->text = t;
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = '\0';
}

static void closed_cb(uv_handle_t *h)
{
    struct agent_stacks *s = h->data;

    if (--s->open == 0) {
        free(s->text);
        free(s);
    }
}

static void close_all(struct agent_stacks *s)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&s->timer, (uv_handle_t *)&s->settle,
                         s->fsev_on ? (uv_handle_t *)&s->fsev : NULL,
                         s->gdb_on ? (uv_handle_t *)&s->gdb : NULL,
                         s->out_on ? (uv_handle_t *)&s->out : NULL};

    if (s->gdb_on)
        (void)uv_process_kill(&s->gdb, SIGKILL);
    for (size_t i = 0; i < RDZV_ARRAY_SIZE(hs); i++)
        if (hs[i] && !uv_is_closing(hs[i]))
            uv_close(hs[i], closed_cb);
}

static void report(struct agent_stacks *s)
{
    struct agent_stacks_result r = {.text = s->text ? s->text : "",
                                    .culprit = s->culprit,
                                    .source = s->source};

    if (s->reported)
        return;
    s->reported = true;
    if (!s->culprit[0] && s->wchan[0] && strcmp(s->wchan, "0") != 0)
        snprintf(s->culprit, sizeof(s->culprit), "%s (kernel)", s->wchan);
    if (!s->cancelled)
        s->done(s->ud, &r);
    close_all(s);
}

/* The first len - 1 bytes of a small file, NUL-terminated, its trailing newline cut. 0 or
 * -errno. */
static int read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -EIO;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return 0;
}

/* The state letter of a /proc .../stat file ("R", "S", "T"...), or '?' when unreadable. */
static char stat_state(const char *path)
{
    char stat[512], *rp;

    if (read_small(path, stat, sizeof(stat)) < 0 || !(rp = strrchr(stat, ')')) || rp[1] != ' ')
        return '?';
    return rp[2];
}

/* Whether process pid is stopped (SIGSTOP, a tracer): it cannot run a signal handler. */
static bool proc_stopped(int pid)
{
    char path[64], st;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    st = stat_state(path);
    return st == 'T' || st == 't';
}

/* /proc/PID/task/<tid>/{comm,stat,wchan}: one line per thread. *stopped: the process is. */
static void read_proc(struct agent_stacks *s, bool *stopped)
{
    char path[384], comm[64], wchan[64], line[256];
    struct dirent *de;
    DIR *d;

    *stopped = false;
    snprintf(path, sizeof(path), "/proc/%d/task", s->pid);
    d = opendir(path);
    if (!d)
        return;
    while ((de = readdir(d))) {
        char state;
        int n;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", s->pid, de->d_name);
        if (read_small(path, comm, sizeof(comm)) < 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", s->pid, de->d_name);
        state = stat_state(path);
        snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", s->pid, de->d_name);
        if (read_small(path, wchan, sizeof(wchan)) < 0)
            snprintf(wchan, sizeof(wchan), "?");
        n = snprintf(line, sizeof(line), "thread %s (%s): state %c, waiting in %s\n", de->d_name,
                     comm, state, wchan);
        text_add(s, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        if (atoi(de->d_name) == s->pid) {
            snprintf(s->wchan, sizeof(s->wchan), "%s", wchan);
            *stopped = state == 'T' || state == 't';
        }
    }
    closedir(d);
}

static void timer_cb(uv_timer_t *t)
{
    report(t->data);
}

static void out_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char chunk[16384];

    (void)h;
    (void)suggested;
    *buf = uv_buf_init(chunk, sizeof(chunk));
}

static void out_read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    struct agent_stacks *s = st->data;

    if (n > 0)
        text_add(s, buf->base, (size_t)n);
    else if (n < 0)
        (void)uv_read_stop(st);
}

static void gdb_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct agent_stacks *s = p->data;
    const char *bt;

    (void)status;
    (void)sig;
    bt = s->text ? strstr(s->text, "\n#0 ") : NULL;
    if (bt || (s->text && strncmp(s->text, "#0 ", 3) == 0))
        (void)agent_stacks_gdb_culprit(s->text, s->culprit, sizeof(s->culprit));
    if (s->culprit[0])
        s->source = "gdb";
    report(s);
}

/* The native way: /proc, then gdb when it is installed and the process is not stopped. */
static void native(struct agent_stacks *s)
{
    char gdb[PATH_MAX], pidstr[16];
    bool stopped;
    int r;

    s->source = "/proc";
    read_proc(s, &stopped);
    if (stopped) {
        snprintf(s->culprit, sizeof(s->culprit), "stopped (SIGSTOP)");
        report(s);
        return;
    }
    if (rdzv_find_in_path("gdb", gdb, sizeof(gdb)) < 0) {
        report(s);
        return;
    }
    snprintf(pidstr, sizeof(pidstr), "%d", s->pid);
    {
        char *args[] = {gdb, "-batch", "-nx", "-p", pidstr, "-ex", "thread apply all bt", NULL};
        uv_stdio_container_t io[3] = {{.flags = UV_IGNORE},
                                      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE,
                                       .data.stream = (uv_stream_t *)&s->out},
                                      {.flags = UV_IGNORE}};
        uv_process_options_t o = {.file = gdb, .args = args, .stdio = io, .stdio_count = 3,
                                  .exit_cb = gdb_exit_cb};

        if (uv_pipe_init(s->loop, &s->out, 0) < 0) {
            report(s);
            return;
        }
        s->out.data = s;
        s->out_on = true;
        s->open++;
        s->gdb.data = s;
        r = uv_spawn(s->loop, &s->gdb, &o);
        s->gdb_on = true; /* initialised even when it fails: it must be closed */
        s->open++;
        if (r < 0) {
            s->gdb_on = false;
            uv_close((uv_handle_t *)&s->gdb, closed_cb);
            report(s);
            return;
        }
        text_add(s, "gdb:\n", 5);
        (void)uv_read_start((uv_stream_t *)&s->out, out_alloc_cb, out_read_cb);
        (void)uv_timer_start(&s->timer, timer_cb, AGENT_STACKS_GDB_MS, 0);
    }
}

/* The Python dump is in (the file went quiet) or overdue: read what was appended. */
static void python_done(struct agent_stacks *s)
{
    char buf[16384];
    ssize_t n;
    off_t off = s->start;
    int fd = open(s->file, O_RDONLY | O_CLOEXEC);

    if (s->fsev_on && !uv_is_closing((uv_handle_t *)&s->fsev))
        uv_close((uv_handle_t *)&s->fsev, closed_cb);
    s->fsev_on = false;
    (void)uv_timer_stop(&s->timer);
    (void)uv_timer_stop(&s->settle);
    while (fd >= 0 && (n = pread(fd, buf, sizeof(buf), off)) > 0) {
        text_add(s, buf, (size_t)n);
        off += n;
    }
    if (fd >= 0)
        close(fd);
    if (s->len && agent_stacks_python_culprit(s->text, s->culprit, sizeof(s->culprit)) == 0) {
        size_t k = strlen(s->culprit);

        if (s->continued) /* where it was when it was stopped */
            snprintf(s->culprit + k, sizeof(s->culprit) - k, ", stopped (SIGSTOP)");
        s->source = "faulthandler";
        report(s);
        return;
    }
    native(s); /* it wrote nothing we can read: stopped, or its handler could not run */
}

static void settle_cb(uv_timer_t *t)
{
    python_done(t->data);
}

static void python_timer_cb(uv_timer_t *t)
{
    python_done(t->data);
}

static void fsev_cb(uv_fs_event_t *h, const char *name, int events, int status)
{
    struct agent_stacks *s = h->data;

    (void)name;
    (void)events;
    (void)status;
    (void)uv_timer_start(&s->settle, settle_cb, AGENT_STACKS_SETTLE_MS, 0);
}

int agent_stacks_collect(uv_loop_t *loop, int pid, bool announced, const char *stacks_file,
                         agent_stacks_done_fn done, void *ud, struct agent_stacks **ret)
{
    struct agent_stacks *s = calloc(1, sizeof(*s));
    struct stat st;

    if (!s)
        return -ENOMEM;
    s->loop = loop;
    s->pid = pid;
    s->done = done;
    s->ud = ud;
    s->source = "/proc";
    (void)uv_timer_init(loop, &s->timer);
    (void)uv_timer_init(loop, &s->settle);
    s->timer.data = s->settle.data = s;
    s->open = 2;
    *ret = s;
    /* A stopped worker would never write its dump: one that announced it is continued once
     * the signal is pending (it is failed anyway), so that it dumps where it was stopped; a
     * native one is read from /proc at once. */
    if (announced && stacks_file && strlen(stacks_file) < sizeof(s->file) &&
        stat(stacks_file, &st) == 0) {
        snprintf(s->file, sizeof(s->file), "%s", stacks_file);
        s->start = st.st_size;
        if (uv_fs_event_init(loop, &s->fsev) == 0) {
            s->fsev.data = s;
            s->fsev_on = true;
            s->open++;
            (void)uv_fs_event_start(&s->fsev, fsev_cb, s->file, 0);
        }
        if (kill(pid, agent_stacks_signal()) == 0) {
            if (proc_stopped(pid))
                s->continued = kill(pid, SIGCONT) == 0;
            (void)uv_timer_start(&s->timer, python_timer_cb, AGENT_STACKS_WAIT_MS, 0);
            return 0;
        }
        if (s->fsev_on)
            uv_close((uv_handle_t *)&s->fsev, closed_cb);
        s->fsev_on = false;
    }
    native(s);
    return 0;
}

void agent_stacks_cancel(struct agent_stacks *s)
{
    if (!s)
        return;
    s->cancelled = true;
    if (!s->reported) {
        s->reported = true;
        close_all(s);
    }
}
