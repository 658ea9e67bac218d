/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-bench.h: what rdzv-bench's files share: its limits, a connection, the run's state, and
 * the calls of its options (rdzv-bench-opts.c) and of its server-process readings
 * (rdzv-bench-proc.c). */
#pragma once
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-proto.h"

#define PREFIX_MAX 40
#define KEY_MAX 56
#define IN_CAP 64
#define OUT_CAP 192
#define MAX_EVENTS 1024
#define CONNECT_BATCH 128
#define BACKOFF_MIN_NS 1000000ull  /* first retry after ~1 ms */
#define BACKOFF_MAX_NS 256000000ull /* never wait more than ~256 ms between tries */
#define NS_PER_S 1000000000ull
#define MAX_IDLE_PIDS 32
#define MAX_WINDOWS 4096

enum mode { MODE_THROUGHPUT, MODE_BARRIER, MODE_MEMORY };
/* throughput's requests: ADD and GET in turn (default), only GETs, only ADDs (writes). */
enum tp_op { OP_ADDGET, OP_GET, OP_ADD };

enum conn_state {
    CS_NEW,        /* no socket yet */
    CS_BACKOFF,    /* a connect failed; try again at due_ns */
    CS_CONNECTING, /* non-blocking connect in progress */
    CS_PING,       /* connected (modern): VALIDATE and PING sent, the PING's echo is due */
    CS_SILENT,     /* connected; its first request waits until due_ns (--silence) */
    CS_IDLE,       /* connected, nothing in flight */
    CS_ADD,        /* ADD sent: an i64 reply is due */
    CS_GET,        /* GET sent: u64 length + bytes are due */
    CS_WAIT,       /* WAIT sent: one byte is due */
    CS_DONE,       /* finished its part; kept open */
    CS_LOST,       /* reset, closed by the server, or sent a bad reply */
};

struct conn {
    int fd;
    uint8_t state;
    uint8_t attempts;
    uint8_t inlen;  /* reply bytes at in[0..inlen) */
    uint8_t outlen; /* request bytes a short send left at out[0..outlen) */
    uint8_t klen;
    uint64_t due_ns;
    char key[KEY_MAX]; /* throughput: this connection's own key */
    uint8_t in[IN_CAP];
    uint8_t out[OUT_CAP];
};

struct bench {
    enum mode mode;
    enum tp_op op;
    enum rdzv_dialect dialect; /* --dialect: the numbering every request is encoded in */
    struct sockaddr_in addr;
    int epfd;
    struct conn *conns;
    uint32_t n;       /* this process's connections */
    uint32_t total;   /* the barrier's ranks, over every process (--procs) */
    uint32_t first;   /* the rank of conns[0] */
    uint32_t procs;   /* barrier: processes the ranks are spread over (--procs; 1: this one) */
    int server_pid;
    int idle_pids[MAX_IDLE_PIDS + 1]; /* + the --pid one */
    size_t nidle_pids;
    double duration_s, warmup_s, window_s, timeout_s, settle_s;
    uint32_t hosts;             /* barrier: 0, or ranks from 127.0.0.2 .. 127.0.0.(hosts + 1) */
    uint16_t *node_ports;       /* barrier --fronts: node i's front listens on node_ports[i] */
    uint32_t nnodes, per_node;  /* --fronts' nodes; rank r is node r / per_node's */
    double stagger_s;           /* barrier: host h starts at h * stagger_s; 0: interleaved */
    double silence_s;           /* barrier: a rank's pause between its connect and its ADD */
    struct rdzv_buf enc; /* scratch for the request encoders */
    char prefix[PREFIX_MAX + 1];
    char cnt_key[KEY_MAX], go_key[KEY_MAX], idle_key[KEY_MAX];
    size_t cnt_len, go_len, idle_len;

    uint32_t nconnected; /* opened: connected, and for modern the PING answered */
    uint32_t ndone, nlost, nbackoff, nsilent;
    uint32_t nwaiting; /* barrier: connections in CS_WAIT */
    bool go_sent;      /* barrier: the SET of the go key was sent */
    uint64_t retries; /* connect attempts that failed and were tried again */
    uint64_t replies; /* counted replies (throughput) */
    bool counting;
    uint64_t t_last_ns;   /* last completion (barrier: last STOP_WAITING) */
    uint64_t t_opened_ns; /* the last connection opened (modern: its PING answered) */
    uint64_t t_go_ns;     /* barrier: the go key's SET was sent */
    uint64_t next_due_ns; /* earliest CS_BACKOFF or CS_SILENT due time, UINT64_MAX if none */
    uint64_t rng;
    int first_lost_err;
    const char *first_lost_what;
    bool overshoot; /* barrier counter went past N: the namespace was not fresh */
};

static inline uint64_t secs_to_ns(double s)
{
    return s <= 0 ? 0 : (uint64_t)(s * (double)NS_PER_S);
}

static inline void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_S), .tv_nsec = (long)(ns % NS_PER_S)};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Options (rdzv-bench-opts.c). bench_parse_args returns 0, 1 after --help, or a negative errno
 * (message printed). */
void bench_usage(FILE *f);
int bench_parse_args(int argc, char **argv, struct bench *b);
/* Raise the open-file limit to its hard limit; -EMFILE (message printed) if need does not fit. */
int bench_raise_nofile(uint32_t need);
/* The run's key names (a fresh prefix unless --prefix gave one). */
int bench_setup(struct bench *b);

/* Where connection i (of this process) connects: its node's front (--fronts), else the server.
 * Returns b->addr or dst, filled. */
const struct sockaddr_in *bench_dest(const struct bench *b, uint32_t i, struct sockaddr_in *dst);

/* The server process (rdzv-bench-proc.c): its CPU time (every thread's schedstat run time when
 * *ret_precise, else utime + stime), its VmRSS, and a wait until each of pids is idle. */
int bench_proc_cpu_ns(int pid, uint64_t *ret, bool *ret_precise);
int bench_proc_rss_kb(int pid, uint64_t *ret);
void bench_wait_idle(const int *pids, size_t n);
