/* SPDX-License-Identifier: Apache-2.0 */
/* agent-peer.c: the client end of a loopback connection, from the kernel (agent-peer.h). */
#include "agent/group/agent-peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef INET_DIAG_CGROUP_ID
#define INET_DIAG_CGROUP_ID 21 /* Linux 5.8's uapi; older headers lack it */
#endif
#define TCP_STATE_TIME_WAIT 6 /* the kernel's TCP_TIME_WAIT (include/net/tcp_states.h) */

/* The answer's attributes: the cgroup, when the kernel gives it. */
static void read_attrs(const struct inet_diag_msg *m, size_t len, struct agent_peer_sock *out)
{
    const struct rtattr *a = (const struct rtattr *)(m + 1);
    size_t left = len > sizeof(*m) ? len - sizeof(*m) : 0;

    for (; RTA_OK(a, left); a = RTA_NEXT(a, left)) {
        if (a->rta_type == INET_DIAG_CGROUP_ID && RTA_PAYLOAD(a) >= sizeof(uint64_t)) {
            memcpy(&out->cgroup_id, RTA_DATA(a), sizeof(uint64_t));
            out->has_cgroup = true;
        }
    }
}

int agent_peer_sock(uint16_t client_port, uint16_t server_port, struct agent_peer_sock *out)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } q = {.nlh = {.nlmsg_len = sizeof(q),
                   .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                   .nlmsg_flags = NLM_F_REQUEST},
           .req = {.sdiag_family = AF_INET,
                   .sdiag_protocol = IPPROTO_TCP,
                   .idiag_states = ~0u,
                   .id = {.idiag_sport = htons(client_port),
                          .idiag_dport = htons(server_port),
                          .idiag_src = {htonl(INADDR_LOOPBACK)},
                          .idiag_dst = {htonl(INADDR_LOOPBACK)},
                          .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}}};
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    union {
        struct nlmsghdr h;
        char b[1024];
    } ans;
    const struct nlmsghdr *h = &ans.h;
    const struct inet_diag_msg *m;
    ssize_t n;
    int fd, r = -EIO;

    fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -errno;
    if (sendto(fd, &q, sizeof(q), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        r = -errno;
        goto out_close;
    }
    /* The kernel answered within sendto: nothing to wait for (-EAGAIN if it did not). */
    n = recv(fd, &ans, sizeof(ans), MSG_DONTWAIT);
    if (n < 0) {
        r = -errno;
        goto out_close;
    }
    if (!NLMSG_OK(h, (size_t)n))
        goto out_close;
    if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(h);

        r = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0 ? e->error : -EIO;
        goto out_close;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        goto out_close;
    m = NLMSG_DATA(h);
    /* A closed end the kernel keeps in TIME_WAIT has no owner left (it says uid 0): gone. */
    if (m->idiag_state == TCP_STATE_TIME_WAIT || m->idiag_inode == 0) {
        r = -ENOENT;
        goto out_close;
    }
    *out = (struct agent_peer_sock){.uid = m->idiag_uid};
    read_attrs(m, h->nlmsg_len - NLMSG_LENGTH(0), out);
    r = 0;
out_close:
    close(fd);
    return r;
}

int agent_peer_probe(struct agent_peer_sock *out)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    uint16_t server_port;
    int l, c = -1, r;

    if (getenv("RDZV_TEST_NO_SOCK_DIAG")) /* the tests' stand-in for a kernel without it */
        return -EPROTONOSUPPORT;
    l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        return -errno;
    if (bind(l, (struct sockaddr *)&a, n) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &n) < 0)
        goto out_errno;
    server_port = ntohs(a.sin_port);
    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* on loopback, the handshake is done within connect: no wait */
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
        goto out_errno;
    n = sizeof(a);
    if (getsockname(c, (struct sockaddr *)&a, &n) < 0)
        goto out_errno;
    r = agent_peer_sock(ntohs(a.sin_port), server_port, out);
    goto out_close;
out_errno:
    r = -errno;
out_close:
    if (c >= 0)
        close(c);
    close(l);
    return r;
}
