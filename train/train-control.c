/* SPDX-License-Identifier: Apache-2.0 */
/* train-control.c: the control channel's watcher thread (train-control.h). */
#include "train-control.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../proto/rdzv-worker.h"

#define CONTROL_LINE_MAX RDZV_WORKER_LINE_MAX /* the agent never writes longer lines */

struct train_control {
    int fd;
    int cancel_fd; /* eventfd: readable while a generation newer than the last one taken by
                    * train_control_wait() has come (written and drained under mu) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rdzv_worker_gen latest; /* under mu */
    bool closed;             /* under mu: EOF or a read error */
    struct train_comm *comm; /* under mu */
    char line[CONTROL_LINE_MAX + 1];
    size_t len;
};

static void control_line(struct train_control *c)
{
    struct rdzv_worker_gen g;
    int r;

    c->line[c->len] = '\0';
    r = rdzv_worker_gen_parse(c->line, &g);
    if (r < 0)
        fprintf(stderr, "rdzv-train: ignoring a malformed control line: %.200s\n", c->line);
    if (r <= 0)
        return;
    pthread_mutex_lock(&c->mu);
    if (g.generation > c->latest.generation) {
        uint64_t one = 1;

        c->latest = g;
        pthread_cond_broadcast(&c->cv);
        /* A store being waited on for an older generation is abandoned now. */
        (void)!write(c->cancel_fd, &one, sizeof(one));
        /* A step blocked on a dead peer must return (NCCL would wait forever). */
        if (c->comm && c->comm->interrupt)
            c->comm->interrupt(c->comm);
    }
    pthread_mutex_unlock(&c->mu);
}

static void *control_main(void *arg)
{
    struct train_control *c = arg;
    char buf[CONTROL_LINE_MAX];

    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof(buf));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                control_line(c);
                c->len = 0;
            } else if (c->len < CONTROL_LINE_MAX) {
                c->line[c->len++] = buf[i];
            }
        }
    }
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int train_control_start(int fd, uint64_t generation, struct train_control **ret)
{
    struct train_control *c = calloc(1, sizeof(*c));
    pthread_condattr_t ca;
    int r;

    if (!c)
        return -ENOMEM;
    c->fd = fd;
    c->latest.generation = generation;
    c->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->cancel_fd < 0) {
        r = -errno;
        free(c);
        return r;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    r = pthread_create(&c->thread, NULL, control_main, c);
    if (r != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        close(c->cancel_fd);
        free(c);
        return -r;
    }
    *ret = c;
    return 0;
}

void train_control_set_comm(struct train_control *c, struct train_comm *comm)
{
    pthread_mutex_lock(&c->mu);
    c->comm = comm;
    pthread_mutex_unlock(&c->mu);
}

bool train_control_pending(struct train_control *c, uint64_t after)
{
    bool p;

    pthread_mutex_lock(&c->mu);
    p = c->latest.generation > after;
    pthread_mutex_unlock(&c->mu);
    return p;
}

int train_control_wait(struct train_control *c, uint64_t after, uint64_t timeout_ms,
                       struct rdzv_worker_gen *g)
{
    struct timespec dl;
    int r = 0;

    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += (time_t)(timeout_ms / 1000);
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (c->latest.generation <= after && !c->closed && r == 0)
        r = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    if (c->latest.generation > after) {
        uint64_t n;

        *g = c->latest;
        r = 0;
        /* The newest is taken: the store of *g is not to be abandoned (until a newer one). */
        (void)!read(c->cancel_fd, &n, sizeof(n));
    } else {
        r = c->closed ? -EPIPE : -ETIMEDOUT;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

void train_control_free(struct train_control *c)
{
    if (!c)
        return;
    pthread_cancel(c->thread); /* blocked in read(2), a cancellation point */
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    close(c->cancel_fd);
    free(c);
}

int train_control_cancel_fd(const struct train_control *c)
{
    return c ? c->cancel_fd : -1;
}
