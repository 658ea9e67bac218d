/* SPDX-License-Identifier: Apache-2.0 */
/* agent-peer.c: the process at the other end of a loopback connection (agent-peer.h). */
#include "agent/group/agent-peer.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The inode of the socket 127.0.0.1:local -> 127.0.0.1:remote in /proc/net/tcp, or in tcp6 as
 * a v4-mapped address (a dual-stack client, as PyTorch's is); 0 if none. */
static unsigned long socket_inode(uint16_t local, uint16_t remote)
{
    static const char *const files[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
    static const char *const lo[2] = {"0100007F", "0000000000000000FFFF00000100007F"};
    char line[512], want_l[48], want_r[48], l[64], r[64];
    unsigned long inode = 0, ino;

    for (int k = 0; k < 2 && !inode; k++) {
        FILE *f = fopen(files[k], "re");

        if (!f)
            continue;
        snprintf(want_l, sizeof(want_l), "%s:%04X", lo[k], local);
        snprintf(want_r, sizeof(want_r), "%s:%04X", lo[k], remote);
        while (!inode && fgets(line, sizeof(line), f)) {
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, "%*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", l, r, &ino) == 3 &&
                !strcmp(l, want_l) && !strcmp(r, want_r))
                inode = ino;
        }
        fclose(f);
    }
    return inode;
}

/* The process group of pid (/proc/PID/stat's fifth field, after the command's parenthesis),
 * or -1. */
static pid_t pgroup_of(const char *pid)
{
    char path[64], buf[1024], *close_paren;
    int fd, pgrp = -1;
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (!(close_paren = strrchr(buf, ')')) || sscanf(close_paren + 1, " %*c %*d %d", &pgrp) != 1)
        return -1;
    return pgrp;
}

/* Whether pid has the socket of inode open. */
static bool holds_socket(const char *pid, unsigned long inode)
{
    char path[64], link[64], want[40];
    struct dirent *e;
    bool found = false;
    DIR *d;

    snprintf(path, sizeof(path), "/proc/%s/fd", pid);
    if (!(d = opendir(path)))
        return false;
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    while (!found && (e = readdir(d))) {
        char fdpath[384];
        ssize_t n;

        if (e->d_name[0] == '.')
            continue;
        snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
        n = readlink(fdpath, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = '\0';
            found = !strcmp(link, want);
        }
    }
    closedir(d);
    return found;
}

bool agent_peer_in_pgroups(uint16_t client_port, uint16_t server_port, const pid_t *pgids,
                           size_t n)
{
    unsigned long inode = n ? socket_inode(client_port, server_port) : 0;
    struct dirent *e;
    bool found = false;
    DIR *d;

    if (!inode || !(d = opendir("/proc")))
        return false;
    while (!found && (e = readdir(d))) {
        pid_t pg;

        if (e->d_name[0] < '1' || e->d_name[0] > '9' || (pg = pgroup_of(e->d_name)) <= 0)
            continue;
        for (size_t i = 0; i < n && !found; i++)
            found = pg == pgids[i] && holds_socket(e->d_name, inode);
    }
    closedir(d);
    return found;
}
