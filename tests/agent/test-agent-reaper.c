/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-reaper.c: the host's reaper (agent-reaper.h) with real agents and workers: usage,
 * one reaper shared by agents, workers killed when their agent is SIGKILLed, and (root, cgroup v2)
 * what a worker started in a session of its own with an empty environment, by the workers'
 * cgroup. This executable is also the reaper (--reaper <name>) and, with --mini-agent and
 * --mini-agent-escaped, the agent that the tests SIGKILL. */
#include "agent-test-proc.h"

#include <sys/wait.h>

#include "agent/group/agent-cgroup.h"

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
 * connect to name), "=<token> <pid>" with the nfds descriptors fds passed along (an agent's: its
 * stderr, then its workers' cgroup directory and that cgroup's cgroup.kill). Waits for "ok <pid>"
 * (5 s at most) and returns the socket; *ret_pid is the reaper's pid. */
static int reaper_register_fds(const char *name, int fd, const char *token, const int *fds,
                               size_t nfds, int *ret_pid)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(3 * sizeof(int))];
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
    ASSERT_TRUE(nfds >= 1 && nfds <= 3);
    memset(&cm, 0, sizeof(cm));
    msg.msg_control = cm.buf;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cm.h.cmsg_level = SOL_SOCKET;
    cm.h.cmsg_type = SCM_RIGHTS;
    cm.h.cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(&cm.h), fds, nfds * sizeof(int));
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

static int reaper_register_as(const char *name, int fd, const char *token, int err_fd, int *ret_pid)
{
    return reaper_register_fds(name, fd, token, &err_fd, 1, ret_pid);
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

/* A file (name in dir) with text. */
static void put_file(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX + 64];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_TRUE(fd >= 0);
    write_str(fd, text);
    close(fd);
}

/* Register with a reaper of our own with the descriptors of dir and of victim (open for writing)
 * as the workers' cgroup and its cgroup.kill, name dir on a "c<path>" line (as agents once did),
 * and be gone without "q". victim holds "precious\n" still, and the reaper said why it ignored
 * them. */
static void no_path_case(const char *dir, const char *victim)
{
    char name[64], tok[AGENT_TOKEN_LEN + 1], said[1024], line[AGENT_CGROUP_PATH_MAX + 8], got[32];
    char *args[] = {self_exe, "--reaper", name, NULL};
    struct child spawner = {0};
    uv_loop_t loop;
    int sv[2], err[2], fds[3], a, pid, fd;
    ssize_t n;
    long dt;

    snprintf(name, sizeof(name), "rdzv-test-reaper-path.%d", (int)getpid());
    random_token(tok);
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    child_spawn(&loop, &spawner, NULL, args, NULL, true, sv[1]);
    close(sv[1]);
    ASSERT_OK(pipe2(err, O_CLOEXEC));
    fds[0] = err[1];
    fds[1] = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fds[2] = open(victim, O_WRONLY | O_CLOEXEC);
    ASSERT_TRUE(fds[1] >= 0 && fds[2] >= 0);
    a = reaper_register_fds(name, sv[0], tok, fds, 3, &pid);
    for (unsigned i = 0; i < 3; i++)
        close(fds[i]);
    snprintf(line, sizeof(line), "c%s\n", dir);
    write_str(a, line);
    close(a); /* gone, without "q" */
    read_pipe(err[0], said, sizeof(said));
    close(err[0]);
    snprintf(tap_note, sizeof(tap_note), "%s: reaper said: %.200s", dir, said);
    fd = open(victim, O_RDONLY | O_CLOEXEC);
    ASSERT_TRUE(fd >= 0);
    n = read(fd, got, sizeof(got) - 1);
    close(fd);
    ASSERT_TRUE(n >= 0);
    got[n] = '\0';
    ASSERT_BYTES_STR(got, strlen(got), "precious\n");
    ASSERT_NOT_NULL(strstr(said, "the workers' cgroup passed is not a cgroup v2 directory and "
                                 "its cgroup.kill open for writing"));
    ASSERT_NULL(strstr(said, "SIGKILLed"));
    dt = wait_gone(pid, 2000); /* nothing kept it */
    ASSERT_TRUE(dt >= 0);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    ASSERT_TRUE(spawner.exited);
    rdzv_buf_free(&spawner.buf);
    rdzv_buf_free(&spawner.ebuf);
    tap_note[0] = '\0';
}

/* What an agent can have the reaper kill is a cgroup whose cgroup.kill it opened for writing
 * itself, never what a path names, never through a link: (1) a directory in /tmp named as a
 * workers' cgroup once was, its cgroup.events saying "populated 1" and its cgroup.kill a symbolic
 * link to a file, passed with that file; (2) where we may make one, a real workers' cgroup, passed
 * with that file as its cgroup.kill. */
static void test_reaper_kills_no_path(void)
{
    char tmp[64], dir[128], victim[160], link[192], why[256];
    struct agent_cgroup cg;

    snprintf(tmp, sizeof(tmp), "/tmp/rdzv-test-reaper-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(tmp));
    snprintf(dir, sizeof(dir), "%s/rdzv-agent.123", tmp);
    snprintf(victim, sizeof(victim), "%s/victim", tmp);
    snprintf(link, sizeof(link), "%s/cgroup.kill", dir);
    ASSERT_OK(mkdir(dir, 0755));
    put_file(tmp, "victim", "precious\n");
    put_file(dir, "cgroup.events", "populated 1\nfrozen 0\n");
    ASSERT_OK(symlink(victim, link));
    no_path_case(dir, victim);
    if (agent_cgroup_open(&cg, why, sizeof(why)) == 0) {
        no_path_case(cg.path, victim);
        ASSERT_OK(agent_cgroup_close(&cg, 0));
    } else {
        printf("# a real cgroup not tried: %s\n", why);
    }
    ASSERT_OK(unlink(link));
    snprintf(link, sizeof(link), "%s/cgroup.events", dir);
    ASSERT_OK(unlink(link));
    ASSERT_OK(rmdir(dir));
    ASSERT_OK(unlink(victim));
    ASSERT_OK(rmdir(tmp));
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

/* Whether the workers' cgroup can be had here, found as the agent finds it: one made and removed
 * (not root, root in a user namespace, a read-only cgroup2 mount, no cgroup.kill before Linux
 * 5.14: why not, in why). */
static bool cgroup_possible(char *why, size_t len)
{
    struct agent_cgroup cg;

    if (agent_cgroup_open(&cg, why, len) < 0)
        return false;
    ASSERT_OK(agent_cgroup_close(&cg, 0));
    return true;
}

static void escaped_on_data(struct child *c)
{
    if (!c->child_pid && buf_has(&c->buf, "[rank0]: READY\n")) {
        c->child_pid = buf_num(&c->buf, "[rank0]: GC=");
        ASSERT_TRUE(c->child_pid > 0);
    }
    if (c->child_pid && !c->agent_killed && !c->exited) {
        c->agent_killed = true;
        ASSERT_OK(uv_process_kill(&c->proc, SIGKILL));
    }
}

/* The rest of the line after key in b, into out. */
static void line_after(const struct rdzv_buf *b, const char *key, char *out, size_t len)
{
    const char *p = memmem(b->data, b->len, key, strlen(key)), *end, *nl;

    ASSERT_NOT_NULL(p);
    p += strlen(key);
    end = (const char *)b->data + b->len;
    nl = memchr(p, '\n', (size_t)(end - p));
    ASSERT_NOT_NULL(nl);
    ASSERT_TRUE((size_t)(nl - p) < len);
    memcpy(out, p, (size_t)(nl - p));
    out[nl - p] = '\0';
}

/* Poll (outside any loop) until path is gone; returns the milliseconds it took, or -1. */
static long wait_no_path(const char *path, unsigned ms)
{
    uint64_t t0 = now_ms();
    struct timespec ts = {0, 5 * 1000000L};
    struct stat st;

    while (stat(path, &st) == 0) {
        if (now_ms() - t0 > ms)
            return -1;
        nanosleep(&ts, NULL);
    }
    return (long)(now_ms() - t0);
}

/* SIGKILL an agent whose worker started a process that left its session and its environment
 * (setsid env -i): neither the worker's process group nor the token finds it, the workers' cgroup
 * does. The reaper kills what is in it, says so, and removes it once it is empty. */
static void test_agent_sigkill_escaped_grandchild(void)
{
    char *args[] = {self_exe, "--mini-agent-escaped", NULL};
    char path[PATH_MAX], why[AGENT_CGROUP_PATH_MAX + 128];
    struct child c = {0};
    uv_loop_t loop;
    long dt;

    if (!cgroup_possible(why, sizeof(why))) {
        printf("# skipped: no workers' cgroup here (%s)\n", why);
        return;
    }
    ASSERT_OK(uv_loop_init(&loop));
    c.on_data = escaped_on_data;
    child_spawn(&loop, &c, NULL, args, NULL, false, -1);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    snprintf(tap_note, sizeof(tap_note), "agent's stderr: %.*s", (int)c.ebuf.len,
             (const char *)c.ebuf.data);
    ASSERT_TRUE(c.exited);
    ASSERT_EQ(c.sig, SIGKILL);
    ASSERT_TRUE(c.child_pid > 0);
    dt = wait_gone(c.child_pid, 3000);
    kill_leftover(c.child_pid);
    ASSERT_TRUE(dt >= 0);
    ASSERT_TRUE(buf_has(&c.ebuf, "workers run in cgroup "));
    ASSERT_TRUE(buf_has(&c.ebuf, "SIGKILLed what was left in its workers' cgroup "));
    ASSERT_FALSE(buf_has(&c.ebuf, "reaper: cannot"));
    line_after(&c.ebuf, "SIGKILLed what was left in its workers' cgroup ", path, sizeof(path));
    ASSERT_NOT_NULL(strstr(path, "/rdzv-agent."));
    ASSERT_TRUE(wait_no_path(path, 3000) >= 0);
    rdzv_buf_free(&c.buf);
    rdzv_buf_free(&c.ebuf);
    tap_note[0] = '\0';
}

/* A pid that no process has (a child of ours, reaped). */
static long dead_pid(void)
{
    pid_t p = fork();

    if (p == 0)
        _exit(0);
    ASSERT_TRUE(p > 0);
    ASSERT_EQ(waitpid(p, NULL, 0), p);
    return (long)p;
}

/* What agent_cgroup_remove_stale() removes of the cgroups in a directory: the empty ones whose
 * name says they are a gone agent's of our PID namespace, and below those only the same. */
static void test_stale_cgroups_are_gone_agents_of_our_namespace(void)
{
    enum { GONE, OTHER_NS, LIVE, OURS, GONE_LIVE, GONE_LIVE_IN, GONE_GONE, GONE_GONE_IN, GONE_OTHER,
           GONE_OTHER_IN, OLD, _N };
    static const bool kept[_N] = {
        [OTHER_NS] = true, [LIVE] = true, [OURS] = true, [GONE_LIVE] = true,
        [GONE_LIVE_IN] = true, [GONE_OTHER] = true, [GONE_OTHER_IN] = true, [OLD] = true};
    char why[256], top[AGENT_CGROUP_PATH_MAX + 64], path[_N][AGENT_CGROUP_PATH_MAX + 160];
    struct agent_cgroup cg;
    unsigned long ns;
    struct stat st;
    long dead = dead_pid(), self = (long)getpid();
    int fd;

    if (agent_cgroup_open(&cg, why, sizeof(why)) < 0) {
        printf("# skipped: no workers' cgroup here (%s)\n", why);
        return;
    }
    ASSERT_OK(stat("/proc/self/ns/pid", &st));
    ns = (unsigned long)st.st_ino;
    snprintf(top, sizeof(top), "%.*s/rdzv-test-stale.%ld",
             (int)(strrchr(cg.path, '/') - cg.path), cg.path, self);
    ASSERT_OK(agent_cgroup_close(&cg, 0));
    ASSERT_OK(mkdir(top, 0755));
#define AT(i, fmt, ...) snprintf(path[i], sizeof(path[i]), "%s/" fmt, top, __VA_ARGS__)
    AT(GONE, "rdzv-agent.%lu.%ld.0000000a", ns, dead);
    AT(OTHER_NS, "rdzv-agent.%lu.%ld.0000000b", ns + 1, dead);
    AT(LIVE, "rdzv-agent.%lu.1.0000000c", ns);
    AT(OURS, "rdzv-agent.%lu.%ld.0000000d", ns, self);
    AT(GONE_LIVE, "rdzv-agent.%lu.%ld.0000000e", ns, dead);
    AT(GONE_LIVE_IN, "rdzv-agent.%lu.%ld.0000000e/rdzv-agent.%lu.1.0000000f", ns, dead, ns);
    AT(GONE_GONE, "rdzv-agent.%lu.%ld.00000010", ns, dead);
    AT(GONE_GONE_IN, "rdzv-agent.%lu.%ld.00000010/rdzv-agent.%lu.%ld.00000011", ns, dead, ns,
       dead);
    AT(GONE_OTHER, "rdzv-agent.%lu.%ld.00000012", ns, dead);
    AT(GONE_OTHER_IN, "rdzv-agent.%lu.%ld.00000012/a-cgroup-of-its-workers", ns, dead);
    AT(OLD, "rdzv-agent.%ld", dead);
#undef AT
    for (unsigned i = 0; i < _N; i++)
        ASSERT_OK(mkdir(path[i], 0755));
    fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_TRUE(fd >= 0);
    agent_cgroup_remove_stale(fd);
    close(fd);
    for (unsigned i = 0; i < _N; i++) {
        snprintf(tap_note, sizeof(tap_note), "%.200s", path[i] + strlen(top));
        ASSERT_EQ(stat(path[i], &st) == 0, kept[i]);
    }
    tap_note[0] = '\0';
    for (unsigned i = _N; i-- > 0;)
        (void)rmdir(path[i]);
    ASSERT_OK(rmdir(top));
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
 * sleeps; relayed to our stdout; runs until SIGKILLed. With escaped, one worker that starts a
 * process in a session of its own with an empty environment, says its pid (GC=) once it runs,
 * then sleeps; our log at info level, for the line saying where the workers run. */
static int mini_agent(bool escaped)
{
    char *helper_argv[] = {HELPER,        "r0:exit=0", "child-sleep=60000", "pid", "print=READY",
                           "sleep=60000", NULL};
    char *sh_argv[] = {"/bin/sh", "-c",
                       "setsid env -i sleep 600 >/dev/null 2>&1 & p=$!; i=0; "
                       "while [ \"$(cat /proc/$p/comm)\" != sleep ] && [ $i -lt 500 ]; "
                       "do sleep 0.01; i=$((i+1)); done; echo GC=$p; echo READY; exec sleep 600",
                       NULL};
    char **argv = escaped ? sh_argv : helper_argv;
    struct agent_group_cfg cfg = {0};
    struct agent_group *g;
    uv_timer_t wait;
    uv_loop_t loop;

    signal(SIGPIPE, SIG_IGN);
    if (uv_loop_init(&loop) < 0)
        return 1;
    cfg.loop = &loop;
    cfg.argv = argv;
    cfg.nproc = escaped ? 1 : 2;
    if (escaped)
        rdzv_log_setup("mini-agent", RDZV_LOG_INFO);
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
    if (argc > 1 && strcmp(argv[1], "--reaper") == 0)
        return agent_reaper_main(argc, argv);
    proc_setup("test-agent-reaper");
    if (argc > 1 && strcmp(argv[1], "--mini-agent") == 0)
        return mini_agent(false);
    if (argc > 1 && strcmp(argv[1], "--mini-agent-escaped") == 0)
        return mini_agent(true);
    TEST(test_reaper_usage);
    TEST(test_reaper_shared);
    TEST(test_reaper_kills_no_path);
    TEST(test_agent_sigkill);
    TEST(test_agent_sigkill_escaped_grandchild);
    TEST(test_stale_cgroups_are_gone_agents_of_our_namespace);
    return tap_done();
}
