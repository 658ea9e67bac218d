/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-frame.h: framing of rdzv's own rendezvous messages (see RENDEZVOUS.md). Pure: no I/O. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rdzv_buf;

#define RDZV_FRAME_HDR 8
#define RDZV_PROTO_VERSION 1
#define RDZV_MAX_MSG (1u << 20)

enum rdzv_msg_op {
    RDZV_MSG_HELLO = 0xA0,
    RDZV_MSG_JOIN = 0xA2,
    RDZV_MSG_JOINED = 0xA3,
    RDZV_MSG_ROUND = 0xA4,
    RDZV_MSG_NCCL_REQUEST = 0xA5,
    RDZV_MSG_NCCL_ID = 0xA6,
    RDZV_MSG_HEARTBEAT = 0xA7,
    RDZV_MSG_WORKER_EXIT = 0xA8,
    RDZV_MSG_EVENT = 0xA9,
    RDZV_MSG_LEAVE = 0xAA,
    RDZV_MSG_READY = 0xAB,
    RDZV_MSG_STATUS = 0xB0,       /* rdzvctl -> daemon: {} */
    RDZV_MSG_STATUS_REPLY = 0xB1, /* daemon -> rdzvctl: jobs, nodes, events (RENDEZVOUS.md) */
    RDZV_MSG_AUTH = 0xAC,    /* client -> daemon: the token proof (RENDEZVOUS.md, Authentication) */
    RDZV_MSG_AUTH_OK = 0xAD, /* daemon -> client: accepted, and the daemon's own proof */
    RDZV_MSG_STORE = 0xAE,   /* client -> daemon: the rest of the connection speaks TCPStore */
    RDZV_MSG_ERROR = 0xAF,
    RDZV_MSG_REPLICA = 0xB2,  /* 1.5, both ways: host a replica / where it listens */
    RDZV_MSG_REPLICAS = 0xB3, /* 1.5, daemon -> agent: the replicas' endpoints */
    RDZV_MSG_UNHEALTHY = 0xB4, /* 1.6, agent -> daemon: its node failed a health check */
    RDZV_MSG_RELEASE = 0xB5,       /* 1.6, rdzvctl -> daemon: take a node put aside back */
    RDZV_MSG_RELEASE_REPLY = 0xB6, /* 1.6, daemon -> rdzvctl: how many entries were released */
    RDZV_MSG_CANCEL = 0xB7,        /* 1.6, agent -> daemon: stopped from outside (scancel) */
    RDZV_MSG_CANCEL_JOB = 0xB8,       /* 1.7, rdzvctl (the operator) -> daemon: end a job */
    RDZV_MSG_CANCEL_JOB_REPLY = 0xB9, /* 1.7, daemon -> rdzvctl: cancelled, or why not */
    RDZV_MSG_PREFLIGHT = 0xBA,        /* 1.23, daemon -> agent: measure a link */
    RDZV_MSG_PREFLIGHT_REPORT = 0xBB, /* 1.23, agent -> daemon: a link's figures */
};

/* Name of a message op for logs ("JOIN"), "?" if unknown. */
const char *rdzv_msg_name(uint8_t op);

/* The largest body rdzvd accepts for a frame of op (RENDEZVOUS.md, "Limits per message"): far
 * below RDZV_MAX_MSG for every message a client sends, so that no peer makes the daemon buffer or
 * parse more than the message needs. Ops the daemon only sends get the smallest limit (it refuses
 * them anyway). 0 for an unknown op. One table, in rdzv-frame.c. */
uint32_t rdzv_msg_max_body(uint8_t op);

/* Look at the frame at the start of p[0..n). Returns its total size (header + body) and sets
 * *op, *body, *body_len; 0 when more bytes are needed; -EPROTO (unknown op, bad version, reserved
 * bits set) or -EMSGSIZE (body over max_body) with *why set. Never reads past n. */
ssize_t rdzv_frame_peek(const uint8_t *p, size_t n, uint32_t max_body, uint8_t *op,
                        const uint8_t **body, uint32_t *body_len, const char **why);

/* Append one frame with body[0..len). Returns 0, -EMSGSIZE or -ENOMEM. */
int rdzv_frame_put(struct rdzv_buf *b, uint8_t op, const void *body, size_t len);
