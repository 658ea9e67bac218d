/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-frame.c: rendezvous frame header encode/peek. */
#include "proto/rdzv-frame.h"

#include <errno.h>

#include "common/rdzv-buf.h"

const char *rdzv_msg_name(uint8_t op)
{
    switch (op) {
    case RDZV_MSG_HELLO:
        return "HELLO";
    case RDZV_MSG_JOIN:
        return "JOIN";
    case RDZV_MSG_JOINED:
        return "JOINED";
    case RDZV_MSG_ROUND:
        return "ROUND";
    case RDZV_MSG_NCCL_REQUEST:
        return "NCCL_REQUEST";
    case RDZV_MSG_NCCL_ID:
        return "NCCL_ID";
    case RDZV_MSG_HEARTBEAT:
        return "HEARTBEAT";
    case RDZV_MSG_WORKER_EXIT:
        return "WORKER_EXIT";
    case RDZV_MSG_EVENT:
        return "EVENT";
    case RDZV_MSG_LEAVE:
        return "LEAVE";
    case RDZV_MSG_READY:
        return "READY";
    case RDZV_MSG_STATUS:
        return "STATUS";
    case RDZV_MSG_STATUS_REPLY:
        return "STATUS_REPLY";
    case RDZV_MSG_AUTH:
        return "AUTH";
    case RDZV_MSG_AUTH_OK:
        return "AUTH_OK";
    case RDZV_MSG_STORE:
        return "STORE";
    case RDZV_MSG_ERROR:
        return "ERROR";
    case RDZV_MSG_REPLICA:
        return "REPLICA";
    case RDZV_MSG_REPLICAS:
        return "REPLICAS";
    case RDZV_MSG_UNHEALTHY:
        return "UNHEALTHY";
    case RDZV_MSG_RELEASE:
        return "RELEASE";
    case RDZV_MSG_RELEASE_REPLY:
        return "RELEASE_REPLY";
    case RDZV_MSG_CANCEL:
        return "CANCEL";
    case RDZV_MSG_CANCEL_JOB:
        return "CANCEL_JOB";
    case RDZV_MSG_CANCEL_JOB_REPLY:
        return "CANCEL_JOB_REPLY";
    case RDZV_MSG_PREFLIGHT:
        return "PREFLIGHT";
    case RDZV_MSG_PREFLIGHT_REPORT:
        return "PREFLIGHT_REPORT";
    default:
        return "?";
    }
}

/* Bodies are JSON: a string member may be escaped to 6 bytes per byte (\u00XX), and unknown
 * members are ignored (newer peers add some), hence the slack over the longest valid message. */
#define SMALL (4u << 10)
static const struct {
    uint8_t op;
    uint32_t max;
} msg_limits[] = {
    {RDZV_MSG_HELLO, SMALL},         /* magic, version, peer name */
    {RDZV_MSG_AUTH, SMALL},          /* two 64-hex-digit strings */
    {RDZV_MSG_STORE, SMALL},         /* {} */
    {RDZV_MSG_STATUS, SMALL},        /* {} */
    {RDZV_MSG_READY, SMALL},         /* generation */
    {RDZV_MSG_LEAVE, SMALL},         /* generation, status */
    {RDZV_MSG_UNHEALTHY, SMALL},     /* reason (255 bytes) */
    {RDZV_MSG_RELEASE, SMALL},       /* run id, node (128 and 255 bytes) */
    {RDZV_MSG_CANCEL, SMALL},        /* signal, reason (255 bytes) */
    {RDZV_MSG_CANCEL_JOB, SMALL},    /* run id, reason (128 and 255 bytes) */
    {RDZV_MSG_PREFLIGHT_REPORT, SMALL}, /* id, two figures */
    {RDZV_MSG_REPLICA, SMALL},       /* id, endpoint or error (511 bytes) */
    {RDZV_MSG_WORKER_EXIT, 8u << 10},/* host and reason (255 bytes each) */
    {RDZV_MSG_JOIN, 16u << 10},      /* run id, node id, host, numbers, resume */
    {RDZV_MSG_NCCL_ID, 32u << 10},   /* up to 64 ids of 256 hex digits */
    {RDZV_MSG_HEARTBEAT, 128u << 10},/* up to 1024 progress entries of about 70 bytes */
};

uint32_t rdzv_msg_max_body(uint8_t op)
{
    for (size_t i = 0; i < sizeof(msg_limits) / sizeof(msg_limits[0]); i++)
        if (msg_limits[i].op == op)
            return msg_limits[i].max;
    return rdzv_msg_name(op)[0] == '?' ? 0 : SMALL;
}

ssize_t rdzv_frame_peek(const uint8_t *p, size_t n, uint32_t max_body, uint8_t *op,
                        const uint8_t **body, uint32_t *body_len, const char **why)
{
    uint32_t len;

    if (n >= 1 && rdzv_msg_name(p[0])[0] == '?') {
        *why = "unknown message type";
        return -EPROTO;
    }
    if (n >= 2 && p[1] != RDZV_PROTO_VERSION) {
        *why = "unsupported protocol version";
        return -EPROTO;
    }
    if (n >= 4 && (p[2] | p[3]) != 0) {
        *why = "reserved header bits set";
        return -EPROTO;
    }
    if (n < RDZV_FRAME_HDR)
        return 0;
    len = rdzv_get_u32(p + 4);
    if (len > max_body) {
        *why = "message too large";
        return -EMSGSIZE;
    }
    if (n - RDZV_FRAME_HDR < len)
        return 0;
    *op = p[0];
    *body = p + RDZV_FRAME_HDR;
    *body_len = len;
    return (ssize_t)(RDZV_FRAME_HDR + len);
}

int rdzv_frame_put(struct rdzv_buf *b, uint8_t op, const void *body, size_t len)
{
    uint8_t hdr[RDZV_FRAME_HDR] = {op, RDZV_PROTO_VERSION, 0, 0};
    int r;

    if (len > RDZV_MAX_MSG)
        return -EMSGSIZE;
    rdzv_set_u32(hdr + 4, (uint32_t)len);
    r = rdzv_buf_reserve(b, sizeof(hdr) + len);
    if (r < 0)
        return r;
    (void)rdzv_buf_put(b, hdr, sizeof(hdr));
    return rdzv_buf_put(b, body, len);
}
