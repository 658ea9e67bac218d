/* SPDX-License-Identifier: Apache-2.0 */
/* train-alive.c: the "wait" lines of a blocked training thread (train-alive.h). */
#include "train-alive.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../proto/rdzv-worker.h"

struct train_alive {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool blocked, quit;
    uint64_t span;       /* counts blocks: a new span restarts the period */
    int fd;
    uint64_t every_ms;
    char line[8]; /* "wait\n" (proto/rdzv-worker.h) */
    size_t len;
};

static void deadline_after(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *alive_main(void *arg)
{
    struct train_alive *a = arg;

    pthread_mutex_lock(&a->lock);
    while (!a->quit) {
        struct timespec ts;
        uint64_t span;

        if (!a->blocked) {
            pthread_cond_wait(&a->cond, &a->lock);
            continue;
        }
        span = a->span;
        deadline_after(&ts, a->every_ms);
        while (!a->quit && a->blocked && a->span == span &&
               pthread_cond_timedwait(&a->cond, &a->lock, &ts) != ETIMEDOUT)
            ;
        if (a->quit || !a->blocked || a->span != span)
            continue;
        /* The span lasted a whole period: alive, blocked on the peers. One write (atomic on
         * the pipe, interleaving whole with the training thread's "step" lines); a failure
         * is the training thread's to see on its next report. */
        pthread_mutex_unlock(&a->lock);
        (void)!write(a->fd, a->line, a->len);
        pthread_mutex_lock(&a->lock);
        if (a->blocked && a->span == span)
            a->span++; /* the next period starts now */
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int train_alive_new(int fd, uint64_t every_ms, struct train_alive **ret)
{
    struct train_alive *a = calloc(1, sizeof(*a));
    pthread_condattr_t ca;
    int r;

    if (!a)
        return -ENOMEM;
    a->fd = fd;
    a->every_ms = every_ms ? every_ms : 1;
    a->len = (size_t)rdzv_progress_format(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_WAIT},
                                          a->line, sizeof(a->line));
    pthread_mutex_init(&a->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    r = pthread_create(&a->thread, NULL, alive_main, a);
    if (r != 0) {
        pthread_cond_destroy(&a->cond);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return -r;
    }
    *ret = a;
    return 0;
}

void train_alive_block(struct train_alive *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->blocked = true;
    a->span++;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

void train_alive_unblock(struct train_alive *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->blocked = false;
    pthread_mutex_unlock(&a->lock);
}

void train_alive_free(struct train_alive *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->quit = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
