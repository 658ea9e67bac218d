/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg-preflight.c: the network pre-flight's messages (protocol 1.23; "full" 1.24):
 * PREFLIGHT and PREFLIGHT_REPORT <-> C structs (rdzv-msg.h). JOIN's "preflight" is rdzv-msg.c's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg-priv.h"
#include "proto/rdzv-msg.h"

int rdzv_msg_put_preflight(struct rdzv_buf *b, const struct rdzv_preflight *p)
{
    return rdzv_msg_put(b, RDZV_MSG_PREFLIGHT,
                        json_pack("{s:I, s:s, s:I, s:s, s:I, s:b}", "id", (json_int_t)p->id,
                                  "addr", p->addr, "port", (json_int_t)p->port, "token", p->token,
                                  "bound_ms", (json_int_t)p->bound_ms, "full", p->full));
}

int rdzv_msg_parse_preflight(const uint8_t *body, size_t len, struct rdzv_preflight *p, char *err,
                             size_t errlen)
{
    json_int_t id, port, bound;
    const char *addr, *token;
    json_t *root;
    int r, full = 0;

    memset(p, 0, sizeof(*p));
    root = rdzv_msg_unpack(body, len, "PREFLIGHT", err, errlen, "{s:I, s:s, s:I, s:s, s:I, s?b}",
                           "id", &id, "addr", &addr, "port", &port, "token", &token, "bound_ms",
                           &bound, "full", &full);
    if (!root)
        return -EBADMSG;
    r = rdzv_msg_pf_listener_ok("PREFLIGHT", addr, port, token, p->addr, p->token, err, errlen);
    if (r == 0 && (id < 1 || id > RDZV_PF_ID_MAX || bound < 1 || bound > RDZV_PF_BOUND_MAX_MS)) {
        snprintf(err, errlen, "PREFLIGHT: 'id' must be 1..%lld and 'bound_ms' 1..%d",
                 RDZV_PF_ID_MAX, RDZV_PF_BOUND_MAX_MS);
        r = -EBADMSG;
    }
    p->id = id;
    p->port = port;
    p->bound_ms = bound;
    p->full = full != 0;
    json_decref(root);
    return r;
}

int rdzv_msg_put_preflight_report(struct rdzv_buf *b, const struct rdzv_preflight_report *r)
{
    return rdzv_msg_put(b, RDZV_MSG_PREFLIGHT_REPORT,
                        json_pack("{s:I, s:f, s:f}", "id", (json_int_t)r->id, "up", r->up,
                                  "down", r->down));
}

static bool figure_ok(double v)
{
    return v == -1 || (v >= 0 && v <= RDZV_PF_MBPS_MAX);
}

int rdzv_msg_parse_preflight_report(const uint8_t *body, size_t len,
                                    struct rdzv_preflight_report *r, char *err, size_t errlen)
{
    json_t *root;
    json_int_t id;
    double up, down;
    int rc = 0;

    memset(r, 0, sizeof(*r));
    root = rdzv_msg_unpack(body, len, "PREFLIGHT_REPORT", err, errlen, "{s:I, s:F, s:F}", "id",
                           &id, "up", &up, "down", &down);
    if (!root)
        return -EBADMSG;
    if (id < 1 || id > RDZV_PF_ID_MAX || !figure_ok(up) || !figure_ok(down)) {
        snprintf(err, errlen,
                 "PREFLIGHT_REPORT: 'id' must be 1..%lld, 'up' and 'down' -1 or 0..%g MB/s",
                 RDZV_PF_ID_MAX, RDZV_PF_MBPS_MAX);
        rc = -EBADMSG;
    }
    *r = (struct rdzv_preflight_report){id, up, down};
    json_decref(root);
    return rc;
}
