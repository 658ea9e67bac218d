/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-relay.c: the worker group's output relay against real processes: prefixes, line
 * splitting, log files, output held open by descendants, a slow or stalled reader, the error a
 * worker died of. This executable is also the reaper of the groups it makes (--reaper <name>). */
#include "agent-fixture.h"

static void put_spam(struct rdzv_buf *b, unsigned lr, long n)
{
    char line[128];

    for (long i = 0; i < n; i++) {
        spam_line(line, lr, i);
        ASSERT_OK(rdzv_buf_put(b, line, 100));
        ASSERT_OK(rdzv_buf_put_u8(b, '\n'));
    }
}

/* Prefixed, complete, in order, split at 64 KiB, final partial line kept; raw log files. */
static void test_output(void)
{
    char *argv[] = {HELPER,
                    "print=hello",
                    "eprint=oops",
                    "spam=3000",
                    "espam=500",
                    "long=150000",
                    "partial=tail-no-newline",
                    "epartial=etail",
                    NULL};
    const long nspam = 3000, nespam = 500, nlong = 150000;
    char logdir[512], path[PATH_MAX], line[128];
    struct fx f;

    fx_init(&f, 2, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-output", tmp_root);
    f.cfg.log_dir = logdir;
    f.as.rank_offset = 2;
    f.as.world_size = 4;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);

    for (unsigned lr = 0; lr < 2; lr++) {
        struct rdzv_buf want = {0}, got = {0};
        struct lines l;
        size_t k = 0;

        snprintf(tap_note, sizeof(tap_note), "local rank %u", lr);
        lines_of(&f.out, 2 + lr, &l);
        ASSERT_EQ(l.n, 1 + nspam + 3 + 1);
        ASSERT_BYTES_STR(l.v[k], strlen(l.v[k]), "hello");
        k++;
        for (long i = 0; i < nspam; i++, k++) {
            spam_line(line, lr, i);
            ASSERT_BYTES_STR(l.v[k], strlen(l.v[k]), line);
        }
        ASSERT_EQ(strlen(l.v[k++]), AGENT_MAX_LINE);
        ASSERT_EQ(strlen(l.v[k++]), AGENT_MAX_LINE);
        ASSERT_EQ(strlen(l.v[k]), nlong - 2 * AGENT_MAX_LINE);
        ASSERT_EQ(strspn(l.v[k], "x"), nlong - 2 * AGENT_MAX_LINE);
        k++;
        ASSERT_BYTES_STR(l.v[k], strlen(l.v[k]), "tail-no-newline");
        lines_free(&l);

        lines_of(&f.err, 2 + lr, &l);
        ASSERT_EQ(l.n, 1 + nespam + 1);
        ASSERT_BYTES_STR(l.v[0], strlen(l.v[0]), "oops");
        for (long i = 0; i < nespam; i++) {
            spam_line(line, lr, i);
            ASSERT_BYTES_STR(l.v[1 + i], strlen(l.v[1 + i]), line);
        }
        ASSERT_BYTES_STR(l.v[l.n - 1], strlen(l.v[l.n - 1]), "etail");
        lines_free(&l);

        /* the raw bytes, unprefixed, in the attempt's log files */
        ASSERT_OK(rdzv_buf_put(&want, "hello\n", 6));
        put_spam(&want, lr, nspam);
        for (long i = 0; i < nlong; i++)
            ASSERT_OK(rdzv_buf_put_u8(&want, 'x'));
        ASSERT_OK(rdzv_buf_put(&want, "\ntail-no-newline", 16));
        snprintf(path, sizeof(path), "%s/job42/attempt_0/%u/stdout.log", logdir, lr);
        read_file(path, &got);
        ASSERT_EQ(got.len, want.len);
        ASSERT_MEMEQ(got.data, want.data, want.len);
        want.len = got.len = 0;
        ASSERT_OK(rdzv_buf_put(&want, "oops\n", 5));
        put_spam(&want, lr, nespam);
        ASSERT_OK(rdzv_buf_put(&want, "etail", 5));
        snprintf(path, sizeof(path), "%s/job42/attempt_0/%u/stderr.log", logdir, lr);
        read_file(path, &got);
        ASSERT_EQ(got.len, want.len);
        ASSERT_MEMEQ(got.data, want.data, want.len);
        rdzv_buf_free(&want);
        rdzv_buf_free(&got);
    }
    tap_note[0] = '\0';
    fx_done(&f);
}

static void hook_child_gone(struct fx *f)
{
    /* the end of the start SIGKILLed what was left in the worker's process group */
    ASSERT_TRUE(f->child_pid[0] > 0);
    ASSERT_TRUE(wait_gone(f->child_pid[0], 1000) >= 0);
    agent_group_free(f->g, fx_free_done, f);
}

/* A descendant that keeps the output open after a natural exit gets AGENT_DRAIN_MS of silence;
 * then the start ends, and kills it (it is in the worker's process group). Without the workers'
 * cgroup: with one, it is killed at the exit (test_cgroup_ends_the_drain). */
static void test_drain_after_exit(void)
{
    char *argv[] = {HELPER, "child-sleep=30000", "print=bye", "exit=0", NULL};
    struct lines l;
    struct fx f;

    fx_init(&f, 1, argv);
    f.cfg.no_cgroup = true;
    f.on_line = line_watch;
    f.on_all = hook_child_gone;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.status[0], 0);
    ASSERT_LE(AGENT_DRAIN_MS, f.t_all - f.t_exit[0]);
    ASSERT_LE(f.t_all - f.t_exit[0], AGENT_DRAIN_MS + 1500);
    lines_of(&f.out, 0, &l);
    ASSERT_EQ(l.n, 2);
    ASSERT_BYTES_STR(l.v[1], strlen(l.v[1]), "bye");
    lines_free(&l);
    ASSERT_TRUE(f.child_pid[0] > 0);
    fx_done(&f); /* fx_run_finish killed the grandchild */
}

/* Whether /proc/<pid>/cgroup names a workers' cgroup. */
static bool in_workers_cgroup(long pid)
{
    char path[64];
    struct rdzv_buf b = {0};
    bool in;

    snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
    read_file(path, &b);
    in = b.len > 0 && memmem(b.data, b.len, "/rdzv-agent.", 12) != NULL;
    rdzv_buf_free(&b);
    return in;
}

static bool child_in_cgroup; /* test_cgroup_ends_the_drain's descendant, when it said its pid */

static void cgroup_line_watch(struct fx *f, const char *line, size_t n)
{
    bool had = f->child_pid[0] > 0;

    line_watch(f, line, n);
    if (!had && f->child_pid[0] > 0)
        child_in_cgroup = in_workers_cgroup(f->child_pid[0]);
}

/* With the workers' cgroup (root here), the same descendant is killed as soon as the worker has
 * exited: the start ends at once, with the output it wrote. */
static void test_cgroup_ends_the_drain(void)
{
    char *argv[] = {HELPER, "child-sleep=30000", "print=bye", "exit=0", NULL};
    struct lines l;
    struct fx f;

    fx_init(&f, 1, argv);
    f.on_line = cgroup_line_watch;
    f.on_all = hook_child_gone;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.status[0], 0);
    ASSERT_TRUE(f.child_pid[0] > 0);
    if (!child_in_cgroup) {
        printf("# skipped: no workers' cgroup here (not root, or no cgroup v2)\n");
        fx_done(&f);
        return;
    }
    ASSERT_LE(f.t_all - f.t_exit[0], AGENT_DRAIN_MS / 2);
    lines_of(&f.out, 0, &l);
    ASSERT_EQ(l.n, 2);
    ASSERT_BYTES_STR(l.v[1], strlen(l.v[1]), "bye");
    lines_free(&l);
    fx_done(&f);
}

struct bp {
    uv_timer_t tick, later;
    uint64_t last, max_gap;
    unsigned running_at_read;
    struct fx *f;
};

static void bp_tick_cb(uv_timer_t *t)
{
    struct bp *b = t->data;
    uint64_t now = now_ms();

    if (now - b->last > b->max_gap)
        b->max_gap = now - b->last;
    b->last = now;
}

static void bp_later_cb(uv_timer_t *t)
{
    struct bp *b = t->data;

    b->running_at_read = agent_group_running(b->f->g);
    fx_cap_start(b->f);
}

static void bp_hook_all(struct fx *f)
{
    struct bp *b = f->ptr;

    uv_close((uv_handle_t *)&b->tick, NULL);
    uv_close((uv_handle_t *)&b->later, NULL);
    agent_group_free(f->g, fx_free_done, f);
}

/* A reader that does not read stalls the workers, never the loop, and loses nothing. */
static void bp_case(bool sock)
{
    char *argv[] = {HELPER, "spam=20000", NULL};
    const long n = 20000;
    struct bp b = {0};
    char line[128];
    struct fx f;
    int flags;

    snprintf(tap_note, sizeof(tap_note), "socket %d", sock);
    fx_init_ex(&f, 2, argv, sock);
    f.cap_defer = true;
    f.on_all = bp_hook_all;
    f.ptr = &b;
    b.f = &f;
    ASSERT_OK(uv_timer_init(&f.loop, &b.tick));
    ASSERT_OK(uv_timer_init(&f.loop, &b.later));
    b.tick.data = b.later.data = &b;
    b.last = now_ms();
    ASSERT_OK(uv_timer_start(&b.tick, bp_tick_cb, 10, 10));
    ASSERT_OK(uv_timer_start(&b.later, bp_later_cb, 800, 0));
    flags = fcntl(f.cap_wfd, F_GETFL);
    fx_start(&f);
    /* the shared open file description stays as it was (blocking) */
    ASSERT_EQ(fcntl(f.cap_wfd, F_GETFL), flags);
    ASSERT_EQ(flags & O_NONBLOCK, 0);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(b.running_at_read, 2); /* 2 MB each cannot have gone anywhere */
    ASSERT_LE(b.max_gap, 300);
    for (unsigned lr = 0; lr < 2; lr++) {
        struct lines l;

        lines_of(&f.out, lr, &l);
        ASSERT_EQ(l.n, n);
        for (long i = 0; i < n; i++) {
            spam_line(line, lr, i);
            ASSERT_BYTES_STR(l.v[i], strlen(l.v[i]), line);
        }
        lines_free(&l);
    }
    fx_done(&f);
    tap_note[0] = '\0';
}

static void test_backpressure(void)
{
    bp_case(false);
    bp_case(true);
}

static void stall_stop_cb(uv_timer_t *t)
{
    struct bp *b = t->data;

    b->running_at_read = agent_group_running(b->f->g);
    b->f->t_stop = now_ms();
    agent_group_stop(b->f->g, SIGTERM);
}

static void stall_free_cb(uv_timer_t *t)
{
    struct bp *b = t->data;

    uv_close((uv_handle_t *)&b->tick, NULL);
    uv_close((uv_handle_t *)&b->later, NULL);
    agent_group_free(b->f->g, fx_free_done, b->f);
}

static void stall_hook_all(struct fx *f)
{
    struct bp *b = f->ptr;

    /* read what is left, give the relay a moment to hand over its queue, then free */
    fx_cap_start(f);
    ASSERT_OK(uv_timer_start(&b->tick, stall_free_cb, 300, 0));
}

/* Stopping does not wait for a reader that never reads: the unread output is given up after
 * AGENT_DRAIN_MS and the stop completes. */
static void test_stop_stalled_reader(void)
{
    char *argv[] = {HELPER, "spam=20000", NULL};
    struct bp b = {0};
    struct fx f;

    fx_init(&f, 2, argv);
    f.cap_defer = true;
    f.cfg.grace_ms = 300;
    f.on_all = stall_hook_all;
    f.ptr = &b;
    b.f = &f;
    ASSERT_OK(uv_timer_init(&f.loop, &b.tick));
    ASSERT_OK(uv_timer_init(&f.loop, &b.later));
    b.tick.data = b.later.data = &b;
    ASSERT_OK(uv_timer_start(&b.later, stall_stop_cb, 500, 0));
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(b.running_at_read, 2); /* blocked writing, as the reader reads nothing */
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.sig[0], SIGTERM);
    ASSERT_EQ(f.sig[1], SIGTERM);
    ASSERT_LE(f.t_all - f.t_stop, AGENT_DRAIN_MS + 1000);
    fx_done(&f);
}

/* Log file name of local rank lr's stream next to its error file; its content is want, or it
 * does not exist when want is NULL. */
static void assert_log(const struct fx *f, unsigned lr, const char *name, const char *want)
{
    char path[PATH_MAX];
    struct rdzv_buf got = {0};
    const char *slash = strrchr(f->err_files[lr], '/');

    snprintf(path, sizeof(path), "%.*s/%s.log", (int)(slash - f->err_files[lr]), f->err_files[lr],
             name);
    snprintf(tap_note, sizeof(tap_note), "local rank %u: %.200s", lr, path);
    if (!want) {
        ASSERT_FALSE(file_exists(path));
        return;
    }
    read_file(path, &got);
    ASSERT_BYTES_STR((const char *)got.data, got.len, want);
    rdzv_buf_free(&got);
}

/* Console lines of local rank lr (rank == lr here) on stdout and stderr. */
static void assert_console(const struct fx *f, unsigned lr, size_t n_out, size_t n_err)
{
    struct lines l;

    snprintf(tap_note, sizeof(tap_note), "local rank %u console", lr);
    lines_of(&f->out, lr, &l);
    ASSERT_EQ(l.n, n_out);
    if (n_out)
        ASSERT_BYTES_STR(l.v[0], strlen(l.v[0]), "out");
    lines_free(&l);
    lines_of(&f->err, lr, &l);
    ASSERT_EQ(l.n, n_err);
    if (n_err)
        ASSERT_BYTES_STR(l.v[0], strlen(l.v[0]), "err");
    lines_free(&l);
}

/* torchrun's --redirects (file only), --tee (file and console) and --local-ranks-filter (console
 * for these ranks only, the others' output in files), per local rank, without --log-dir: the
 * files go to the private temporary directory in log_dir's layout, which outlives the group. */
static void test_redirects_tee_filter(void)
{
    char *argv[] = {HELPER, "print=out", "eprint=err", NULL};
    const uint8_t redirects[] = {1, 3, 0, 0}, tee[] = {0, 2, 0, 1};
    const bool console[] = {true, true, false, true};
    char want[PATH_MAX];
    struct fx f;

    setenv("TMPDIR", tmp_root, 1);
    fx_init(&f, 4, argv);
    f.cfg.redirects = redirects;
    f.cfg.tee = tee;
    f.cfg.console = console;
    f.on_all = hook_record_error_files;
    fx_start(&f);
    fx_run_finish(&f);
    unsetenv("TMPDIR");
    ASSERT_EQ(f.n_all, 1);
    for (unsigned lr = 0; lr < 4; lr++) {
        ASSERT_EQ(f.status[lr], 0);
        snprintf(want, sizeof(want), "/job42/attempt_0/%u/error.json", lr);
        ASSERT_TRUE(strstr(f.err_files[lr], want) != NULL);
        snprintf(want, sizeof(want), "%s/rdzv-job42-", tmp_root);
        ASSERT_EQ(strncmp(f.err_files[lr], want, strlen(want)), 0);
    }
    /* rank 0: stdout redirected; rank 1: both redirected, stderr teed; rank 2: filtered out of
     * the console; rank 3: stdout teed. */
    assert_console(&f, 0, 0, 1);
    assert_log(&f, 0, "stdout", "out\n");
    assert_log(&f, 0, "stderr", NULL);
    assert_console(&f, 1, 0, 1);
    assert_log(&f, 1, "stdout", "out\n");
    assert_log(&f, 1, "stderr", "err\n");
    assert_console(&f, 2, 0, 0);
    assert_log(&f, 2, "stdout", "out\n");
    assert_log(&f, 2, "stderr", "err\n");
    assert_console(&f, 3, 1, 1);
    assert_log(&f, 3, "stdout", "out\n");
    assert_log(&f, 3, "stderr", NULL);
    tap_note[0] = '\0';
    fx_done(&f);
}

/* --tee alone, without --log-dir (nothing left in /tmp, no /tmp/rdzv-none-*): the files
 * are copies of what the console showed, and their directory goes with the group. */
static void test_tee_files_go_with_the_group(void)
{
    char *argv[] = {HELPER, "print=out", "eprint=err", NULL};
    const uint8_t tee[] = {3, 3};
    char dir[PATH_MAX], *cut;
    struct fx f;

    setenv("TMPDIR", tmp_root, 1);
    fx_init(&f, 2, argv);
    f.cfg.tee = tee;
    f.on_all = hook_record_error_files;
    fx_start(&f);
    fx_run_finish(&f);
    unsetenv("TMPDIR");
    ASSERT_EQ(f.n_all, 1);
    for (unsigned lr = 0; lr < 2; lr++) {
        ASSERT_EQ(f.status[lr], 0);
        assert_console(&f, lr, 1, 1);
    }
    snprintf(dir, sizeof(dir), "%s", f.err_files[0]);
    cut = strstr(dir, "/job42/attempt_0/");
    ASSERT_NOT_NULL(cut);
    *cut = '\0'; /* TMPDIR/rdzv-job42-XXXXXX */
    snprintf(tap_note, sizeof(tap_note), "%.200s is left", dir);
    ASSERT_EQ(access(dir, F_OK), -1);
    tap_note[0] = '\0';
    fx_done(&f);
}

/* With --log-dir both logs are written as before; a redirect only takes the console away. */
static void test_redirects_log_dir(void)
{
    char *argv[] = {HELPER, "print=out", "eprint=err", NULL};
    const uint8_t redirects[] = {2};
    char logdir[512];
    struct fx f;

    fx_init(&f, 1, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-redirect", tmp_root);
    f.cfg.log_dir = logdir;
    f.cfg.redirects = redirects;
    f.on_all = hook_record_error_files;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(strncmp(f.err_files[0], logdir, strlen(logdir)), 0);
    assert_console(&f, 0, 1, 0);
    assert_log(&f, 0, "stdout", "out\n");
    assert_log(&f, 0, "stderr", "err\n");
    tap_note[0] = '\0';
    fx_done(&f);
}

static char exit_error[MAXW][AGENT_ERROR_MAX + 1];

static void hook_keep_error(struct fx *f, unsigned lr, int64_t status, int sig)
{
    (void)status;
    (void)sig;
    if (!agent_group_output_open(f->g, lr)) /* else on_output_closed follows */
        snprintf(exit_error[lr], sizeof(exit_error[lr]), "%s",
                 agent_group_worker_error(f->g, lr));
}

static void output_closed_keep_error(struct agent_group *g, unsigned lr, int64_t status, int sig,
                                     void *ud)
{
    (void)ud;
    (void)status;
    (void)sig;
    snprintf(exit_error[lr], sizeof(exit_error[lr]), "%s", agent_group_worker_error(g, lr));
}

/* The error a worker died of (agent_group_worker_error), as the report of its exit sees it (at
 * on_exit when its stderr is closed already, else at on_output_closed): its last non-empty
 * stderr line, blanks around it trimmed, a control character in it as a space; stdout's lines
 * are not errors; none from a worker that wrote nothing to stderr. */
static void test_worker_error(void)
{
    char *argv[] = {HELPER, "r0:eprint=Traceback (most recent call last):",
                    "r0:eprint=  RuntimeError:\tboom  ", "r0:eprint=", "r0:eprint= ",
                    "print=not an error", "r0:exit=1", NULL};
    struct fx f;

    fx_init(&f, 2, argv);
    f.on_exit_hook = hook_keep_error;
    f.cfg.on_output_closed = output_closed_keep_error;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.status[0], 1);
    ASSERT_EQ(strcmp(exit_error[0], "RuntimeError: boom"), 0);
    ASSERT_EQ(exit_error[1][0], '\0');
    fx_done(&f);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    proc_setup("test-agent-relay");
    fx_setup_process();
    TEST(test_output);
    TEST(test_drain_after_exit);
    TEST(test_cgroup_ends_the_drain);
    TEST(test_backpressure);
    TEST(test_stop_stalled_reader);
    TEST(test_redirects_tee_filter);
    TEST(test_tee_files_go_with_the_group);
    TEST(test_redirects_log_dir);
    TEST(test_worker_error);
    rm_tree(tmp_root);
    return tap_done();
}
