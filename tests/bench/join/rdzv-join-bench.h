/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-join-bench.h: what rdzv-join-bench's files share: its limits, a simulated agent's
 * connection, the run's state and figures, and the calls of rdzv-join-bench-report.c (rdzvd's
 * memory, the ROUNDs' check, the report). */
#pragma once
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-buf.h"

#define MAX_EVENTS 1024
#define CONNECT_INFLIGHT 256 /* connects in flight: well under the listen backlog */
#define CONNECT_ATTEMPTS 5
#define READS_PER_EVENT 4 /* don't drain one connection forever */
#define READ_CHUNK 65536
#define FD_SPARE 32 /* epoll, stdio, /proc reads */
#define NS_PER_S 1e9
#define MAX_AGENTS 1000000

enum conn_state {
    CS_NEW,        /* no socket yet */
    CS_CONNECTING, /* non-blocking connect in progress */
    CS_HELLO,      /* HELLO sent: the daemon's HELLO is due */
    CS_READY,      /* HELLO exchanged; JOIN not sent yet */
    CS_JOIN,       /* JOIN sent (maybe partly): JOINED is due */
    CS_JOINED,     /* JOINED received: ROUND is due */
    CS_DONE,       /* ROUND received */
    CS_RESTART,    /* --lose: EVENT restart received, READY sent: the next ROUND is due */
    CS_AGAIN,      /* --lose: the next ROUND received, or this one was lost */
    _CS_MAX,
};

struct conn {
    int fd;
    uint8_t state;
    uint8_t attempts;
    bool tx_join;      /* tx is this connection's JOIN */
    const uint8_t *tx; /* the frame being written, txoff bytes of it done */
    uint32_t txlen, txoff;
    uint32_t join_off, join_len; /* this connection's JOIN frame in bench->joins */
    struct rdzv_buf in;          /* bytes of an incomplete frame */
    uint8_t *round;              /* ROUND body, parsed once every ROUND is in */
    uint32_t round_len;
};

struct rss {
    long before, connected, joined, round, peak; /* kB; -1: not measured */
};

struct bench {
    struct sockaddr_in addr;
    const char *endpoint;
    uint32_t n;
    int pid;
    bool json;
    double timeout_s;

    int epfd;
    struct conn *conns;
    struct rdzv_buf hello; /* the HELLO frame every connection sends */
    struct rdzv_buf joins; /* every connection's JOIN frame, back to back */
    char run_id[64];
    uint8_t *scratch;

    uint32_t next_new, inflight;
    uint32_t *retry; /* connections whose connect failed, to try again */
    uint32_t nretry;
    uint32_t nconnected, nhello, njoin_written, njoined, nround;
    uint64_t retries;
    uint32_t target; /* what run_until waits for: n, then n - lose */
    uint32_t lose;   /* --lose: agents that drop their connections once the round is in */
    uint32_t nevent, nround2;
    uint64_t t_lost, t_first_event, t_last_event, t_last_round2, generation2;
    struct rdzv_buf ready; /* READY for the generation that restarts */

    uint64_t t_start, t_connected, t_hello, t_first_join, t_last_join, t_joined, t_first_round,
        t_last_round, deadline;
    struct rss rss;
    int64_t master_port;
    char error[512];
};

static inline double secs(uint64_t from_ns, uint64_t to_ns)
{
    return to_ns >= from_ns ? (double)(to_ns - from_ns) / NS_PER_S : 0.0;
}

/* Record the first error (printf-style) and return -err. */
int bench_fail(struct bench *b, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rdzv-join-bench-report.c. bench_sample_rss: rdzvd's VmRSS (and its peak) now, when --pid was
 * given; bench_verify_rounds: node ranks 0..n-1 once each, one world size, one master port. */
int bench_sample_rss(struct bench *b, long *ret, long *ret_hwm, const char *when);
int bench_verify_rounds(struct bench *b);
void bench_report_json(const struct bench *b, bool ok);
void bench_report_text(const struct bench *b);
