/* SPDX-License-Identifier: Apache-2.0 */
/* comm-single.c: the collective of a one-process job, and the routing-address helper. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "train-comm.h"

static int single_broadcast(struct train_comm *c, void *buf, size_t n, unsigned root)
{
    return 0;
}

static int single_allreduce(struct train_comm *c, float *buf, size_t n)
{
    return 0;
}

static int single_nop(struct train_comm *c)
{
    return 0;
}

static int single_poll(void *c)
{
    return 0;
}

static void single_abort(struct train_comm *c)
{
}

static void single_destroy(struct train_comm *c)
{
    free(c);
}

int train_comm_single_new(struct train_comm **ret)
{
    struct train_comm *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    *c = (struct train_comm){
        .name = "single",
        .rank = 0,
        .world = 1,
        .broadcast = single_broadcast,
        .allreduce_mean = single_allreduce,
        .wait = single_nop,
        .poll = single_poll,
        .barrier = single_nop,
        .abort = single_abort,
        .destroy = single_destroy,
    };
    *ret = c;
    return 0;
}

int train_local_addr_for(const char *host, uint16_t port, char *buf, size_t len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_family = AF_UNSPEC};
    struct addrinfo *res;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char portstr[8];
    int fd, r = 0;

    snprintf(portstr, sizeof(portstr), "%u", port ? port : 9);
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return -EHOSTUNREACH;
    fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        r = -errno;
        goto out_free;
    }
    /* Connecting a UDP socket sends nothing; it only picks the route and the source address. */
    if (connect(fd, res->ai_addr, res->ai_addrlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        r = -errno;
        goto out_close;
    }
    if (getnameinfo((struct sockaddr *)&ss, sl, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST) != 0)
        r = -EINVAL;
out_close:
    close(fd);
out_free:
    freeaddrinfo(res);
    return r;
}
