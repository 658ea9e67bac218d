/* SPDX-License-Identifier: Apache-2.0 */
/* agent-host.c: start the job's rdzvd from an agent, detached, and wait until it listens
 * (agent-host.h). */
#include "agent/session/agent-host.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/group/agent-dirs.h"
#include "common/rdzv-util.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* 1 when a TCP connect to ai succeeds within timeout_ms. */
static int try_connect(const struct addrinfo *ai, int timeout_ms)
{
    struct pollfd pfd;
    int fd, r, err = 0;

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    r = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS) {
        pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
        r = poll(&pfd, 1, timeout_ms) == 1 ? 0 : -1;
        if (r == 0 &&
            (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &(socklen_t){sizeof(err)}) < 0 || err))
            r = -1;
    }
    if (r == 0 && rdzv_fd_self_connected(fd)) /* nothing listens there (rdzv-util.h) */
        r = -1;
    close(fd);
    return r == 0;
}

/* 1 when this host may bind ai's address and port (the kernel says the address is ours). */
static int can_bind(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

    if (fd < 0)
        return 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
    r = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    close(fd);
    return r;
}

static int answers(const struct addrinfo *res, int timeout_ms)
{
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (try_connect(ai, timeout_ms))
            return 1;
    return 0;
}

/* A UDP socket bound to addr:port, or -1 when another process holds it. */
static int claim_port(const char *addr, uint16_t port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST}, *res;
    char portstr[8];
    int fd = -1;

    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(addr, portstr, &hints, &res) != 0)
        return -1;
    fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* rdzvd beside rdzv-agent (installed), in the build tree, or in PATH. */
int agent_host_find_rdzvd(const char *self_exe, char *out, size_t n)
{
    static const char *const rel[] = {"rdzvd", "../daemon/rdzvd", "../sbin/rdzvd"};
    char dir[PATH_MAX], *slash;

    snprintf(dir, sizeof(dir), "%s", self_exe);
    slash = strrchr(dir, '/');
    for (unsigned i = 0; slash && i < RDZV_ARRAY_SIZE(rel); i++) {
        *slash = '\0';
        snprintf(out, n, "%.*s/%s", PATH_MAX - 32, dir, rel[i]);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return rdzv_find_in_path("rdzvd", out, n);
}

/* In the grandchild: fd 0 /dev/null, 1 and 2 the log, 3 the ready pipe (without CLOEXEC) and 4
 * a copy of it that rdzvd never touches (it closes 3 once it wrote its port: 4 keeps the pipe
 * open until it exits), no other descriptor; cwd /. Returns 0 or -1. */
static int child_fds(int ready_w, const char *log_path)
{
    int keep = fcntl(ready_w, F_DUPFD_CLOEXEC, 10), fd;

    if (keep < 0)
        return -1;
    fd = open("/dev/null", O_RDONLY);
    if (fd < 0 || dup2(fd, 0) < 0)
        return -1;
    if (fd != 0)
        close(fd);
    fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        return -1;
    if (fd > 2)
        close(fd);
    if (dup2(keep, AGENT_HOST_READY_FD) < 0 || /* dup2 clears FD_CLOEXEC on the copy */
        dup2(keep, AGENT_HOST_LIFELINE_FD) < 0)
        return -1;
    for (int i = AGENT_HOST_LIFELINE_FD + 1; i < 1024; i++)
        close(i);
    return chdir("/"); /* keep no file system busy for the job's lifetime */
}

int agent_host_log_path(char *out, size_t n, const char *log_dir, const char *dir,
                        const char *fmt, ...)
{
    char name[64];
    va_list ap;
    int r;

    if (!log_dir) {
        snprintf(out, n, "%s/rdzvd.log", dir);
        return 0;
    }
    r = agent_dirs_mkdir_p(log_dir);
    if (r < 0)
        return log_error_errno(r, "hosting rdzvd: cannot create --log-dir %s", log_dir);
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    snprintf(out, n, "%s/%s", log_dir, name);
    return 0;
}

void agent_host_log_tail(const char *path, char *out, size_t n)
{
    char buf[1024];
    ssize_t got = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t e, b;

    snprintf(out, n, "(its log is empty)");
    if (fd >= 0) {
        off_t size = lseek(fd, 0, SEEK_END);

        got = pread(fd, buf, sizeof(buf) - 1, size > (off_t)sizeof(buf) - 1
                                                  ? size - (off_t)sizeof(buf) + 1 : 0);
        close(fd);
    }
    if (got <= 0)
        return;
    for (e = (size_t)got; e > 0 && (buf[e - 1] == '\n' || buf[e - 1] == ' '); e--)
        ;
    for (b = e; b > 0 && buf[b - 1] != '\n'; b--)
        ;
    if (e > b)
        snprintf(out, n, "%.*s", (int)(e - b), buf + b);
}

/* Double fork: rdzvd runs in a session of its own and is no child of the agent, so it outlives
 * a SIGKILLed agent. Returns 0 once the intermediate child is reaped, or a negative errno. */
int agent_host_spawn(char **argv, int ready_w, const char *log_path)
{
    pid_t pid = fork();
    int st;

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (setsid() < 0 || fork() != 0)
            _exit(0);
        signal(SIGPIPE, SIG_DFL);
        if (child_fds(ready_w, log_path) < 0)
            _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

/* Wait for rdzvd's "PORT\n" on its --ready-fd pipe. Returns 1 (ready), 0 (EOF: it exited before
 * listening) or -ETIMEDOUT. */
static int wait_ready(int fd, int timeout_ms)
{
    uint64_t t0 = rdzv_now_ms();
    char buf[16];
    size_t n = 0;

    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = (int64_t)timeout_ms - (int64_t)(rdzv_now_ms() - t0);
        ssize_t r;

        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
            return -errno;
        if (!pfd.revents)
            continue;
        r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        n += (size_t)r;
        if (memchr(buf, '\n', n) || n == sizeof(buf) - 1)
            return 1;
    }
}

/* The hosted rdzvd's --metrics-port-file (written before it said it listens): say where its
 * status page is, on the address it binds (--metrics-bind; the endpoint's host for the
 * wildcard). */
static void log_metrics_port(const char *bind_addr, const char *host, const char *dir)
{
    char path[PATH_MAX + 16], buf[16] = "", where[300];
    FILE *f;

    snprintf(path, sizeof(path), "%s/metrics-port", dir);
    f = fopen(path, "re");
    if (!f || !fgets(buf, sizeof(buf), f)) {
        log_warn("hosting rdzvd: its --metrics-port-file %s is missing", path);
    } else {
        rdzv_format_hostport(where, sizeof(where),
                             strcmp(bind_addr, "0.0.0.0") && strcmp(bind_addr, "::") ? bind_addr
                                                                                     : host,
                             (uint16_t)strtol(buf, NULL, 10));
        log_info("the hosted rdzvd's status page: http://%s/", where);
    }
    if (f)
        fclose(f);
}

/* The hosted rdzvd's arguments: HOST_ARGS_FIXED first, then at most HOST_ARG_PAIRS options of
 * a flag and a value each (--remove-dir; 3 of --metrics-port; 5 as a replica; --token-file), then
 * the NULL. An option added below is counted here, or host_arg's assertion stops it. */
enum {
    HOST_ARGS_FIXED = 11,
    HOST_ARG_PAIRS = 1 + 3 + 5 + 1,
    HOST_ARGS_MAX = HOST_ARGS_FIXED + 2 * HOST_ARG_PAIRS + 1,
};

static void host_arg(char **argv, unsigned *n, const char *flag, char *value)
{
    assert(*n + 2 < HOST_ARGS_MAX); /* the pair and the NULL after it */
    argv[(*n)++] = (char *)flag;
    argv[(*n)++] = value;
}

/* Start rdzvd (argv) detached and wait until it listens. Returns 1 (it does), 0 (it exited
 * before listening, or is slow: the caller joins as a client) or a negative errno (logged).
 * dir: the directory made for it, deleted when it did not start. */
static int start_and_wait(const struct agent_host_cfg *c, char **argv, const char *log_path,
                          const char *dir)
{
    int ready[2], r;

    if (pipe2(ready, O_CLOEXEC) < 0) {
        r = -errno;
        log_error_errno(r, "hosting rdzvd: pipe");
        return r;
    }
    r = agent_host_spawn(argv, ready[1], log_path);
    close(ready[1]); /* rdzvd holds the only write end now: EOF when it exits */
    if (r < 0) {
        log_error_errno(r, "hosting rdzvd: cannot start it");
        (void)rdzv_rmtree(dir);
        goto out;
    }
    r = wait_ready(ready[0], AGENT_HOST_READY_MS);
    if (r == 1) {
        log_info("hosting rdzvd at %s:%s for this job (it outlives this agent; log %s)", argv[2],
                 argv[4], log_path);
        if (c->metrics_port >= 0)
            log_metrics_port(c->metrics_bind, c->host, dir);
    } else if (r == 0) { /* it could not listen: another agent's rdzvd may have won the port */
        char why[400];

        /* It is gone (EOF): nothing runs on its directory. Its log's last line says why. */
        agent_host_log_tail(log_path, why, sizeof(why));
        (void)rdzv_rmtree(dir);
        log_warn("the rdzvd this agent started exited before listening: %s; joining as a "
                 "client", why);
    } else
        log_warn("hosting rdzvd: not listening at %s:%u within %d ms (see %s); joining as a "
                 "client", c->host, c->port, AGENT_HOST_READY_MS, log_path);
    r = r > 0;
out:
    close(ready[0]);
    return r;
}

int agent_host_maybe_start(const struct agent_host_cfg *c)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res = NULL;
    char portstr[8], bind_addr[INET6_ADDRSTRLEN + 2] = "", rdzvd[PATH_MAX], log_path[PATH_MAX],
                                                  token[PATH_MAX], key[PATH_MAX], dir[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    int claim, r;

    snprintf(portstr, sizeof(portstr), "%u", c->port);
    r = getaddrinfo(c->host, portstr, &hints, &res);
    if (r != 0) {
        log_warn("hosting rdzvd: cannot resolve %s: %s", c->host, gai_strerror(r));
        return c->must || c->rank0 ? -EINVAL : 0;
    }
    if (answers(res, 1000)) {
        freeaddrinfo(res);
        return 0;
    }
    for (const struct addrinfo *ai = res; ai && !*bind_addr; ai = ai->ai_next)
        if (can_bind(ai))
            (void)getnameinfo(ai->ai_addr, ai->ai_addrlen, bind_addr, sizeof(bind_addr), NULL, 0,
                              NI_NUMERICHOST);
    freeaddrinfo(res);
    if (!*bind_addr) {
        if (!c->must && !c->rank0)
            return 0; /* another host's address: its agent hosts */
        snprintf(bind_addr, sizeof(bind_addr), "0.0.0.0");
    }
    /* Agents on one host that may all host (loopback, a shared address) race: the one that
     * holds the UDP port of the same address hosts; the others join. */
    claim = claim_port(bind_addr, c->port);
    if (claim < 0)
        return 0;
    if (getaddrinfo(c->host, portstr, &hints, &res) == 0) {
        int answered = answers(res, 1000);

        freeaddrinfo(res);
        r = 0;
        if (answered)
            goto out_claim; /* someone hosted meanwhile */
    }
    if (agent_host_find_rdzvd(c->self_exe, rdzvd, sizeof(rdzvd)) < 0) {
        log_error("hosting rdzvd: rdzvd is not installed beside %s nor in PATH", c->self_exe);
        r = -ENOENT;
        goto out_claim;
    }
    if (c->token_file && !realpath(c->token_file, token)) {
        r = -errno;
        log_error_errno(r, "hosting rdzvd: --token-file %s", c->token_file);
        goto out_claim;
    }
    if (c->replicas > 1 && c->replica_key_file && !realpath(c->replica_key_file, key)) {
        r = -errno;
        log_error_errno(r, "hosting rdzvd: --replica-key-file %s", c->replica_key_file);
        goto out_claim;
    }
    /* Its own directory, deleted when it ends normally: its log (unless --log-dir keeps it)
     * and, as a replica, its Raft log. */
    snprintf(dir, sizeof(dir), "%s/rdzvd-host-%u-XXXXXX", tmp && *tmp ? tmp : "/tmp", c->port);
    if (!mkdtemp(dir)) {
        r = -errno;
        log_error_errno(r, "hosting rdzvd: cannot create its directory %s", dir);
        goto out_claim;
    }
    r = agent_host_log_path(log_path, sizeof(log_path), c->log_dir, dir, "rdzvd-host-%u.log",
                            c->port);
    if (r < 0) {
        (void)rdzv_rmtree(dir);
        goto out_claim;
    }
    {
        char *argv[HOST_ARGS_MAX] = {rdzvd,
                                     "--bind",
                                     bind_addr,
                                     "--port",
                                     portstr,
                                     "--exit-when-idle",
                                     AGENT_HOST_IDLE,
                                     "--ready-fd",
                                     STR(AGENT_HOST_READY_FD),
                                     "--log-level",
                                     c->level >= RDZV_LOG_DEBUG ? "debug" : "info"};
        char peers[300], nrep[8], state[PATH_MAX + 8], mport[16], mfile[PATH_MAX + 16];
        unsigned n = HOST_ARGS_FIXED;

        host_arg(argv, &n, "--remove-dir", dir); /* made for this job only: gone with it */
        if (c->metrics_port >= 0) {              /* its port, written where the agent reads it */
            snprintf(mport, sizeof(mport), "%d", c->metrics_port);
            snprintf(mfile, sizeof(mfile), "%s/metrics-port", dir);
            host_arg(argv, &n, "--metrics-port", mport);
            host_arg(argv, &n, "--metrics-port-file", mfile);
            /* not its --bind: 127.0.0.1 unless the agent says */
            host_arg(argv, &n, "--metrics-bind", (char *)c->metrics_bind);
        }
        if (c->replicas > 1) {
            /* Replica 1 of a cluster that grows to c->replicas on the job's hosts. */
            snprintf(state, sizeof(state), "%s/state", dir);
            rdzv_format_hostport(peers, sizeof(peers),
                                 strcmp(bind_addr, "0.0.0.0") ? bind_addr : c->host, c->port);
            snprintf(nrep, sizeof(nrep), "%u", c->replicas);
            host_arg(argv, &n, "--peers", peers);
            host_arg(argv, &n, "--replica-id", "1");
            host_arg(argv, &n, "--replicas", nrep);
            host_arg(argv, &n, "--state-dir", state);
            if (c->replica_key_file) {
                host_arg(argv, &n, "--replica-key-file", key);
            }
            /* Said at info only once there are replicas (REPLICAS names more than one): a job
             * that keeps to one host never has any. */
            log_debug("hosting rdzvd as the first of up to %u replicas (started on as many "
                      "hosts of the job as they join)",
                      c->replicas);
        }
        if (c->token_file) {
            host_arg(argv, &n, "--token-file", token);
        }
        argv[n] = NULL;
        r = start_and_wait(c, argv, log_path, dir);
        assert(n < HOST_ARGS_MAX);
    }
out_claim:
    close(claim);
    return r;
}
