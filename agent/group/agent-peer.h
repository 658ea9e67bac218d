/* SPDX-License-Identifier: Apache-2.0 */
/* agent-peer.h: which process holds the other end of a loopback TCP connection. The node's store
 * front asks it of a connection when it must choose whom to keep: the workers' come first.
 *
 * The socket is found in /proc/net/tcp (or tcp6, v4-mapped: PyTorch's client is dual-stack) by
 * its two ports (127.0.0.1 at both ends), then among the open files of the processes in the
 * given process groups (each worker leads one: setsid at its start, and what it forks stays in
 * it). Cost: one read of each table, one of each process's stat, and the file descriptors of the
 * processes in those groups only.
 * Errors: none reported; a connection that cannot be traced (gone, or /proc unreadable) is not
 * the groups'. Threads: any. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether the connection from 127.0.0.1:client_port to 127.0.0.1:server_port is held, at its
 * client end, by a process in one of the n process groups pgids. */
bool agent_peer_in_pgroups(uint16_t client_port, uint16_t server_port, const pid_t *pgids,
                           size_t n);
