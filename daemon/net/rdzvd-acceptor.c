/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acceptor.c: accept(2) for the listeners on a thread of its own (rdzvd-acceptor.h). */
#include "daemon/net/rdzvd-acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/rdzv-list.h"

/* Listeners are watched one-shot: re-armed after each batch, left disarmed while the queue is
 * full (the loop's take or remove wakes the thread, which re-arms them all). */
#define WATCH (EPOLLIN | EPOLLONESHOT)
/* Bounds on the work of one call, so that a flood cannot keep the mutex (the loop waits for it
 * in take) or the loop's thread (remove) busy for its length: connections dropped at EMFILE per
 * batch, connections ended when a listener is removed (more are reset by its close, as they
 * would be without the thread), reads of what a queued connection sent before it is closed. */
#define DROPS_PER_BATCH 64
#define DRAIN_AT_REMOVE 1024
#define READS_AT_CLOSE 8

static uint64_t now_ms(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void wake(struct rdzvd_acceptor *a)
{
    uint64_t one = 1;

    while (write(a->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

/* Under mu: the slot of listening socket fd, or -1. */
static int listener_slot(const struct rdzvd_acceptor *a, int fd)
{
    for (unsigned i = 0; i < a->nlisteners; i++)
        if (a->listeners[i].fd == fd)
            return (int)i;
    return -1;
}

/* Close a descriptor the loop never took. What its peer sent is read first: a socket closed with
 * unread bytes sends a reset, and a client that connected just before rdzvd stopped (PyTorch
 * 1.13's callback connection) takes a reset for an error, where an orderly end is what it gets
 * from a connection the loop had taken. */
static void close_queued(int fd)
{
    char buf[512];

    for (int i = 0; i < READS_AT_CLOSE && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; i++)
        ;
    (void)close(fd);
}

static void rearm(struct rdzvd_acceptor *a, int fd)
{
    struct epoll_event ev = {.events = WATCH, .data.fd = fd};

    (void)epoll_ctl(a->epfd, EPOLL_CTL_MOD, fd, &ev);
}

/* Watch every listener again while the queue has room. a->mu held. */
static void rearm_all(struct rdzvd_acceptor *a)
{
    for (unsigned k = 0; k < a->nlisteners && a->n < RDZVD_ACCEPT_QUEUE; k++)
        rearm(a, a->listeners[k].fd);
}

/* At EMFILE: take the pending connection on the spare descriptor and close it, so that the
 * listener does not stay readable with nothing the thread can do (libuv does the same).
 * Returns 1 (one dropped), 0 (none pending: accept4() says EMFILE before it looks) or -1 (no
 * spare: it could not be opened again). */
static int drop_one(struct rdzvd_acceptor *a, int fd)
{
    int c;

    if (a->spare_fd < 0)
        a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a->spare_fd < 0)
        return -1;
    (void)close(a->spare_fd);
    c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
        (void)close(c);
        a->dropped++;
    }
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return c >= 0 ? 1 : 0;
}

/* Accept what fd has pending, while the queue has room. The mutex is held across each
 * accept4(), so that rdzvd_acceptor_remove() never returns while fd is in use here. */
static void accept_from(struct rdzvd_acceptor *a, int fd)
{
    bool wake_loop = false, full = false;
    int one = 1, drops = 0;

    (void)pthread_mutex_lock(&a->mu);
    for (;;) {
        struct rdzvd_accepted *e;
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int slot = listener_slot(a, fd), c;

        if (a->stopping || slot < 0)
            break;
        if (a->n == RDZVD_ACCEPT_QUEUE) {
            full = true;
            break;
        }
        c = accept4(fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                int d = drops < DROPS_PER_BATCH ? drop_one(a, fd) : 0;

                if (d > 0) {
                    drops++;
                    wake_loop = true; /* the loop logs the drops */
                    continue;
                }
                if (d < 0) { /* parked until the retry (acceptor_main) */
                    a->emfile_since_ms = now_ms();
                    a->emfile = true;
                    full = true;
                }
            }
            break; /* EAGAIN: nothing pending; anything else: the next wake-up tries again */
        }
        (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        e = &a->queue[(a->head + a->n) % RDZVD_ACCEPT_QUEUE];
        e->fd = c;
        e->key = a->listeners[slot].key;
        memset(&e->addr, 0, sizeof(e->addr));
        memcpy(&e->addr, &ss, len < sizeof(ss) ? len : sizeof(ss));
        a->n++;
        a->accepted++;
        wake_loop = true;
    }
    if (!full && !a->stopping && listener_slot(a, fd) >= 0)
        rearm(a, fd);
    (void)pthread_mutex_unlock(&a->mu);
    if (wake_loop)
        (void)uv_async_send(&a->async);
}

static void *acceptor_main(void *arg)
{
    struct rdzvd_acceptor *a = arg;
    struct epoll_event evs[16];

    for (;;) {
        int n, timeout;
        bool stop;

        (void)pthread_mutex_lock(&a->mu);
        timeout = a->emfile ? RDZVD_ACCEPT_EMFILE_RETRY_MS : -1;
        (void)pthread_mutex_unlock(&a->mu);
        n = epoll_wait(a->epfd, evs, 16, timeout);
        if (n < 0 && errno != EINTR)
            break;
        /* Out of descriptors without a spare: the parked listeners are watched again once the
         * retry is due, whatever else woke the thread meanwhile. */
        (void)pthread_mutex_lock(&a->mu);
        if (a->emfile && now_ms() - a->emfile_since_ms >= RDZVD_ACCEPT_EMFILE_RETRY_MS) {
            a->emfile = false;
            rearm_all(a);
        }
        (void)pthread_mutex_unlock(&a->mu);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd != a->wake_fd) {
                accept_from(a, evs[i].data.fd);
                continue;
            }
            uint64_t v;

            (void)!read(a->wake_fd, &v, sizeof(v));
            /* Room again (or a listener gone): watch every listener again. */
            (void)pthread_mutex_lock(&a->mu);
            rearm_all(a);
            (void)pthread_mutex_unlock(&a->mu);
        }
        (void)pthread_mutex_lock(&a->mu);
        stop = a->stopping;
        (void)pthread_mutex_unlock(&a->mu);
        if (stop)
            break;
    }
    return NULL;
}

static void async_cb(uv_async_t *h)
{
    struct rdzvd_acceptor *a = rdzv_container_of(h, struct rdzvd_acceptor, async);

    a->ready(a);
}

int rdzvd_acceptor_start(struct rdzvd_acceptor *a, uv_loop_t *loop,
                         void (*ready)(struct rdzvd_acceptor *a))
{
    struct epoll_event ev = {.events = EPOLLIN};
    sigset_t all, old;
    int r;

    memset(a, 0, sizeof(*a));
    a->ready = ready;
    (void)pthread_mutex_init(&a->mu, NULL);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a->epfd < 0 || a->wake_fd < 0 || a->spare_fd < 0) {
        r = -errno;
        goto out_close;
    }
    ev.data.fd = a->wake_fd;
    if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->wake_fd, &ev) < 0) {
        r = -errno;
        goto out_close;
    }
    r = uv_async_init(loop, &a->async, async_cb);
    if (r < 0)
        goto out_close;
    a->async_open = true; /* closed by rdzvd_acceptor_stop(), started or not */
    /* The thread takes no signal: the loop's thread handles them. */
    sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    r = -pthread_create(&a->thread, NULL, acceptor_main, a);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0)
        goto out_close;
    a->started = true;
    return 0;

out_close:
    if (a->epfd >= 0)
        (void)close(a->epfd);
    if (a->wake_fd >= 0)
        (void)close(a->wake_fd);
    if (a->spare_fd >= 0)
        (void)close(a->spare_fd);
    a->epfd = a->wake_fd = a->spare_fd = -1;
    return r;
}

int rdzvd_acceptor_add(struct rdzvd_acceptor *a, int fd, void *key)
{
    struct epoll_event ev = {.events = WATCH, .data.fd = fd};
    int r = 0;

    (void)pthread_mutex_lock(&a->mu);
    if (a->stopping || !a->started)
        r = -ESHUTDOWN;
    else if (a->nlisteners == RDZVD_ACCEPT_LISTENERS)
        r = -ENOSPC;
    else if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        r = -errno;
    else {
        a->listeners[a->nlisteners].fd = fd;
        a->listeners[a->nlisteners].key = key;
        a->nlisteners++;
    }
    (void)pthread_mutex_unlock(&a->mu);
    return r;
}

void rdzvd_acceptor_remove(struct rdzvd_acceptor *a, int fd)
{
    unsigned kept = 0, drained = 0;
    bool running;
    void *key;
    int slot;

    (void)pthread_mutex_lock(&a->mu);
    slot = listener_slot(a, fd);
    if (slot < 0) {
        (void)pthread_mutex_unlock(&a->mu);
        return;
    }
    key = a->listeners[slot].key;
    a->listeners[slot] = a->listeners[--a->nlisteners];
    running = a->started;
    if (running)
        (void)epoll_ctl(a->epfd, EPOLL_CTL_DEL, fd, NULL);
    /* Its queued descriptors go with it; the others keep their order. */
    for (unsigned i = 0; i < a->n; i++) {
        struct rdzvd_accepted *e = &a->queue[(a->head + i) % RDZVD_ACCEPT_QUEUE];

        if (e->key == key)
            close_queued(e->fd);
        else
            a->queue[(a->head + kept++) % RDZVD_ACCEPT_QUEUE] = *e;
    }
    a->n = kept;
    (void)pthread_mutex_unlock(&a->mu);
    /* Room again, maybe: the listeners parked while the queue was full are watched again. */
    if (running)
        wake(a);
    /* And those still in the kernel's backlog: closing the listening socket would reset them,
     * where a loop that accepts on its own thread would have taken them and ended them in
     * order (a client that connected just before rdzvd stopped sees the same either way). */
    for (int c; drained < DRAIN_AT_REMOVE &&
                (c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;
         drained++)
        close_queued(c);
}

size_t rdzvd_acceptor_take(struct rdzvd_acceptor *a, struct rdzvd_accepted *out, size_t max)
{
    bool was_full, left;
    size_t n = 0;

    if (!a->started)
        return 0;
    (void)pthread_mutex_lock(&a->mu);
    was_full = a->n == RDZVD_ACCEPT_QUEUE;
    while (n < max && a->n > 0) {
        out[n++] = a->queue[a->head];
        a->head = (a->head + 1) % RDZVD_ACCEPT_QUEUE;
        a->n--;
    }
    left = a->n > 0;
    (void)pthread_mutex_unlock(&a->mu);
    if (was_full && n > 0)
        wake(a);
    if (left) /* the rest on the next turn, after the loop's other events */
        (void)uv_async_send(&a->async);
    return n;
}

uint64_t rdzvd_acceptor_dropped(struct rdzvd_acceptor *a)
{
    uint64_t n;

    if (!a->started)
        return 0;
    (void)pthread_mutex_lock(&a->mu);
    n = a->dropped;
    (void)pthread_mutex_unlock(&a->mu);
    return n;
}

unsigned rdzvd_acceptor_queued(const struct rdzvd_acceptor *a)
{
    pthread_mutex_t *mu = (pthread_mutex_t *)&a->mu; /* a read: the count, not the acceptor */
    unsigned n;

    if (!a->started)
        return 0;
    (void)pthread_mutex_lock(mu);
    n = a->n;
    (void)pthread_mutex_unlock(mu);
    return n;
}

bool rdzvd_acceptor_stop(struct rdzvd_acceptor *a, uv_close_cb cb)
{
    if (!a->async_open)
        return false;
    if (a->started) {
        (void)pthread_mutex_lock(&a->mu);
        a->stopping = true;
        (void)pthread_mutex_unlock(&a->mu);
        wake(a);
        (void)pthread_join(a->thread, NULL);
        (void)pthread_mutex_lock(&a->mu);
        a->started = false;
        while (a->n > 0) {
            close_queued(a->queue[a->head].fd);
            a->head = (a->head + 1) % RDZVD_ACCEPT_QUEUE;
            a->n--;
        }
        (void)pthread_mutex_unlock(&a->mu);
        (void)close(a->epfd);
        (void)close(a->wake_fd);
        if (a->spare_fd >= 0)
            (void)close(a->spare_fd);
        a->epfd = a->wake_fd = a->spare_fd = -1;
    }
    /* The mutex stays: a listener still registered is removed (its backlog ended) later. */
    a->async_open = false;
    uv_close((uv_handle_t *)&a->async, cb);
    return true;
}
