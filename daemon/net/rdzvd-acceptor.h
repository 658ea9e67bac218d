/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-acceptor.h: accept(2) for the listeners on a thread of its own (--accept-thread).
 *
 * At a barrier of 16,000 ranks the loop's thread spends about a fifth of its time in accept4(),
 * setsockopt() and getpeername() (docs/BENCHMARKS.md). With an acceptor, one thread waits on
 * every registered listener, accepts what is pending (TCP_NODELAY set, the peer's address kept)
 * and queues the descriptors; the loop's thread takes them, at most RDZVD_TURN_ACCEPTS a turn,
 * and makes connections of them as it does of libuv's. Nothing else runs on the thread: it
 * touches no libuv handle but the async one, no connection, no store, and logs nothing.
 *
 * Bounds: at most RDZVD_ACCEPT_QUEUE descriptors wait in the queue (then the thread stops
 * accepting and the kernel's backlog holds the rest, as with libuv's listener behind the pace);
 * the server counts them against --max-conns (rdzvd_acceptor_queued). At EMFILE the
 * thread accepts the pending connection on a spare descriptor and closes it (libuv's own
 * answer), counted in dropped; should the spare be lost to a race, it parks the listeners and
 * tries again RDZVD_ACCEPT_EMFILE_RETRY_MS later.
 *
 * Use, all on the loop's thread: rdzvd_acceptor_start() once; rdzvd_acceptor_add() for each
 * listening socket (the key comes back with its descriptors); rdzvd_acceptor_remove() before
 * that socket is closed (its queued descriptors are closed with it); rdzvd_acceptor_take() from
 * the ready callback; rdzvd_acceptor_stop() at the end. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#define RDZVD_ACCEPT_QUEUE 64u   /* descriptors accepted and not yet taken, at most */
#define RDZVD_ACCEPT_LISTENERS 64u /* listening sockets registered at once, at most */
/* Out of descriptors with no spare to drop a connection on (it could not be opened again):
 * the listeners are watched again this long after. The only timed wait of the thread. */
#define RDZVD_ACCEPT_EMFILE_RETRY_MS 100

struct rdzvd_accepted {
    int fd;
    void *key; /* the listener's, from rdzvd_acceptor_add() */
    struct sockaddr_storage addr;
};

struct rdzvd_acceptor {
    uv_async_t async; /* the thread -> the loop: descriptors wait; async.data is the owner's */
    void (*ready)(struct rdzvd_acceptor *a); /* on the loop's thread */
    pthread_t thread;
    int epfd;    /* the thread's: the listeners and wake_fd */
    int wake_fd; /* eventfd: room again, a listener removed, or stop */
    int spare_fd; /* for EMFILE: closed, the connection accepted on it and closed, reopened */
    bool started;    /* the thread runs */
    bool async_open; /* async is initialised and not closed (rdzvd_acceptor_stop closes it) */

    pthread_mutex_t mu; /* guards all below */
    bool stopping;
    bool emfile; /* out of descriptors, no spare: listeners parked until the retry */
    uint64_t emfile_since_ms;
    unsigned head, n;
    struct rdzvd_accepted queue[RDZVD_ACCEPT_QUEUE];
    unsigned nlisteners;
    struct {
        int fd;
        void *key;
    } listeners[RDZVD_ACCEPT_LISTENERS];
    uint64_t accepted, dropped; /* since start */
};

/* Start the thread. ready is called on loop's thread when descriptors wait. Returns 0 or a
 * negative errno: no thread runs, but the async handle may be open (async_open): the owner
 * closes it with rdzvd_acceptor_stop() as it would a running acceptor. */
int rdzvd_acceptor_start(struct rdzvd_acceptor *a, uv_loop_t *loop,
                         void (*ready)(struct rdzvd_acceptor *a));
/* Accept on listening socket fd (non-blocking) from now on; its descriptors carry key.
 * Returns 0, -ENOSPC (RDZVD_ACCEPT_LISTENERS registered) or a negative errno. */
int rdzvd_acceptor_add(struct rdzvd_acceptor *a, int fd, void *key);
/* Stop accepting on fd and close its queued descriptors, and those still pending on fd (each
 * ended in order, not reset; at most 1024 of them). When this returns the thread no longer
 * touches fd: the caller may close it. Also after rdzvd_acceptor_stop(). Unknown fd: nothing. */
void rdzvd_acceptor_remove(struct rdzvd_acceptor *a, int fd);
/* Take up to max queued descriptors into out, oldest first. Returns how many. When some are
 * left, ready comes again on the next turn of the loop. */
size_t rdzvd_acceptor_take(struct rdzvd_acceptor *a, struct rdzvd_accepted *out, size_t max);
/* Descriptors dropped at EMFILE since start (a count the thread keeps). */
uint64_t rdzvd_acceptor_dropped(struct rdzvd_acceptor *a);
/* Descriptors queued now (0 when no thread runs): they count against --max-conns. */
unsigned rdzvd_acceptor_queued(const struct rdzvd_acceptor *a);
/* Stop and join the thread, close every queued descriptor and the async handle (cb gets it).
 * Listening sockets still registered are left to their owners (rdzvd_acceptor_remove() still
 * ends their backlogs). Returns whether a handle is closing (false: nothing was open). */
bool rdzvd_acceptor_stop(struct rdzvd_acceptor *a, uv_close_cb cb);
