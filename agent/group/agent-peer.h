/* SPDX-License-Identifier: Apache-2.0 */
/* agent-peer.h: who holds the other end of a loopback TCP connection. The node's store front asks
 * it of a connection when it must choose whom to keep: the workers' come first.
 *
 * The kernel is asked for that one socket by its four numbers (sock_diag, NETLINK_SOCK_DIAG,
 * without NLM_F_DUMP): a lookup in its table of established sockets, as a packet's. It answers
 * with the socket's owner (the user that made it) and, on cgroup v2 (Linux 5.8 and later), the
 * cgroup its maker was in when it made it. Neither can be set by the peer afterwards. No table is
 * read, no /proc walked: one message each way, a few microseconds, whatever the number of sockets
 * or processes on the host. TCP has no SO_PEERCRED: the kernel keeps no pid for it.
 *
 * Errors: negative errno (-ENOENT: no such socket, gone already). Threads: any; it never blocks
 * (the kernel answers within the request, and the answer is read without waiting). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* What the kernel says of the client end of a loopback connection. */
struct agent_peer_sock {
    uid_t uid;          /* its owner: the user of the process that made it */
    bool has_cgroup;    /* the kernel said the cgroup (cgroup v2, Linux 5.8 and later) */
    uint64_t cgroup_id; /* the cgroup v2 its maker was in (the cgroup directory's inode) */
};

/* The client end of the connection from 127.0.0.1:client_port to 127.0.0.1:server_port (an IPv4
 * socket, or a dual-stack IPv6 one connected to ::ffff:127.0.0.1, as PyTorch's client is). 0 (*out
 * set) or -errno. */
int agent_peer_sock(uint16_t client_port, uint16_t server_port, struct agent_peer_sock *out);

/* Whether the kernel answers agent_peer_sock here (it may not: no tcp_diag module, gVisor, a
 * seccomp or systemd filter on netlink): one lookup of a loopback connection the caller makes and
 * closes at once. 0 (*out: the caller's own uid and cgroup, as the kernel says them) or -errno.
 * RDZV_TEST_NO_SOCK_DIAG in the environment makes it -EPROTONOSUPPORT (tests). */
int agent_peer_probe(struct agent_peer_sock *out);
