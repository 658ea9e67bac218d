/* SPDX-License-Identifier: Apache-2.0 */
/* agent-fixture.h: the worker-group fixture of test-agent-workers and test-agent-relay: one loop,
 * one group running tests/agent/helper-worker, its relayed stdout captured through a pipe (or a
 * socket) and its stderr through a regular file, callback tallies and hooks. Header-only (static
 * functions), included by one test executable's single source file; the test's thread only. */
#pragma once
#include "agent-test-proc.h"

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
    int user;             /* line_watch: the signal to stop or signal with on READY */
    void *ptr;            /* per-test state for hooks */
    const void *user_ptr; /* per-test constant data for hooks */
};

TEST_UNUSED static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)remove(path);
    return 0;
}

TEST_UNUSED static void rm_tree(const char *path)
{
    (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TEST_UNUSED static bool file_exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0;
}

/* Whole file into b (appended). */
TEST_UNUSED static void read_file(const char *path, struct rdzv_buf *b)
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

/* ---- fixture ---- */

TEST_UNUSED static void cap_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct fx *f = h->data;

    ASSERT_OK(rdzv_buf_reserve(&f->out, 65536));
    buf->base = (char *)f->out.data + f->out.len;
    buf->len = f->out.cap - f->out.len;
}

TEST_UNUSED static void cap_close_cb(uv_handle_t *h)
{
}

TEST_UNUSED static void cap_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
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

TEST_UNUSED static void fx_cap_start(struct fx *f)
{
    ASSERT_OK(uv_read_start((uv_stream_t *)&f->cap, cap_alloc_cb, cap_read_cb));
}

TEST_UNUSED static void fx_free_done(void *ud)
{
    struct fx *f = ud;

    f->freed = true;
    /* The group closed its private descriptor of the capture pipe: now the reader sees EOF. */
    close(f->cap_wfd);
    f->cap_wfd = -1;
}

TEST_UNUSED static void fx_exit_cb(struct agent_group *g, unsigned lr, int64_t status, int sig,
                                   void *ud)
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

TEST_UNUSED static void fx_all_cb(struct agent_group *g, void *ud)
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
TEST_UNUSED static void fx_init_ex(struct fx *f, unsigned nproc, char **argv, bool sock)
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

TEST_UNUSED static void fx_init(struct fx *f, unsigned nproc, char **argv)
{
    fx_init_ex(f, nproc, argv, false);
}

TEST_UNUSED static void fx_start(struct fx *f)
{
    ASSERT_OK(agent_group_new(&f->cfg, &f->g));
    if (!f->cap_defer)
        fx_cap_start(f);
    ASSERT_OK(agent_group_start(f->g, &f->as));
    ASSERT_EQ(agent_group_running(f->g), f->cfg.nproc);
}

/* Run to the end (the group freed, the capture at EOF), then check the loop is clean. */
TEST_UNUSED static void fx_run_finish(struct fx *f)
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

TEST_UNUSED static void fx_done(struct fx *f)
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

TEST_UNUSED static void lines_of(const struct rdzv_buf *b, unsigned rank, struct lines *ret)
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

TEST_UNUSED static void lines_free(struct lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* The value of KEY in "[rank<rank>]: KEY=VALUE", which must appear exactly once. */
TEST_UNUSED static const char *value_of(const struct lines *l, const char *key, char *buf,
                                        size_t len)
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

TEST_UNUSED static void spam_line(char *line, unsigned lr, long i)
{
    int k = snprintf(line, 128, "spam %u %ld ", lr, i);

    memset(line + k, '.', (size_t)(100 - k));
    line[100] = '\0';
}

/* ---- hooks ---- */

/* Remember the error file paths (valid until free), then free. */
TEST_UNUSED static void hook_record_error_files(struct fx *f)
{
    for (unsigned i = 0; i < f->cfg.nproc; i++) {
        const char *p = agent_group_error_file(f->g, i);

        ASSERT_NOT_NULL(p);
        f->err_files[i] = strdup(p);
    }
    ASSERT_NULL(agent_group_error_file(f->g, f->cfg.nproc));
    agent_group_free(f->g, fx_free_done, f);
}

TEST_UNUSED static long parse_after(const char *line, size_t n, const char *key)
{
    char tmp[256];
    const char *p;

    snprintf(tmp, sizeof(tmp), "%.*s", (int)n, line);
    p = strstr(tmp, key);
    return p ? atol(p + strlen(key)) : -1;
}

TEST_UNUSED static unsigned line_rank(const char *line)
{
    return (unsigned)atoi(line + 5);
}

/* Record PID= and CHILD_PID= lines; on the ready-th READY line call f->user's action. */
TEST_UNUSED static void line_watch(struct fx *f, const char *line, size_t n)
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

/* main()'s part for fixture tests: the inherited descriptors, then a temporary root. */
TEST_UNUSED static void fx_setup_process(void)
{
    const char *tmp = getenv("TMPDIR");

    for (int fd = 3, k = 0; fd < 4096; fd++) {
        int fl = fcntl(fd, F_GETFD);

        if (fl >= 0 && !(fl & FD_CLOEXEC))
            k += snprintf(inherited_fds + k, sizeof(inherited_fds) - (size_t)k, "%s%d",
                          k ? "," : "", fd);
    }

    snprintf(tmp_root, sizeof(tmp_root), "%s/rdzv-agent-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(tmp_root));
}
