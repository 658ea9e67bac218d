/* SPDX-License-Identifier: Apache-2.0 */
/* cluster-wire.h: each message of the cluster simulator crosses the wire as rdzvd and the agent
 * write and read it: encoded into its frame by proto's encoder (rdzv_msg_put_*), the frame read
 * back (rdzv_frame_peek) and decoded (rdzv_msg_parse_*) into what the other side's machine
 * takes. A frame that does not decode is a violation (C6). Part of cluster.h. */
#pragma once
#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"

static void cs_bad(int inv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The body of the one frame in b: op and its bytes, or false (said as C6). */
static bool cs_frame(const struct rdzv_buf *b, uint8_t want, const uint8_t **body, uint32_t *len)
{
    const char *why = NULL;
    uint8_t op;
    ssize_t n = rdzv_frame_peek(b->data, b->len, rdzv_msg_max_body(want), &op, body, len, &why);

    if (n != (ssize_t)b->len || op != want) {
        cs_bad(6, "%s: its frame does not read back (%s)", rdzv_msg_name(want),
               why ? why : "another size or op");
        return false;
    }
    return true;
}

/* A message whose struct proto encodes and decodes as it is: m->u.field, op's frame. */
#define CS_WIRE(kind, op_, name, field)                                                          \
    case kind:                                                                                   \
        op = op_;                                                                                \
        r = rdzv_msg_put_##name(&b, &m->u.field);                                                \
        if (!r && cs_frame(&b, op, &body, &len))                                                 \
            r = rdzv_msg_parse_##name(body, len, &m->u.field, err, sizeof(err));                 \
        break

/* m, encoded and decoded again in place: what its receiver gets. */
static void cs_wire(struct cs_msg *m)
{
    static struct rdzv_heartbeat hb;
    struct rdzv_buf b = {0};
    const uint8_t *body;
    uint32_t len;
    char err[256] = "";
    int r = 0;
    uint8_t op;

    switch (m->kind) {
        CS_WIRE(M_JOIN, RDZV_MSG_JOIN, join, join);
    case M_HB:
    case M_HB_REPLY:
        op = RDZV_MSG_HEARTBEAT;
        memset(&hb, 0, offsetof(struct rdzv_heartbeat, progress));
        hb.generation = m->u.hb.gen;
        hb.n_progress = m->u.hb.n;
        memcpy(hb.progress, m->u.hb.p, m->u.hb.n * sizeof(hb.progress[0]));
        r = rdzv_msg_put_heartbeat(&b, &hb);
        if (!r && cs_frame(&b, op, &body, &len))
            r = rdzv_msg_parse_heartbeat(body, len, &hb, err, sizeof(err));
        if (!r) {
            m->u.hb.gen = hb.generation;
            m->u.hb.n = hb.n_progress < CS_NPROC ? hb.n_progress : CS_NPROC;
            memcpy(m->u.hb.p, hb.progress, m->u.hb.n * sizeof(hb.progress[0]));
        }
        break;
        CS_WIRE(M_NCCL_ID, RDZV_MSG_NCCL_ID, nccl_id, nccl_id);
        CS_WIRE(M_WEXIT, RDZV_MSG_WORKER_EXIT, worker_exit, wexit);
        CS_WIRE(M_LEAVE, RDZV_MSG_LEAVE, leave, leave);
        CS_WIRE(M_READY, RDZV_MSG_READY, ready, ready);
        CS_WIRE(M_CANCEL, RDZV_MSG_CANCEL, cancel, cancel);
        CS_WIRE(M_UNHEALTHY, RDZV_MSG_UNHEALTHY, unhealthy, unhealthy);
    case M_JOINED: {
        struct rdzv_joined j = {.spare = m->u.joined.spare, .resumed = m->u.joined.resumed,
                                .incarnation = m->u.joined.incarnation};

        op = RDZV_MSG_JOINED;
        snprintf(j.run_id, sizeof(j.run_id), "job");
        snprintf(j.recovery, sizeof(j.recovery), "%s", W->c.inplace ? "inplace" : "restart");
        memcpy(j.secret, m->u.joined.secret, sizeof(j.secret));
        r = rdzv_msg_put_joined(&b, &j);
        if (!r && cs_frame(&b, op, &body, &len))
            r = rdzv_msg_parse_joined(body, len, &j, err, sizeof(err));
        if (!r) {
            m->u.joined.spare = j.spare;
            m->u.joined.resumed = j.resumed;
            m->u.joined.incarnation = j.incarnation;
            memcpy(m->u.joined.secret, j.secret, sizeof(j.secret));
        }
        break;
    }
        CS_WIRE(M_ROUND, RDZV_MSG_ROUND, round, round);
        CS_WIRE(M_EVENT, RDZV_MSG_EVENT, event, event);
        CS_WIRE(M_NCCL_REQ, RDZV_MSG_NCCL_REQUEST, nccl_request, nreq);
    case M_ERROR: {
        struct rdzv_error e;

        op = RDZV_MSG_ERROR;
        r = rdzv_msg_put_error(&b, "%s", m->u.error);
        if (!r && cs_frame(&b, op, &body, &len))
            r = rdzv_msg_parse_error(body, len, &e, err, sizeof(err));
        if (!r)
            memcpy(m->u.error, e.error, sizeof(m->u.error));
        break;
    }
    default:
        return;
    }
    if (r < 0)
        cs_bad(6, "%s does not cross the wire: %s", rdzv_msg_name(op),
               err[0] ? err : "not encoded");
    rdzv_buf_free(&b);
}
