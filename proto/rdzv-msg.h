/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg.h: rendezvous message bodies (JSON through jansson) <-> C structs. No I/O, no logging.
 * Parsers return 0 or -EBADMSG with a one-line reason in err[0..errlen). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rdzv_buf;

#define RDZV_ID_MAX 128       /* run_id, node_id */
#define RDZV_HOST_MAX 255
#define RDZV_NCCL_ID_BYTES 128
#define RDZV_NCCL_HEX_LEN (2 * RDZV_NCCL_ID_BYTES)
#define RDZV_MAX_NCCL_IDS 64  /* one root per 128 ranks: 8192 ranks */
#define RDZV_SUMMARY_MAX 1023
#define RDZV_HEARTBEAT_TIMEOUT_MS 5000 /* default: silence after which a node counts as lost */
#define RDZV_JOIN_TIMEOUT_MS 600000    /* default: wait for replacements below min (torchrun's) */

enum rdzv_nccl_mode { RDZV_NCCL_OFF, RDZV_NCCL_AUTO, RDZV_NCCL_REQUIRED };

/* What a reconnecting agent says about the generation its workers are running (JOIN "resume"):
 * lets a restarted daemon rebuild the job, and a daemon that moved on tell the agent to stop. */
struct rdzv_resume {
    uint64_t generation; /* 0: none (a fresh join) */
    int64_t node_rank, nnodes, rank_offset, world_size;
    int64_t restart_count;
    int64_t master_port;
    bool left;           /* its workers all exited 0 and it had sent LEAVE */
};

struct rdzv_join {
    char run_id[RDZV_ID_MAX + 1];
    char node_id[RDZV_ID_MAX + 1];
    char host[RDZV_HOST_MAX + 1];
    int64_t nproc;
    int64_t node_rank; /* -1: none asked for */
    int64_t min, max;
    int64_t last_call_ms;
    int64_t max_restarts;
    enum rdzv_nccl_mode nccl;
    int64_t nccl_ids;
    bool rank_hint;               /* node_rank came from the scheduler: a preference, not a demand */
    int64_t heartbeat_timeout_ms; /* job-wide, from the first JOIN */
    int64_t join_timeout_ms;      /* how long survivors below min wait for a replacement */
    bool scale_up_now;            /* a node joining a running job below max restarts it at once */
    struct rdzv_resume resume;
};

struct rdzv_round {
    uint64_t generation;
    int64_t node_rank, nnodes;
    int64_t rank_offset, world_size;
    char master_addr[RDZV_HOST_MAX + 1];
    int64_t master_port;
    int64_t restart_count, max_restarts;
    unsigned n_ids;
    char ids[RDZV_MAX_NCCL_IDS][RDZV_NCCL_HEX_LEN + 1]; /* last: parsing leaves ids[n_ids..] as
                                                         * they were */
};

struct rdzv_worker_exit {
    uint64_t generation;
    int64_t rank, local_rank;
    int64_t exit_code; /* 128+N for signal N */
    int64_t signal;
    double time;       /* unix seconds */
    char host[RDZV_HOST_MAX + 1];
};

struct rdzv_event {
    char type[16]; /* "failed", "succeeded": the job ended; "restart": stop the workers of
                    * generation, send READY, a new round follows */
    uint64_t generation;
    int64_t exit_code;
    char summary[RDZV_SUMMARY_MAX + 1];
};

const char *rdzv_nccl_mode_name(enum rdzv_nccl_mode m);
int rdzv_nccl_mode_parse(const char *s, enum rdzv_nccl_mode *ret);

/* Append a frame of op whose body is obj serialised. Steals obj (NULL -> -ENOMEM). */
int rdzv_msg_put(struct rdzv_buf *b, uint8_t op, json_t *obj);
int rdzv_msg_put_hello(struct rdzv_buf *b, const char *peer);
int rdzv_msg_put_join(struct rdzv_buf *b, const struct rdzv_join *j);
int rdzv_msg_put_round(struct rdzv_buf *b, const struct rdzv_round *r);
/* The JSON body of a WORKER_EXIT (new reference, NULL on -ENOMEM). */
json_t *rdzv_msg_worker_exit_obj(const struct rdzv_worker_exit *w);
int rdzv_msg_put_event(struct rdzv_buf *b, const struct rdzv_event *e);
int rdzv_msg_put_error(struct rdzv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse a body into a JSON object (duplicates rejected). NULL with err set on failure. */
json_t *rdzv_msg_load(const uint8_t *body, size_t len, char *err, size_t errlen);
int rdzv_msg_parse_hello(const uint8_t *body, size_t len, char *err, size_t errlen);
int rdzv_msg_parse_join(const uint8_t *body, size_t len, struct rdzv_join *j, char *err,
                        size_t errlen);
int rdzv_msg_parse_round(const uint8_t *body, size_t len, struct rdzv_round *r, char *err,
                         size_t errlen);
int rdzv_msg_parse_worker_exit(const uint8_t *body, size_t len, struct rdzv_worker_exit *w,
                               char *err, size_t errlen);
int rdzv_msg_parse_event(const uint8_t *body, size_t len, struct rdzv_event *e, char *err,
                         size_t errlen);

/* True if s is exactly RDZV_NCCL_HEX_LEN lowercase hex characters. */
bool rdzv_nccl_hex_valid(const char *s);
