/* SPDX-License-Identifier: Apache-2.0 */
/* agent-host.c: start the job's rdzvd from an agent, detached, and end it when the job is over
 * (agent-host.h). */
#include "agent-host.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/rdzv-util.h"

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

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
static int find_rdzvd(const char *self_exe, char *out, size_t n)
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

/* Double fork: the watcher is in a session of its own and no child of the agent. */
static int spawn_watcher(char **argv, const char *log_path)
{
    pid_t pid = fork();
    int st;

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int fd;

        if (setsid() < 0 || fork() != 0)
            _exit(0);
        fd = open("/dev/null", O_RDONLY);
        if (fd >= 0)
            dup2(fd, 0);
        fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        for (int i = 3; i < 1024; i++)
            close(i);
        signal(SIGPIPE, SIG_DFL);
        if (chdir("/") < 0) /* keep no file system busy for the job's lifetime */
            _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

int agent_host_maybe_start(const struct agent_host_cfg *c)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res = NULL;
    char portstr[8], bind_addr[INET6_ADDRSTRLEN + 2] = "", rdzvd[PATH_MAX], log_path[PATH_MAX],
                                                  idle[24], token[PATH_MAX];
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
        r = answers(res, 1000);
        freeaddrinfo(res);
        if (r)
            goto out_claim; /* someone hosted meanwhile */
    }
    if (find_rdzvd(c->self_exe, rdzvd, sizeof(rdzvd)) < 0) {
        log_error("hosting rdzvd: rdzvd is not installed beside %s nor in PATH", c->self_exe);
        r = -ENOENT;
        goto out_claim;
    }
    snprintf(log_path, sizeof(log_path), "%s/rdzvd-host-%u.log", tmp && *tmp ? tmp : "/tmp",
             c->port);
    snprintf(idle, sizeof(idle), "%d", AGENT_HOST_IDLE_MS);
    if (c->token_file && !realpath(c->token_file, token)) {
        r = -errno;
        log_error_errno(r, "hosting rdzvd: --token-file %s", c->token_file);
        goto out_claim;
    }
    {
        char *argv[] = {(char *)c->self_exe,
                        "--host-watch",
                        idle,
                        portstr,
                        "--",
                        rdzvd,
                        "--bind",
                        bind_addr,
                        "--port",
                        portstr,
                        "--log-level",
                        c->level >= RDZV_LOG_DEBUG ? "debug" : "info",
                        c->token_file ? "--token-file" : NULL,
                        token,
                        NULL};

        r = spawn_watcher(argv, log_path);
    }
    if (r < 0) {
        log_error_errno(r, "hosting rdzvd: cannot start it");
        goto out_claim;
    }
    /* Wait until it listens (or lost the race to another agent, which then answers). */
    for (uint64_t t0 = now_ms(); now_ms() - t0 < 5000; usleep(50 * 1000)) {
        if (getaddrinfo(c->host, portstr, &hints, &res) != 0)
            break;
        r = answers(res, 200);
        freeaddrinfo(res);
        if (r) {
            log_info("hosting rdzvd at %s:%s for this job (it outlives this agent; log %s)",
                     bind_addr, portstr, log_path);
            r = 1;
            goto out_claim;
        }
    }
    log_warn("hosting rdzvd: nothing listens at %s:%s yet (see %s); joining as a client", c->host,
             portstr, log_path);
    r = 0;
out_claim:
    close(claim);
    return r;
}

/* Connections established to local port `port` (rdzvd's side), from /proc/net/tcp{,6}; *any is
 * set when some socket other than the listener involves the port on either side, TIME_WAIT
 * included: a job too short for a sample to catch its connections still leaves those for 60 s. */
static int count_conns(unsigned port, bool *any)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int n = 0;

    for (unsigned i = 0; i < RDZV_ARRAY_SIZE(files); i++) {
        FILE *f = fopen(files[i], "re");
        char line[512];

        if (!f)
            continue;
        while (fgets(line, sizeof(line), f)) {
            unsigned lp, rp, st;

            /* "  0: 0100007F:7530 0100007F:D2A4 01 ..." */
            if (sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x", &lp, &rp, &st) != 3)
                continue;
            if (st != 0x0a && (lp == port || rp == port))
                *any = true;
            if (lp == port && st == 0x01)
                n++;
        }
        fclose(f);
    }
    return n;
}

int agent_host_watch_main(int argc, char **argv)
{
    uint64_t idle_ms, t0 = now_ms(), last = 0;
    unsigned port;
    bool any;
    pid_t pid;
    int st = 0;

    if (argc < 6 || strcmp(argv[4], "--") != 0) {
        fprintf(stderr, "usage: rdzv-agent --host-watch IDLE_MS PORT -- RDZVD [ARGS...]\n");
        return 2;
    }
    idle_ms = strtoull(argv[2], NULL, 10);
    port = (unsigned)strtoul(argv[3], NULL, 10);
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        execv(argv[5], argv + 5);
        fprintf(stderr, "rdzv-agent --host-watch: cannot run %s: %s\n", argv[5], strerror(errno));
        _exit(127);
    }
    for (;;) {
        uint64_t now;
        pid_t w = waitpid(pid, &st, WNOHANG);

        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        usleep(250 * 1000);
        now = now_ms();
        any = false;
        if (count_conns(port, &any) > 0 || (any && !last))
            last = now;
        if ((last && now - last > idle_ms) || (!last && now - t0 > AGENT_HOST_FIRST_MS)) {
            fprintf(stderr,
                    "rdzv-agent --host-watch: no agent connected for %" PRIu64
                    " ms: the job is over, stopping rdzvd\n",
                    now - (last ? last : t0));
            kill(pid, SIGTERM);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            return 0;
        }
    }
}
