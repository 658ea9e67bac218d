/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-peer.c: the client end of a loopback connection, from the kernel (agent-peer.h), as
 * the store front asks it of a full front's newcomers (issue 71, case 3). An IPv4 client and a
 * dual-stack one (::ffff:127.0.0.1, as PyTorch's) are both found, with their owner and cgroup; a
 * closed one, an unknown one and one from 127.0.0.2 are not; another user's socket names that
 * user (as root); the agent's own check finds its own user; and
 * a lookup costs microseconds, not the scan of /proc it replaced (25-140 ms each). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/group/agent-cgroup.h"
#include "agent/group/agent-peer.h"
#include "../tap.h"

#define NOBODY 65534

static int listener(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(l >= 0);
    ASSERT_OK(bind(l, (struct sockaddr *)&a, n));
    ASSERT_OK(listen(l, 8));
    ASSERT_OK(getsockname(l, (struct sockaddr *)&a, &n));
    *port = ntohs(a.sin_port);
    return l;
}

/* A client of 127.0.0.1:port, IPv4 or IPv6 v4-mapped. */
static int client(uint16_t port, bool v6)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    int c = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(c >= 0);
    ASSERT_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", &a6.sin6_addr), 1);
    ASSERT_OK(v6 ? connect(c, (struct sockaddr *)&a6, sizeof(a6))
                 : connect(c, (struct sockaddr *)&a, sizeof(a)));
    return c;
}

/* The accepted end's peer port. */
static uint16_t accept_port(int l, int *s)
{
    struct sockaddr_in p;
    socklen_t n = sizeof(p);

    *s = accept(l, (struct sockaddr *)&p, &n);
    ASSERT_TRUE(*s >= 0);
    return ntohs(p.sin_port);
}

static void test_own_clients(void)
{
    struct agent_cgroup none;
    uint64_t own[2];
    uint16_t port, cport;
    int l = listener(&port), n;

    agent_cgroup_init(&none);
    n = agent_cgroup_worker_ids(&none, own); /* no workers' cgroup: the caller's own */
    for (int v6 = 0; v6 < 2; v6++) {
        struct agent_peer_sock ps;
        int c = client(port, v6), s;

        cport = accept_port(l, &s);
        ASSERT_OK(agent_peer_sock(cport, port, &ps));
        ASSERT_EQ(ps.uid, geteuid());
        if (ps.has_cgroup && n > 0)
            ASSERT_EQ(ps.cgroup_id, own[0]); /* made here, in this process's cgroup */
        close(c);
        /* closed at its end (FIN_WAIT, orphaned): no owner, gone */
        ASSERT_EQ(agent_peer_sock(cport, port, &ps), -ENOENT);
        close(s);
    }
    ASSERT_EQ(agent_peer_sock(1, port, &(struct agent_peer_sock){0}), -ENOENT);
    close(l);
}

/* The lookup is of 127.0.0.1's end: a client from 127.0.0.2 is not found by its port (the front
 * takes a client from another loopback address for none of the workers': it could share a
 * worker's port). */
static void test_another_loopback_address(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct agent_peer_sock ps;
    uint16_t port, cport;
    int l = listener(&port), c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s;

    to.sin_port = htons(port);
    ASSERT_OK(bind(c, (struct sockaddr *)&a, sizeof(a)));
    ASSERT_OK(connect(c, (struct sockaddr *)&to, sizeof(to)));
    cport = accept_port(l, &s);
    ASSERT_EQ(agent_peer_sock(cport, port, &ps), -ENOENT);
    close(c);
    close(s);
    close(l);
}

/* A client made by another user (uid 65534, as root): the kernel names that user. */
static void test_another_users_client(void)
{
    struct agent_peer_sock ps;
    uint16_t port, cport;
    int l = listener(&port), go[2], s;
    pid_t pid;
    char b;

    if (geteuid() != 0) {
        printf("# skipped: not root\n");
        close(l);
        return;
    }
    ASSERT_OK(pipe(go));
    pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        int c;

        if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
            _exit(2);
        c = client(port, true);
        (void)!read(go[0], &b, 1); /* until the parent looked */
        close(c);
        _exit(0);
    }
    cport = accept_port(l, &s);
    ASSERT_OK(agent_peer_sock(cport, port, &ps));
    ASSERT_EQ(ps.uid, NOBODY);
    ASSERT_EQ(write(go[1], "x", 1), 1);
    ASSERT_EQ(waitpid(pid, &s, 0), pid);
    ASSERT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0);
    close(go[0]);
    close(go[1]);
    close(l);
}

/* 10,000 lookups: microseconds each, whatever runs on the host (the bound is loose: a loaded
 * CI machine; the scan it replaced took 25-140 ms for one). */
static void test_cost(void)
{
    struct agent_peer_sock ps;
    struct timespec t0, t1;
    uint16_t port, cport;
    int l = listener(&port), c = client(port, false), s;
    double ms;

    cport = accept_port(l, &s);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 10000; i++)
        ASSERT_OK(agent_peer_sock(cport, port, &ps));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("# 10000 lookups: %.1f ms\n", ms);
    ASSERT_TRUE(ms < 5000);
    close(c);
    close(s);
    close(l);
}

/* The agent's check at its first front: its own connection, its own user; and the tests' stand-in
 * for a kernel without sock_diag. */
static void test_probe(void)
{
    struct agent_peer_sock ps;

    ASSERT_OK(agent_peer_probe(&ps));
    ASSERT_EQ(ps.uid, geteuid());
    ASSERT_OK(setenv("RDZV_TEST_NO_SOCK_DIAG", "1", 1));
    ASSERT_EQ(agent_peer_probe(&ps), -EPROTONOSUPPORT);
    ASSERT_OK(unsetenv("RDZV_TEST_NO_SOCK_DIAG"));
}

int main(void)
{
    TEST(test_own_clients);
    TEST(test_another_loopback_address);
    TEST(test_another_users_client);
    TEST(test_cost);
    TEST(test_probe);
    return tap_done();
}
