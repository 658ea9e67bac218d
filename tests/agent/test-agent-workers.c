/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-workers.c: the worker group against real processes (tests/agent/helper-worker.c). */
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

#include "../../agent/agent-reaper.h"
#include "../../agent/agent-workers.h"
#include "../../common/rdzv-buf.h"
#include "../../common/rdzv-log.h"
#include "../../common/rdzv-util.h"
#include "../tap.h"

/*
 * This executable is also the reaper of the groups it makes (--reaper <name>, as rdzv-agent is in
 * production; each test process uses a reaper name of its own) and, with --mini-agent, the agent
 * that the reaper tests SIGKILL.
 *   test-agent-workers                 the group tests (suite unit)
 *   test-agent-workers --integration   the reaper tests (suite integration)
 */

#ifndef HELPER_WORKER_PATH
#error "HELPER_WORKER_PATH must name tests/agent/helper-worker"
#endif
#define HELPER HELPER_WORKER_PATH
#define MAXW 8

static char self_exe[PATH_MAX];
static char reaper_name[64];     /* a reaper of our own: tests never share one with other runs */
static char inherited_fds[1024]; /* fds >= 3 open without FD_CLOEXEC when main() started */
static char tmp_root[256];
static const char nccl_hex[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct fx;
typedef void (*fx_hook)(struct fx *f);

/* One test's loop, group, captured output and callback tallies. */
struct fx {
    uv_loop_t loop;
    struct agent_group *g;
    struct agent_group_cfg cfg;
    struct agent_assignment as;
    /* relayed stdout: a pipe read on the same loop, so the group's non-blocking path is used */
    uv_pipe_t cap;
    int cap_wfd;
    bool cap_defer; /* don't read the capture pipe until fx_cap_start() */
    struct rdzv_buf out;
    size_t scanned;
    void (*on_line)(struct fx *f, const char *line, size_t n);
    /* relayed stderr: a regular file, so the group's blocking path is used */
    int err_fd;
    char err_path[PATH_MAX];
    struct rdzv_buf err;
    /* callbacks */
    unsigned n_exit[MAXW];
    int64_t status[MAXW];
    int sig[MAXW];
    unsigned n_exits, n_all;
    uint64_t t_stop, t_all, t_exit[MAXW];
    void (*on_exit_hook)(struct fx *f, unsigned lr, int64_t status, int sig);
    fx_hook on_all; /* NULL: free the group */
    bool freed;
    unsigned ready;
    long child_pid[MAXW], worker_pid[MAXW];
    char *err_files[MAXW];
    int user;  /* line_watch: the signal to stop or signal with on READY */
    void *ptr; /* per-test state for hooks */
};

static uint64_t now_ms(void)
{
    return rdzv_now_ms();
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)remove(path);
    return 0;
}

static void rm_tree(const char *path)
{
    (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool file_exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0;
}

/* Whole file into b (appended). */
static void read_file(const char *path, struct rdzv_buf *b)
{
    char tmp[65536];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    snprintf(tap_note, sizeof(tap_note), "reading %s", path);
    ASSERT_TRUE(fd >= 0);
    while ((n = read(fd, tmp, sizeof(tmp))) > 0)
        ASSERT_OK(rdzv_buf_put(b, tmp, (size_t)n));
    ASSERT_EQ(n, 0);
    close(fd);
    tap_note[0] = '\0';
}

/* A process is gone once it is reaped or a zombie (its reaper is not ours to wait for). */
static bool pid_gone(long pid)
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
static long wait_gone(long pid, unsigned ms)
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

static void kill_leftover(long pid)
{
    if (pid > 0 && !pid_gone(pid))
        (void)kill((pid_t)pid, SIGKILL);
}

/* ---- fixture ---- */

static void cap_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct fx *f = h->data;

    ASSERT_OK(rdzv_buf_reserve(&f->out, 65536));
    buf->base = (char *)f->out.data + f->out.len;
    buf->len = f->out.cap - f->out.len;
}

static void cap_close_cb(uv_handle_t *h)
{
}

static void cap_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct fx *f = s->data;
    const char *p, *nl;

    if (nread < 0) {
        ASSERT_EQ(nread, UV_EOF);
        uv_close((uv_handle_t *)&f->cap, cap_close_cb);
        return;
    }
    f->out.len += (size_t)nread;
    p = (const char *)f->out.data + f->scanned;
    while ((nl = memchr(p, '\n', (size_t)((const char *)f->out.data + f->out.len - p)))) {
        if (f->on_line)
            f->on_line(f, p, (size_t)(nl - p));
        p = nl + 1;
    }
    f->scanned = (size_t)(p - (const char *)f->out.data);
}

static void fx_cap_start(struct fx *f)
{
    ASSERT_OK(uv_read_start((uv_stream_t *)&f->cap, cap_alloc_cb, cap_read_cb));
}

static void fx_free_done(void *ud)
{
    struct fx *f = ud;

    f->freed = true;
    /* The group closed its private descriptor of the capture pipe: now the reader sees EOF. */
    close(f->cap_wfd);
    f->cap_wfd = -1;
}

static void fx_exit_cb(struct agent_group *g, unsigned lr, int64_t status, int sig, void *ud)
{
    struct fx *f = ud;

    ASSERT_TRUE(g == f->g);
    ASSERT_TRUE(lr < MAXW);
    f->n_exit[lr]++;
    f->status[lr] = status;
    f->sig[lr] = sig;
    f->t_exit[lr] = now_ms();
    f->n_exits++;
    if (f->on_exit_hook)
        f->on_exit_hook(f, lr, status, sig);
}

static void fx_all_cb(struct agent_group *g, void *ud)
{
    struct fx *f = ud;

    ASSERT_TRUE(g == f->g);
    ASSERT_EQ(agent_group_running(g), 0);
    f->n_all++;
    f->t_all = now_ms();
    if (f->on_all)
        f->on_all(f);
    else
        agent_group_free(f->g, fx_free_done, f);
}

/* The relayed stdout is captured through a pipe, or a socket when sock is set. */
static void fx_init_ex(struct fx *f, unsigned nproc, char **argv, bool sock)
{
    int fds[2];

    memset(f, 0, sizeof(*f));
    ASSERT_OK(uv_loop_init(&f->loop));
    if (sock)
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
    else
        ASSERT_OK(pipe2(fds, O_CLOEXEC));
    ASSERT_OK(uv_pipe_init(&f->loop, &f->cap, 0));
    f->cap.data = f;
    ASSERT_OK(uv_pipe_open(&f->cap, fds[0]));
    f->cap_wfd = fds[1];
    snprintf(f->err_path, sizeof(f->err_path), "%s/stderr-XXXXXX", tmp_root);
    f->err_fd = mkostemp(f->err_path, O_CLOEXEC);
    ASSERT_TRUE(f->err_fd >= 0);

    f->cfg.loop = &f->loop;
    f->cfg.argv = argv;
    f->cfg.nproc = nproc;
    f->cfg.run_id = "job42";
    f->cfg.endpoint = "rdzv.example:29400";
    f->cfg.max_restarts = 3;
    f->cfg.grace_ms = 5000;
    f->cfg.self_exe = self_exe;
    f->cfg.reaper_name = reaper_name;
    f->cfg.out_fd = f->cap_wfd;
    f->cfg.err_fd = f->err_fd;
    f->cfg.on_exit = fx_exit_cb;
    f->cfg.on_all_exited = fx_all_cb;
    f->cfg.ud = f;

    f->as.generation = 7;
    f->as.node_rank = 0;
    f->as.nnodes = 1;
    f->as.rank_offset = 0;
    f->as.world_size = nproc;
    f->as.master_addr = "10.1.2.3";
    f->as.master_port = 29500;
    f->as.nccl_id_hex = nccl_hex;
    f->as.restart_count = 0;
}

static void fx_init(struct fx *f, unsigned nproc, char **argv)
{
    fx_init_ex(f, nproc, argv, false);
}

static void fx_start(struct fx *f)
{
    ASSERT_OK(agent_group_new(&f->cfg, &f->g));
    if (!f->cap_defer)
        fx_cap_start(f);
    ASSERT_OK(agent_group_start(f->g, &f->as));
    ASSERT_EQ(agent_group_running(f->g), f->cfg.nproc);
}

/* Run to the end (the group freed, the capture at EOF), then check the loop is clean. */
static void fx_run_finish(struct fx *f)
{
    ASSERT_EQ(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    ASSERT_TRUE(f->freed);
    ASSERT_EQ(uv_loop_close(&f->loop), 0);
    read_file(f->err_path, &f->err);
    close(f->err_fd);
    unlink(f->err_path);
    for (unsigned i = 0; i < MAXW; i++)
        kill_leftover(f->child_pid[i]);
}

static void fx_done(struct fx *f)
{
    rdzv_buf_free(&f->out);
    rdzv_buf_free(&f->err);
    for (unsigned i = 0; i < MAXW; i++)
        free(f->err_files[i]);
}

/* Lines "[rank<rank>]: <rest>" of b, in order, as an array of heap strings (rest only). */
struct lines {
    char **v;
    size_t n, cap;
};

static void lines_of(const struct rdzv_buf *b, unsigned rank, struct lines *ret)
{
    char prefix[32];
    const char *p = (const char *)b->data, *end = p + b->len, *nl;
    size_t plen = (size_t)snprintf(prefix, sizeof(prefix), "[rank%u]: ", rank);

    memset(ret, 0, sizeof(*ret));
    while (p < end && (nl = memchr(p, '\n', (size_t)(end - p)))) {
        /* every relayed line carries a prefix */
        ASSERT_TRUE(nl - p >= 9 && memcmp(p, "[rank", 5) == 0);
        if ((size_t)(nl - p) >= plen && memcmp(p, prefix, plen) == 0) {
            if (ret->n == ret->cap) {
                ret->cap = ret->cap ? 2 * ret->cap : 64;
                ret->v = realloc(ret->v, ret->cap * sizeof(*ret->v));
                ASSERT_NOT_NULL(ret->v);
            }
            ret->v[ret->n] = strndup(p + plen, (size_t)(nl - p) - plen);
            ASSERT_NOT_NULL(ret->v[ret->n]);
            ret->n++;
        }
        p = nl + 1;
    }
    ASSERT_TRUE(p == end); /* nothing after the last newline */
}

static void lines_free(struct lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* The value of KEY in "[rank<rank>]: KEY=VALUE", which must appear exactly once. */
static const char *value_of(const struct lines *l, const char *key, char *buf, size_t len)
{
    size_t klen = strlen(key);
    const char *found = NULL;

    for (size_t i = 0; i < l->n; i++)
        if (strncmp(l->v[i], key, klen) == 0 && l->v[i][klen] == '=') {
            snprintf(tap_note, sizeof(tap_note), "key %s", key);
            ASSERT_NULL(found);
            found = l->v[i] + klen + 1;
        }
    snprintf(tap_note, sizeof(tap_note), "key %s", key);
    ASSERT_NOT_NULL(found);
    tap_note[0] = '\0';
    snprintf(buf, len, "%s", found);
    return buf;
}

#define ASSERT_VALUE(l, key, want)                                                                 \
    do {                                                                                           \
        char v_[PATH_MAX];                                                                         \
        const char *w_ = (want);                                                                   \
        value_of((l), (key), v_, sizeof(v_));                                                      \
        ASSERT_BYTES_STR(v_, strlen(v_), w_);                                                      \
    } while (0)

static void spam_line(char *line, unsigned lr, long i)
{
    int k = snprintf(line, 128, "spam %u %ld ", lr, i);

    memset(line + k, '.', (size_t)(100 - k));
    line[100] = '\0';
}

/* ---- hooks ---- */

/* Remember the error file paths (valid until free), then free. */
static void hook_record_error_files(struct fx *f)
{
    for (unsigned i = 0; i < f->cfg.nproc; i++) {
        const char *p = agent_group_error_file(f->g, i);

        ASSERT_NOT_NULL(p);
        f->err_files[i] = strdup(p);
    }
    ASSERT_NULL(agent_group_error_file(f->g, f->cfg.nproc));
    agent_group_free(f->g, fx_free_done, f);
}

static long parse_after(const char *line, size_t n, const char *key)
{
    char tmp[256];
    const char *p;

    snprintf(tmp, sizeof(tmp), "%.*s", (int)n, line);
    p = strstr(tmp, key);
    return p ? atol(p + strlen(key)) : -1;
}

static unsigned line_rank(const char *line)
{
    return (unsigned)atoi(line + 5);
}

/* Record PID= and CHILD_PID= lines; on the ready-th READY line call f->user's action. */
static void line_watch(struct fx *f, const char *line, size_t n)
{
    unsigned r = line_rank(line);
    long v;

    ASSERT_TRUE(r < MAXW);
    if ((v = parse_after(line, n, "]: CHILD_PID=")) > 0)
        f->child_pid[r] = v;
    if ((v = parse_after(line, n, "]: PID=")) > 0)
        f->worker_pid[r] = v;
    if (n > 7 && memcmp(line + n - 7, ": READY", 7) == 0 && ++f->ready == f->cfg.nproc) {
        f->t_stop = now_ms();
        if (f->user == SIGTERM)
            agent_group_stop(f->g, SIGTERM);
        else
            agent_group_signal(f->g, f->user);
    }
}

/* ---- tests ---- */

static void env_case(unsigned nproc, bool devices, bool log_dir)
{
    static const char *const devs[] = {"3", "2", "1", "0"};
    char *argv[] = {HELPER, "env", "write-error", "fds", NULL};
    static const char outer_token[] = "0123456789abcdef0123456789abcdef";
    char logdir[512], want[PATH_MAX], num[32], token0[AGENT_TOKEN_LEN + 1] = "";
    struct fx f;

    snprintf(tap_note, sizeof(tap_note), "nproc %u devices %d log_dir %d", nproc, devices, log_dir);
    fx_init(&f, nproc, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-env-%u", tmp_root, nproc);
    /* stale or conflicting values in the agent's own environment must be replaced, not kept */
    setenv("RANK", "99", 1);
    setenv("RDZV_NCCL_UNIQUE_ID", "stale", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
    setenv("CUDA_VISIBLE_DEVICES", "5,6", 1);
    unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
    setenv("NCCL_ASYNC_ERROR_HANDLING", "0", 1);
    unsetenv("OMP_NUM_THREADS");
    setenv("RDZV_TEST_INHERITED", "yes", 1);
    setenv("RDZV_AGENT_TOKEN", outer_token, 1); /* we run under another agent */
    setenv("TMPDIR", tmp_root, 1);
    f.cfg.devices = devices ? devs : NULL;
    f.cfg.log_dir = log_dir ? logdir : NULL;
    f.on_all = hook_record_error_files;
    /* node 1 of 2 */
    f.as.node_rank = 1;
    f.as.nnodes = 2;
    f.as.rank_offset = nproc;
    f.as.world_size = 2 * nproc;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, nproc);

    for (unsigned lr = 0; lr < nproc; lr++) {
        unsigned rank = nproc + lr;
        char tok[PATH_MAX];
        struct lines l;

        snprintf(tap_note, sizeof(tap_note), "nproc %u local rank %u", nproc, lr);
        ASSERT_EQ(f.n_exit[lr], 1);
        ASSERT_EQ(f.status[lr], 0);
        ASSERT_EQ(f.sig[lr], 0);
        lines_of(&f.out, rank, &l);
#define NUM(x) (snprintf(num, sizeof(num), "%u", (unsigned)(x)), num)
        ASSERT_VALUE(&l, "RANK", NUM(rank));
        ASSERT_VALUE(&l, "LOCAL_RANK", NUM(lr));
        ASSERT_VALUE(&l, "WORLD_SIZE", NUM(2 * nproc));
        ASSERT_VALUE(&l, "LOCAL_WORLD_SIZE", NUM(nproc));
        ASSERT_VALUE(&l, "GROUP_RANK", "1");
        ASSERT_VALUE(&l, "GROUP_WORLD_SIZE", "2");
        ASSERT_VALUE(&l, "ROLE_NAME", "default");
        ASSERT_VALUE(&l, "ROLE_RANK", NUM(rank));
        ASSERT_VALUE(&l, "ROLE_WORLD_SIZE", NUM(2 * nproc));
        ASSERT_VALUE(&l, "MASTER_ADDR", "10.1.2.3");
        ASSERT_VALUE(&l, "MASTER_PORT", "29500");
        ASSERT_VALUE(&l, "TORCHELASTIC_RESTART_COUNT", "0");
        ASSERT_VALUE(&l, "TORCHELASTIC_MAX_RESTARTS", "3");
        ASSERT_VALUE(&l, "TORCHELASTIC_RUN_ID", "job42");
        ASSERT_VALUE(&l, "TORCHELASTIC_USE_AGENT_STORE", "True");
        ASSERT_VALUE(&l, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        ASSERT_VALUE(&l, "NCCL_ASYNC_ERROR_HANDLING", "0");
        ASSERT_VALUE(&l, "OMP_NUM_THREADS", "1");
        ASSERT_VALUE(&l, "RDZV_NCCL_UNIQUE_ID", nccl_hex);
        ASSERT_VALUE(&l, "RDZV_GENERATION", "7");
        ASSERT_VALUE(&l, "RDZV_ENDPOINT", "rdzv.example:29400");
        ASSERT_VALUE(&l, "CUDA_VISIBLE_DEVICES", devices ? devs[lr] : "5,6");
        ASSERT_VALUE(&l, "RDZV_TEST_INHERITED", "yes");
        ASSERT_VALUE(&l, "ENV_DUPLICATES", "0");
        ASSERT_VALUE(&l, "ERROR_FILE_WRITTEN", "1");
        /* the agent above ours, then the group's reaper token, the same for every worker */
        value_of(&l, AGENT_TOKEN_ENV, tok, sizeof(tok));
        ASSERT_EQ(strlen(tok), 2 * AGENT_TOKEN_LEN + 1);
        ASSERT_EQ(memcmp(tok, outer_token, AGENT_TOKEN_LEN), 0);
        ASSERT_EQ(tok[AGENT_TOKEN_LEN], ',');
        ASSERT_EQ(strspn(tok + AGENT_TOKEN_LEN + 1, "0123456789abcdef"), AGENT_TOKEN_LEN);
        ASSERT_TRUE(memcmp(tok + AGENT_TOKEN_LEN + 1, outer_token, AGENT_TOKEN_LEN) != 0);
        if (lr == 0)
            snprintf(token0, sizeof(token0), "%.*s", AGENT_TOKEN_LEN, tok + AGENT_TOKEN_LEN + 1);
        ASSERT_EQ(memcmp(tok + AGENT_TOKEN_LEN + 1, token0, AGENT_TOKEN_LEN), 0);
        /* nothing the agent opened leaks into a worker; what it inherited passes through */
        ASSERT_VALUE(&l, "OPEN_FDS", inherited_fds);
#undef NUM
        ASSERT_VALUE(&l, "TORCHELASTIC_ERROR_FILE", f.err_files[lr]);
        if (log_dir) {
            snprintf(want, sizeof(want), "%s/job42/attempt_0/%u/error.json", logdir, lr);
            ASSERT_BYTES_STR(f.err_files[lr], strlen(f.err_files[lr]), want);
            ASSERT_TRUE(file_exists(want));
        } else {
            /* <TMPDIR>/rdzv-job42-XXXXXX/attempt_0_<lr>.error.json, removed by free */
            snprintf(want, sizeof(want), "%s/rdzv-job42-", tmp_root);
            ASSERT_EQ(strncmp(f.err_files[lr], want, strlen(want)), 0);
            snprintf(want, sizeof(want), "/attempt_0_%u.error.json", lr);
            ASSERT_EQ(strcmp(f.err_files[lr] + strlen(f.err_files[lr]) - strlen(want), want), 0);
            ASSERT_FALSE(file_exists(f.err_files[lr]));
        }
        lines_free(&l);
    }
    ASSERT_EQ(f.err.len, 0);
    unsetenv("RANK");
    unsetenv("RDZV_NCCL_UNIQUE_ID");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("NCCL_ASYNC_ERROR_HANDLING");
    unsetenv("RDZV_TEST_INHERITED");
    unsetenv("RDZV_AGENT_TOKEN");
    unsetenv("TMPDIR");
    fx_done(&f);
    tap_note[0] = '\0';
}

static void test_env_contract(void)
{
    env_case(2, true, false);
    env_case(3, false, true);
    env_case(4, true, true);
}

/* nproc 1: OMP_NUM_THREADS is not invented; inherited values pass through. */
static void test_env_single(void)
{
    char *argv[] = {HELPER, "env", NULL};
    struct lines l;
    struct fx f;

    unsetenv("OMP_NUM_THREADS");
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", 1);
    unsetenv("NCCL_ASYNC_ERROR_HANDLING");
    fx_init(&f, 1, argv);
    f.cfg.role = "trainer";
    f.cfg.endpoint = NULL;
    f.as.nccl_id_hex = NULL;
    fx_start(&f);
    fx_run_finish(&f);
    lines_of(&f.out, 0, &l);
    ASSERT_VALUE(&l, "OMP_NUM_THREADS", "<unset>");
    ASSERT_VALUE(&l, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    ASSERT_VALUE(&l, "NCCL_ASYNC_ERROR_HANDLING", "1");
    ASSERT_VALUE(&l, "ROLE_NAME", "trainer");
    ASSERT_VALUE(&l, "RDZV_NCCL_UNIQUE_ID", "<unset>");
    ASSERT_VALUE(&l, "RDZV_ENDPOINT", "<unset>");
    ASSERT_VALUE(&l, "LOCAL_WORLD_SIZE", "1");
    lines_free(&l);
    fx_done(&f);

    setenv("OMP_NUM_THREADS", "7", 1);
    fx_init(&f, 2, argv);
    fx_start(&f);
    fx_run_finish(&f);
    lines_of(&f.out, 1, &l);
    ASSERT_VALUE(&l, "OMP_NUM_THREADS", "7");
    lines_free(&l);
    fx_done(&f);
    unsetenv("OMP_NUM_THREADS");
    unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
}

static void test_bad_config(void)
{
    char *argv[] = {HELPER, NULL};
    struct agent_group *g = NULL;
    struct fx f;

    fx_init(&f, 2, argv);
    f.cfg.nproc = 0;
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    f.cfg.nproc = 2;
    f.cfg.run_id = "a/b";
    ASSERT_EQ(agent_group_new(&f.cfg, &g), -EINVAL);
    f.cfg.run_id = "job42";
    ASSERT_OK(agent_group_new(&f.cfg, &g));
    f.g = g;
    f.as.world_size = 1; /* fewer than our two workers */
    ASSERT_EQ(agent_group_start(g, &f.as), -EINVAL);
    ASSERT_NULL(agent_group_error_file(g, 0));
    agent_group_free(g, fx_free_done, &f);
    fx_cap_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 0);
    fx_done(&f);
}

static void test_exit_codes(void)
{
    char *argv[] = {HELPER, "r1:exit=3", "r2:signal=9", "r3:signal=6", "exit=0", NULL};
    struct fx f;

    fx_init(&f, 4, argv);
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 4);
    for (unsigned i = 0; i < 4; i++)
        ASSERT_EQ(f.n_exit[i], 1);
    ASSERT_EQ(f.status[0], 0);
    ASSERT_EQ(f.sig[0], 0);
    ASSERT_EQ(f.status[1], 3);
    ASSERT_EQ(f.sig[1], 0);
    ASSERT_EQ(f.sig[2], SIGKILL);
    ASSERT_EQ(f.sig[3], SIGABRT);
    fx_done(&f);
}

/* A SIGTERM-ignoring worker is SIGKILLed after the grace period, with its grandchild. */
static void test_stop_grace(void)
{
    char *argv[] = {
        HELPER, "r0:ignore-term", "child-sleep=30000", "pid", "print=READY", "sleep=30000", NULL};
    const uint64_t grace = 500;
    struct fx f;
    long dt;

    fx_init(&f, 2, argv);
    f.cfg.grace_ms = grace;
    f.on_line = line_watch;
    f.user = SIGTERM;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.ready, 2);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.n_exit[1], 1);
    ASSERT_EQ(f.sig[0], SIGKILL);
    ASSERT_EQ(f.sig[1], SIGTERM);
    ASSERT_LE(grace, f.t_exit[0] - f.t_stop);
    ASSERT_LE(f.t_exit[1] - f.t_stop, grace - 1);
    ASSERT_LE(grace, f.t_all - f.t_stop);
    ASSERT_LE(f.t_all - f.t_stop, grace + 999);
    /* each worker leads its own session; its grandchild shared its process group and died */
    for (unsigned i = 0; i < 2; i++) {
        ASSERT_TRUE(f.worker_pid[i] > 0 && f.child_pid[i] > 0);
        dt = wait_gone(f.child_pid[i], 1000);
        kill_leftover(f.child_pid[i]);
        ASSERT_TRUE(dt >= 0);
    }
    fx_done(&f);
}

static void test_signal_forward(void)
{
    char *argv[] = {HELPER, "print=READY", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 2, argv);
    f.on_line = line_watch;
    f.user = SIGUSR1;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.sig[0], SIGUSR1);
    ASSERT_EQ(f.sig[1], SIGUSR1);
    ASSERT_LE(f.t_all - f.t_stop, 2000);
    fx_done(&f);
}

static void hook_stop_on_failure(struct fx *f, unsigned lr, int64_t status, int sig)
{
    if (status != 0 || sig != 0) {
        f->t_stop = now_ms();
        agent_group_stop(f->g, SIGTERM);
        /* re-entrant stop while stopping: same deadline, signal sent again */
        agent_group_stop(f->g, SIGTERM);
    }
}

/* A worker failure stops the others from inside on_exit (how the agent fails fast). */
static void test_stop_from_on_exit(void)
{
    char *argv[] = {HELPER, "r1:exit=2", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 3, argv);
    f.on_exit_hook = hook_stop_on_failure;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 3);
    ASSERT_EQ(f.status[1], 2);
    ASSERT_EQ(f.sig[0], SIGTERM);
    ASSERT_EQ(f.sig[2], SIGTERM);
    ASSERT_LE(f.t_all - f.t_stop, 2000);
    fx_done(&f);
}

static void hook_free_on_exit(struct fx *f, unsigned lr, int64_t status, int sig)
{
    agent_group_free(f->g, fx_free_done, f);
}

/* free() from on_exit with workers running: they are SIGKILLed and reaped, nobody is told. */
static void test_free_while_running(void)
{
    char *argv[] = {HELPER, "pid", "r1:sleep=1000", "r1:exit=1", "sleep=30000", NULL};
    struct fx f;

    fx_init(&f, 3, argv);
    f.on_line = line_watch;
    f.on_exit_hook = hook_free_on_exit;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_exits, 1);
    ASSERT_EQ(f.n_exit[1], 1);
    ASSERT_EQ(f.status[1], 1);
    ASSERT_EQ(f.n_all, 0);
    for (unsigned i = 0; i < 3; i += 2) {
        long dt;

        ASSERT_TRUE(f.worker_pid[i] > 0);
        dt = wait_gone(f.worker_pid[i], 1000);
        kill_leftover(f.worker_pid[i]);
        ASSERT_TRUE(dt >= 0);
    }
    fx_done(&f);
}

static void hook_stop_again(struct fx *f)
{
    if (f->n_all == 1) {
        agent_group_stop(f->g, SIGTERM);
        ASSERT_EQ(f->n_all, 1); /* not re-entrant */
        return;
    }
    agent_group_free(f->g, fx_free_done, f);
}

/* stop with nothing running reports on_all_exited from the loop, not from inside the call. */
static void test_stop_idle(void)
{
    char *argv[] = {HELPER, "exit=0", NULL};
    struct fx f;

    fx_init(&f, 2, argv);
    ASSERT_OK(agent_group_new(&f.cfg, &f.g));
    fx_cap_start(&f);
    agent_group_stop(f.g, SIGTERM);
    agent_group_signal(f.g, SIGTERM); /* no-op */
    ASSERT_EQ(f.n_all, 0);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 0);
    fx_done(&f);

    /* after a start: all exit, then a stop on the idle group reports once more */
    fx_init(&f, 2, argv);
    f.on_all = hook_stop_again;
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 2);
    ASSERT_EQ(f.n_exits, 2);
    fx_done(&f);
}

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

static void hook_restart(struct fx *f)
{
    if (f->n_all == 1) {
        f->as.restart_count = 1;
        f->as.generation = 8;
        ASSERT_OK(agent_group_start(f->g, &f->as));
        ASSERT_EQ(agent_group_start(f->g, &f->as), -EBUSY);
        return;
    }
    agent_group_free(f->g, fx_free_done, f);
}

/* Start again from on_all_exited: new attempt directory and restart count. */
static void test_restart(void)
{
    char *argv[] = {HELPER, "env", "exit=1", NULL};
    char logdir[512], path[PATH_MAX];
    struct fx f;

    fx_init(&f, 2, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-restart", tmp_root);
    f.cfg.log_dir = logdir;
    f.on_all = hook_restart;
    fx_start(&f);
    ASSERT_EQ(agent_group_start(f.g, &f.as), -EBUSY);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 2);
    ASSERT_EQ(f.n_exits, 4);
    for (unsigned lr = 0; lr < 2; lr++) {
        struct lines l;
        unsigned seen = 0;

        ASSERT_EQ(f.n_exit[lr], 2);
        ASSERT_EQ(f.status[lr], 1);
        lines_of(&f.out, lr, &l);
        for (size_t i = 0; i < l.n; i++) {
            if (strncmp(l.v[i], "TORCHELASTIC_RESTART_COUNT=", 27) == 0)
                ASSERT_EQ(atoi(l.v[i] + 27), seen++);
            if (strncmp(l.v[i], "RDZV_GENERATION=", 16) == 0)
                ASSERT_EQ(atoi(l.v[i] + 16), 7 + seen - 1);
        }
        ASSERT_EQ(seen, 2);
        lines_free(&l);
        for (unsigned k = 0; k < 2; k++) {
            struct rdzv_buf got = {0};
            char want[64];

            snprintf(path, sizeof(path), "%s/job42/attempt_%u/%u/stdout.log", logdir, k, lr);
            read_file(path, &got);
            ASSERT_OK(rdzv_buf_put_u8(&got, '\0'));
            snprintf(want, sizeof(want), "TORCHELASTIC_RESTART_COUNT=%u\n", k);
            ASSERT_NOT_NULL(strstr((const char *)got.data, want));
            rdzv_buf_free(&got);
        }
    }
    fx_done(&f);
}

/* A command that cannot be run exits 127 and says why, through the worker's stderr. */
static void missing_case(const char *cmd)
{
    char *argv[] = {(char *)cmd, "arg", NULL};
    char want[PATH_MAX];
    struct fx f;

    fx_init(&f, 1, argv);
    fx_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exit[0], 1);
    ASSERT_EQ(f.status[0], 127);
    ASSERT_EQ(f.sig[0], 0);
    snprintf(want, sizeof(want), "[rank0]: rdzv-agent: cannot run '%s': %s\n", cmd,
             strerror(ENOENT));
    ASSERT_BYTES_STR(f.err.data, f.err.len, want);
    ASSERT_EQ(f.out.len, 0);
    fx_done(&f);
}

static void test_missing_command(void)
{
    missing_case("/nonexistent/rdzv-no-such-command");
    missing_case("rdzv-no-such-command-in-path");
}

/* No reaper to reach, none can be started: no group (workers would not be protected). */
static void test_no_reaper(void)
{
    char *argv[] = {HELPER, NULL};

    char name[sizeof(reaper_name) + 8];
    struct fx f;

    /* a name nobody serves (ours may still be served by the last test's reaper, exiting) */
    snprintf(name, sizeof(name), "%s.none", reaper_name);
    fx_init(&f, 2, argv);
    f.cfg.self_exe = "/nonexistent/rdzv-agent";
    f.cfg.reaper_name = name;
    ASSERT_EQ(agent_group_new(&f.cfg, &f.g), UV_ENOENT);
    fx_free_done(&f);
    fx_cap_start(&f);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 0);
    fx_done(&f);
}

/* A start that fails half-way (worker 1's log file cannot be opened): the start returns the error,
 * worker 0 is stopped, on_all_exited still fires, later. */
static void test_start_failure(void)
{
    char *argv[] = {HELPER, "sleep=30000", NULL};
    char logdir[512], path[PATH_MAX + 64];
    struct fx f;

    fx_init(&f, 2, argv);
    snprintf(logdir, sizeof(logdir), "%s/logs-fail", tmp_root);
    snprintf(path, sizeof(path), "%s/job42/attempt_0/1/stdout.log", logdir);
    for (char *p = path + strlen(tmp_root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            ASSERT_TRUE(mkdir(path, 0755) == 0 || errno == EEXIST);
            *p = '/';
        }
    ASSERT_OK(mkdir(path, 0755)); /* a directory where the log file should go */
    f.cfg.log_dir = logdir;
    ASSERT_OK(agent_group_new(&f.cfg, &f.g));
    fx_cap_start(&f);
    ASSERT_EQ(agent_group_start(f.g, &f.as), -EISDIR);
    ASSERT_EQ(agent_group_running(f.g), 1);
    ASSERT_EQ(f.n_all, 0);
    fx_run_finish(&f);
    ASSERT_EQ(f.n_all, 1);
    ASSERT_EQ(f.n_exits, 1);
    ASSERT_EQ(f.sig[0], SIGTERM);
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
 * then the start ends, and kills it (it is in the worker's process group). */
static void test_drain_after_exit(void)
{
    char *argv[] = {HELPER, "child-sleep=30000", "print=bye", "exit=0", NULL};
    struct lines l;
    struct fx f;

    fx_init(&f, 1, argv);
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

/* ---- integration: the reaper ---- */

/* A process of the integration tests: stdout and stderr read into buf and ebuf. */
struct child {
    uv_process_t proc;
    uv_pipe_t out, err;
    struct rdzv_buf buf, ebuf;
    int64_t status;
    int sig;
    bool exited;
    void (*on_data)(struct child *c);
    void *ud;
    long worker_pid, child_pid, reaper_pid;
    bool reaper_killed, agent_killed;
};

static void child_exit_cb(uv_process_t *p, int64_t status, int sig)
{
    struct child *c = (struct child *)p;

    c->status = status;
    c->sig = sig;
    c->exited = true;
    uv_close((uv_handle_t *)p, NULL);
    if (c->on_data)
        c->on_data(c);
}

static void child_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct child *c = h->data;
    struct rdzv_buf *b = h == (uv_handle_t *)&c->out ? &c->buf : &c->ebuf;

    ASSERT_OK(rdzv_buf_reserve(b, 4096));
    buf->base = (char *)b->data + b->len;
    buf->len = b->cap - b->len;
}

static void child_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct child *c = s->data;

    if (nread < 0) {
        uv_close((uv_handle_t *)s, NULL);
        return;
    }
    if (s == (uv_stream_t *)&c->out)
        c->buf.len += (size_t)nread;
    else
        c->ebuf.len += (size_t)nread;
    if (c->on_data)
        c->on_data(c);
}

/* Spawn file (this executable if NULL) with args and env (NULL: ours), in a session of its own if
 * detached; stdin is in_fd if >= 0, else /dev/null. */
static void child_spawn(uv_loop_t *loop, struct child *c, const char *file, char **args, char **env,
                        bool detached, int in_fd)
{
    uv_process_options_t o = {0};
    uv_stdio_container_t io[3];

    ASSERT_OK(uv_pipe_init(loop, &c->out, 0));
    ASSERT_OK(uv_pipe_init(loop, &c->err, 0));
    c->out.data = c->err.data = c;
    io[0].flags = in_fd >= 0 ? UV_INHERIT_FD : UV_IGNORE;
    io[0].data.fd = in_fd;
    io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[1].data.stream = (uv_stream_t *)&c->out;
    io[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    io[2].data.stream = (uv_stream_t *)&c->err;
    o.file = file ? file : self_exe;
    o.args = args;
    o.env = env;
    o.exit_cb = child_exit_cb;
    o.stdio = io;
    o.stdio_count = 3;
    o.flags = detached ? UV_PROCESS_DETACHED : 0;
    ASSERT_OK(uv_spawn(loop, &c->proc, &o));
    ASSERT_OK(uv_read_start((uv_stream_t *)&c->out, child_alloc_cb, child_read_cb));
    ASSERT_OK(uv_read_start((uv_stream_t *)&c->err, child_alloc_cb, child_read_cb));
}

/* Whether b holds text; b is not NUL-terminated. */
static bool buf_has(const struct rdzv_buf *b, const char *text)
{
    return b->len > 0 && memmem(b->data, b->len, text, strlen(text)) != NULL;
}

/* The number after key in b, or 0. */
static long buf_num(const struct rdzv_buf *b, const char *key)
{
    const char *p = b->len > 0 ? memmem(b->data, b->len, key, strlen(key)) : NULL;
    char tmp[32];
    size_t n;

    if (!p)
        return 0;
    p += strlen(key);
    n = (size_t)((const char *)b->data + b->len - p);
    if (n >= sizeof(tmp))
        n = sizeof(tmp) - 1;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    return atol(tmp);
}

static void random_token(char *out)
{
    uint8_t rnd[AGENT_TOKEN_LEN / 2];

    for (size_t i = 0; i < sizeof(rnd); i += 8) {
        uint64_t v = rdzv_random_u64();

        memcpy(rnd + i, &v, sizeof(v));
    }
    rdzv_hex(rnd, sizeof(rnd), out);
    out[AGENT_TOKEN_LEN] = '\0';
}

/* Our environment plus extra (may be NULL), as a heap array of borrowed strings. */
static char **env_plus(char *extra)
{
    extern char **environ;
    size_t n = 0, k = 0;
    char **v;

    while (environ[n])
        n++;
    v = calloc(n + 2, sizeof(*v));
    ASSERT_NOT_NULL(v);
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], AGENT_TOKEN_ENV "=", strlen(AGENT_TOKEN_ENV) + 1) != 0)
            v[k++] = environ[i];
    v[k] = extra;
    return v;
}

static void reaper_usage_case(char **args)
{
    struct child c = {0};
    uv_loop_t loop;

    ASSERT_OK(uv_loop_init(&loop));
    child_spawn(&loop, &c, NULL, args, NULL, false, -1);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    ASSERT_TRUE(c.exited);
    ASSERT_EQ(c.status, 2);
    ASSERT_TRUE(buf_has(&c.ebuf, "rdzv-agent: usage: --reaper <name>"));
    rdzv_buf_free(&c.buf);
    rdzv_buf_free(&c.ebuf);
}

static void test_reaper_usage(void)
{
    char *no_name[] = {self_exe, "--reaper", NULL};
    char *empty[] = {self_exe, "--reaper", "", NULL};

    reaper_usage_case(no_name);
    reaper_usage_case(empty);
}

/* poll() for one fd, through EINTR (libuv's SIGCHLD handler is installed here). */
static int poll_one(struct pollfd *pfd, int ms)
{
    int n;

    while ((n = poll(pfd, 1, ms)) < 0 && errno == EINTR)
        ;
    return n;
}

/* Register with a reaper as an agent does: on fd (a socket pair's end given to the reaper, or -1:
 * connect to name), "=<token> <pid>" with err_fd passed along. Waits for "ok <pid>" (5 s at most)
 * and returns the socket; *ret_pid is the reaper's pid. */
static int reaper_register_as(const char *name, int fd, const char *token, int err_fd, int *ret_pid)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    struct msghdr msg = {0};
    struct iovec iov;
    char text[128];
    struct pollfd pfd;
    ssize_t n;

    if (fd < 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        memcpy(sa.sun_path + 1, name, strlen(name));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))));
    }
    iov.iov_base = text;
    iov.iov_len = (size_t)snprintf(text, sizeof(text), "=%s %ld\n", token, (long)getpid());
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    memset(&cm, 0, sizeof(cm));
    msg.msg_control = cm.buf;
    msg.msg_controllen = sizeof(cm.buf);
    cm.h.cmsg_level = SOL_SOCKET;
    cm.h.cmsg_type = SCM_RIGHTS;
    cm.h.cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(&cm.h), &err_fd, sizeof(err_fd));
    ASSERT_EQ(sendmsg(fd, &msg, 0), (ssize_t)iov.iov_len);
    pfd.fd = fd;
    pfd.events = POLLIN;
    ASSERT_EQ(poll_one(&pfd, 5000), 1);
    n = read(fd, text, sizeof(text) - 1);
    ASSERT_TRUE(n > 3);
    text[n] = '\0';
    ASSERT_EQ(strncmp(text, "ok ", 3), 0);
    *ret_pid = atoi(text + 3);
    ASSERT_TRUE(*ret_pid > 0);
    return fd;
}

static void write_str(int fd, const char *s)
{
    ASSERT_EQ(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* Everything in a pipe whose every writer has closed, as a string (5 s at most). */
static void read_pipe(int fd, char *out, size_t len)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    size_t k = 0;
    ssize_t n;

    for (;;) {
        ASSERT_EQ(poll_one(&pfd, 5000), 1);
        n = read(fd, out + k, len - 1 - k);
        ASSERT_TRUE(n >= 0);
        if (n == 0)
            break;
        k += (size_t)n;
    }
    out[k] = '\0';
}

/* Six sleepers, each leading its own session with a child in its group. Agent A started the
 * reaper (a socket pair), agent B connected to it by name; then A is gone, later B ends cleanly.
 *   0 A listed and unlisted it                         must survive
 *   1 A listed it                                      killed when A is gone, with its child
 *   2 RDZV_AGENT_TOKEN=<other>,<A's token>             killed when A is gone (the /proc scan)
 *   3 RDZV_AGENT_TOKEN=<A's token>0,<other>            must survive (no element is the token)
 *   4 B listed it                                      survives A; B unlists it before "q"
 *   5 RDZV_AGENT_TOKEN=<B's token>                     survives: after "q" nobody scans */
enum { RP_UNLISTED, RP_LISTED, RP_TOKEN, RP_OTHER, RP_B_LISTED, RP_B_TOKEN, _RP_MAX };

struct reaper_fx {
    uv_loop_t loop;
    struct child s[_RP_MAX];
    unsigned ready;
    int want; /* stop the loop once these have exited (bits) */
};

static void rp_on_data(struct child *c)
{
    struct reaper_fx *x = c->ud;
    int exited = 0;

    if (!c->child_pid && buf_has(&c->buf, "READY")) {
        c->child_pid = buf_num(&c->buf, "CHILD_PID=");
        ASSERT_TRUE(c->child_pid > 0);
        if (++x->ready == _RP_MAX)
            uv_stop(&x->loop);
    }
    for (unsigned i = 0; i < _RP_MAX; i++)
        if (x->s[i].exited)
            exited |= 1 << i;
    if (x->want && (exited & x->want) == x->want)
        uv_stop(&x->loop);
}

static void rp_settle(void)
{
    struct timespec ts = {0, 300 * 1000000L};

    nanosleep(&ts, NULL);
}

/* A dead agent's groups and token carriers die; another agent's do not; a clean end scans
 * nothing; the reaper exits with its last connection. */
static void test_reaper_shared(void)
{
    char name[64], ta[AGENT_TOKEN_LEN + 1], tb[AGENT_TOKEN_LEN + 1], other[AGENT_TOKEN_LEN + 1];
    char envs[_RP_MAX][64 + 2 * AGENT_TOKEN_LEN], lines[256], said[1024];
    char *args[] = {self_exe, "--reaper", name, NULL};
    char *sleeper[] = {HELPER, "child-sleep=30000", "print=READY", "sleep=30000", NULL};
    char **env[_RP_MAX];
    struct reaper_fx x = {0};
    struct child spawner = {0};
    int sv[2], erra[2], errb[2], a, b, pid, pid_b;
    long dt;

    snprintf(name, sizeof(name), "rdzv-test-reaper-shared.%d", (int)getpid());
    random_token(ta);
    random_token(tb);
    random_token(other);
    snprintf(envs[RP_TOKEN], sizeof(envs[0]), "%s=%s,%s", AGENT_TOKEN_ENV, other, ta);
    snprintf(envs[RP_OTHER], sizeof(envs[0]), "%s=%s0,%s", AGENT_TOKEN_ENV, ta, other);
    snprintf(envs[RP_B_TOKEN], sizeof(envs[0]), "%s=%s", AGENT_TOKEN_ENV, tb);
    for (unsigned i = 0; i < _RP_MAX; i++)
        env[i] = env_plus(i == RP_TOKEN || i == RP_OTHER || i == RP_B_TOKEN ? envs[i] : NULL);
    ASSERT_OK(uv_loop_init(&x.loop));
    for (unsigned i = 0; i < _RP_MAX; i++) {
        x.s[i].on_data = rp_on_data;
        x.s[i].ud = &x;
        child_spawn(&x.loop, &x.s[i], HELPER, sleeper, env[i], true, -1);
    }
    uv_run(&x.loop, UV_RUN_DEFAULT);
    ASSERT_EQ(x.ready, _RP_MAX);

    /* A starts the reaper on a socket pair, as a group does; it daemonizes at once */
    ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    child_spawn(&x.loop, &spawner, NULL, args, NULL, true, sv[1]);
    close(sv[1]);
    ASSERT_OK(pipe2(erra, O_CLOEXEC));
    ASSERT_OK(pipe2(errb, O_CLOEXEC));
    a = reaper_register_as(name, sv[0], ta, erra[1], &pid);
    b = reaper_register_as(name, -1, tb, errb[1], &pid_b);
    ASSERT_EQ(pid_b, pid); /* one reaper for both */
    close(erra[1]);
    close(errb[1]);
    snprintf(lines, sizeof(lines), "+%d\nbogus\n+1\n-%d\n+%d\n", x.s[RP_UNLISTED].proc.pid,
             x.s[RP_UNLISTED].proc.pid, x.s[RP_LISTED].proc.pid);
    write_str(a, lines);
    snprintf(lines, sizeof(lines), "+%d\n", x.s[RP_B_LISTED].proc.pid);
    write_str(b, lines);

    /* A is gone (no "q") */
    close(a);
    read_pipe(erra[0], said, sizeof(said));
    snprintf(tap_note, sizeof(tap_note), "reaper said: %.200s", said);
    ASSERT_NOT_NULL(strstr(said, "SIGKILLed the 1 worker process group(s) it had listed and 1 "
                                 "more found by its token\n"));
    x.want = 1 << RP_LISTED | 1 << RP_TOKEN;
    uv_run(&x.loop, UV_RUN_DEFAULT);
    ASSERT_EQ(x.s[RP_LISTED].sig, SIGKILL);
    ASSERT_EQ(x.s[RP_TOKEN].sig, SIGKILL);
    rp_settle();
    uv_run(&x.loop, UV_RUN_NOWAIT);
    ASSERT_FALSE(x.s[RP_UNLISTED].exited);
    ASSERT_FALSE(x.s[RP_OTHER].exited);
    ASSERT_FALSE(x.s[RP_B_LISTED].exited);
    ASSERT_FALSE(x.s[RP_B_TOKEN].exited);
    ASSERT_FALSE(pid_gone(pid));

    /* B ends cleanly: nothing listed, no scan, nothing said; the reaper exits */
    snprintf(lines, sizeof(lines), "-%d\nq\n", x.s[RP_B_LISTED].proc.pid);
    write_str(b, lines);
    close(b);
    read_pipe(errb[0], said, sizeof(said));
    ASSERT_BYTES_STR(said, strlen(said), "");
    dt = wait_gone(pid, 2000);
    ASSERT_TRUE(dt >= 0);
    rp_settle();
    uv_run(&x.loop, UV_RUN_NOWAIT);
    ASSERT_FALSE(x.s[RP_B_LISTED].exited);
    ASSERT_FALSE(x.s[RP_B_TOKEN].exited);
    tap_note[0] = '\0';

    x.want = 0; /* run until every handle is closed */
    for (unsigned i = 0; i < _RP_MAX; i++)
        if (!x.s[i].exited)
            ASSERT_OK(kill(-(pid_t)x.s[i].proc.pid, SIGKILL));
    ASSERT_EQ(uv_run(&x.loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&x.loop), 0);
    ASSERT_TRUE(spawner.exited);
    ASSERT_EQ(spawner.status, 0); /* the process we started daemonized */
    for (unsigned i = 0; i < _RP_MAX; i++) {
        dt = wait_gone(x.s[i].child_pid, 2000);
        kill_leftover(x.s[i].child_pid);
        ASSERT_TRUE(dt >= 0);
        rdzv_buf_free(&x.s[i].buf);
        rdzv_buf_free(&x.s[i].ebuf);
        free(env[i]);
    }
    rdzv_buf_free(&spawner.buf);
    rdzv_buf_free(&spawner.ebuf);
    close(erra[0]);
    close(errb[0]);
}

static void agent_on_data(struct child *c)
{
    if (!c->worker_pid && buf_has(&c->buf, "[rank1]: READY\n")) {
        c->worker_pid = buf_num(&c->buf, "[rank1]: PID=");
        c->child_pid = buf_num(&c->buf, "[rank1]: CHILD_PID=");
        c->reaper_pid = buf_num(&c->buf, "REAPER=");
        ASSERT_TRUE(c->worker_pid > 0 && c->child_pid > 0 && c->reaper_pid > 0);
    }
    if (!c->worker_pid || !buf_has(&c->buf, "MINI: rank 0 exited\n") || c->exited)
        return;
    /* ud set: kill the reaper first, SIGKILL the agent once it has another */
    if (c->ud && !c->reaper_killed) {
        c->reaper_killed = true;
        ASSERT_OK(kill((pid_t)c->reaper_pid, SIGKILL));
        return;
    }
    if (c->ud && !buf_has(&c->ebuf, "the worker reaper is back"))
        return;
    if (!c->agent_killed) {
        c->agent_killed = true;
        ASSERT_OK(uv_process_kill(&c->proc, SIGKILL));
    }
}

/* SIGKILL the agent: its running worker (own session, so no terminal or group signal reaches it)
 * and that worker's child die within 2 s, killed by the reaper, which had listed that worker's
 * group only: the other worker exited normally and was unlisted. With restart, the first reaper is
 * SIGKILLed before: the agent starts another, which gets the running worker listed again. */
static void agent_kill_case(bool restart)
{
    char *args[] = {self_exe, "--mini-agent", NULL};
    struct child c = {0};
    uv_loop_t loop;
    long dt;

    snprintf(tap_note, sizeof(tap_note), "reaper restarted %d", restart);
    ASSERT_OK(uv_loop_init(&loop));
    c.on_data = agent_on_data;
    c.ud = restart ? &c : NULL;
    child_spawn(&loop, &c, NULL, args, NULL, false, -1);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    ASSERT_TRUE(c.exited);
    ASSERT_EQ(c.sig, SIGKILL);
    ASSERT_TRUE(c.worker_pid > 0);
    dt = wait_gone(c.worker_pid, 2000);
    kill_leftover(c.worker_pid);
    ASSERT_TRUE(dt >= 0);
    dt = wait_gone(c.child_pid, 2000);
    kill_leftover(c.child_pid);
    ASSERT_TRUE(dt >= 0);
    ASSERT_TRUE(wait_gone(c.reaper_pid, 2000) >= 0);
    snprintf(tap_note, sizeof(tap_note), "agent's stderr: %.*s", (int)c.ebuf.len,
             (const char *)c.ebuf.data);
    /* the stderr pipe reached EOF: the reaper has closed the agent's stderr, after saying what it
     * did on it */
    ASSERT_TRUE(buf_has(&c.ebuf, "SIGKILLed the 1 worker process group(s) it had listed and 0 "
                                 "more found by its token\n"));
    ASSERT_EQ(buf_has(&c.ebuf, "the worker reaper (pid "), restart); /* EOF or a reset */
    ASSERT_EQ(buf_has(&c.ebuf, "the worker reaper is back"), restart);
    rdzv_buf_free(&c.buf);
    rdzv_buf_free(&c.ebuf);
    tap_note[0] = '\0';
}

static void test_agent_sigkill(void)
{
    agent_kill_case(false);
    agent_kill_case(true);
}

/* Tells the test that rank 0 was reaped (and so unlisted). */
static void mini_on_exit(struct agent_group *g, unsigned lr, int64_t status, int sig, void *ud)
{
    printf("MINI: rank %u exited\n", lr);
    fflush(stdout);
}

/* Start the workers once the reaper has acknowledged the group (its pid is then known). */
static void mini_wait_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;
    static struct agent_assignment as = {
        .nnodes = 1, .world_size = 2, .master_addr = "127.0.0.1", .master_port = 1};

    if (!agent_group_reaper_pid(g))
        return;
    uv_close((uv_handle_t *)t, NULL);
    printf("REAPER=%d\n", agent_group_reaper_pid(g));
    fflush(stdout);
    if (agent_group_start(g, &as) < 0)
        exit(1);
}

/* The agent of the reaper tests: rank 0 exits at once, rank 1 (with a child in its process group)
 * sleeps; relayed to our stdout; runs until SIGKILLed. */
static int mini_agent(void)
{
    char *argv[] = {HELPER,        "r0:exit=0", "child-sleep=60000", "pid", "print=READY",
                    "sleep=60000", NULL};
    struct agent_group_cfg cfg = {0};
    struct agent_group *g;
    uv_timer_t wait;
    uv_loop_t loop;

    signal(SIGPIPE, SIG_IGN);
    if (uv_loop_init(&loop) < 0)
        return 1;
    cfg.loop = &loop;
    cfg.argv = argv;
    cfg.nproc = 2;
    cfg.self_exe = self_exe;
    cfg.reaper_name = reaper_name;
    cfg.grace_ms = 1000;
    cfg.on_exit = mini_on_exit;
    if (agent_group_new(&cfg, &g) < 0)
        return 1;
    uv_timer_init(&loop, &wait);
    wait.data = g;
    uv_timer_start(&wait, mini_wait_cb, 5, 5);
    uv_run(&loop, UV_RUN_DEFAULT);
    return 1; /* not reached: the test SIGKILLs us first */
}

int main(int argc, char **argv)
{
    ssize_t n;
    const char *tmp = getenv("TMPDIR");

    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);

    /* Worker output goes to pipes we read; a test reader that went away must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    rdzv_log_setup("test-agent-workers", getenv("RDZV_TEST_LOG") ? RDZV_LOG_DEBUG : RDZV_LOG_WARN);
    n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    ASSERT_TRUE(n > 0);
    self_exe[n] = '\0';
    snprintf(reaper_name, sizeof(reaper_name), "rdzv-test-reaper.%d.%08x", (int)getpid(),
             (unsigned)rdzv_random_u64());
    if (argc > 1 && strcmp(argv[1], "--mini-agent") == 0)
        return mini_agent();
    for (int fd = 3, k = 0; fd < 4096; fd++) {
        int fl = fcntl(fd, F_GETFD);

        if (fl >= 0 && !(fl & FD_CLOEXEC))
            k += snprintf(inherited_fds + k, sizeof(inherited_fds) - (size_t)k, "%s%d",
                          k ? "," : "", fd);
    }

    snprintf(tmp_root, sizeof(tmp_root), "%s/rdzv-agent-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(tmp_root));
    if (argc > 1 && strcmp(argv[1], "--integration") == 0) {
        TEST(test_reaper_usage);
        TEST(test_reaper_shared);
        TEST(test_agent_sigkill);
    } else {
        TEST(test_env_contract);
        TEST(test_env_single);
        TEST(test_bad_config);
        TEST(test_exit_codes);
        TEST(test_stop_grace);
        TEST(test_signal_forward);
        TEST(test_stop_from_on_exit);
        TEST(test_stop_idle);
        TEST(test_free_while_running);
        TEST(test_output);
        TEST(test_restart);
        TEST(test_missing_command);
        TEST(test_no_reaper);
        TEST(test_start_failure);
        TEST(test_drain_after_exit);
        TEST(test_backpressure);
        TEST(test_stop_stalled_reader);
    }
    rm_tree(tmp_root);
    return tap_done();
}
