/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg-replica.c: REPLICA and REPLICAS (protocol 1.5: hosted replicas of rdzvd) <-> C
 * structs (rdzv-msg.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg-priv.h"
#include "proto/rdzv-msg.h"

int rdzv_msg_put_replica(struct rdzv_buf *b, const struct rdzv_replica *r)
{
    json_t *o = json_pack("{s:I}", "id", (json_int_t)r->id);

    if (o && r->port > 0 &&
        (json_object_set_new(o, "port", json_integer(r->port)) < 0 ||
         json_object_set_new(o, "replicas", json_integer(r->replicas)) < 0)) {
        json_decref(o);
        o = NULL;
    }
    if (r->endpoint[0])
        o = rdzv_json_set(o, "endpoint", json_string(r->endpoint));
    if (r->failed)
        o = rdzv_json_set(o, "error", json_string(r->error));
    return rdzv_msg_put(b, RDZV_MSG_REPLICA, o);
}

/* What an agent may connect to: HOST:PORT or [V6]:PORT, a port of 1..65535, printable ASCII
 * without spaces or commas (an endpoint goes into comma-separated lists). */
static bool endpoint_valid(const char *s)
{
    char host[RDZV_ENDPOINT_MAX + 1];
    uint16_t port = 0;

    for (const char *c = s; *c; c++)
        if (*c <= 0x20 || *c > 0x7e || *c == ',')
            return false;
    return rdzv_parse_hostport(s, host, sizeof(host), &port) == 0 && port >= 1;
}

int rdzv_msg_parse_replica(const uint8_t *body, size_t len, struct rdzv_replica *r, char *err,
                           size_t errlen)
{
    json_int_t id, port = 0, replicas = 0;
    const char *endpoint = "", *error = NULL;
    json_t *root = rdzv_msg_unpack(body, len, "REPLICA", err, errlen, "{s:I, s?I, s?I, s?s, s?s}",
                                   "id", &id, "port", &port, "replicas", &replicas, "endpoint",
                                   &endpoint, "error", &error);
    int rc = -EBADMSG;

    if (!root)
        return -EBADMSG;
    memset(r, 0, sizeof(*r));
    if (id < 1 || id > RDZV_REPLICA_ID_MAX) {
        snprintf(err, errlen, "REPLICA: 'id' must be 1..%d", RDZV_REPLICA_ID_MAX);
        goto out;
    }
    if (port < 0 || port > RDZV_REPLICA_PORT_MAX) {
        snprintf(err, errlen, "REPLICA: 'port' must be 1..65534");
        goto out;
    }
    if (replicas < 0 || replicas > RDZV_REPLICAS_LIST_MAX || (port && !replicas)) {
        snprintf(err, errlen, "REPLICA: 'replicas' must be 1..%d with 'port'",
                 RDZV_REPLICAS_LIST_MAX);
        goto out;
    }
    if (*endpoint && (strlen(endpoint) > RDZV_ENDPOINT_MAX || !endpoint_valid(endpoint))) {
        snprintf(err, errlen, "REPLICA: 'endpoint' must be HOST:PORT (at most %d bytes)",
                 RDZV_ENDPOINT_MAX);
        goto out;
    }
    if (!port && !*endpoint && !error) {
        snprintf(err, errlen, "REPLICA: one of 'port', 'endpoint' and 'error' is needed");
        goto out;
    }
    r->id = id;
    r->port = port;
    r->replicas = replicas;
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
    if (error) {
        r->failed = true;
        snprintf(r->error, sizeof(r->error), "%s", error);
        rdzv_utf8_trim(r->error);
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int rdzv_msg_put_replicas(struct rdzv_buf *b, const struct rdzv_replicas *r)
{
    json_t *arr = json_array(), *o;

    for (unsigned i = 0; arr && i < r->n; i++)
        if (json_array_append_new(arr, json_string(r->endpoint[i])) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    o = arr ? json_pack("{s:o}", "endpoints", arr) : NULL;
    return rdzv_msg_put(b, RDZV_MSG_REPLICAS, o);
}

int rdzv_msg_parse_replicas(const uint8_t *body, size_t len, struct rdzv_replicas *r, char *err,
                            size_t errlen)
{
    json_t *arr, *root = rdzv_msg_unpack(body, len, "REPLICAS", err, errlen, "{s:o}", "endpoints",
                                         &arr);
    size_t i, n;
    int rc = -EBADMSG;

    if (!root)
        return -EBADMSG;
    memset(r, 0, sizeof(*r));
    n = json_is_array(arr) ? json_array_size(arr) : 0;
    if (n < 1 || n > RDZV_REPLICAS_LIST_MAX) {
        snprintf(err, errlen, "REPLICAS: 'endpoints' must be an array of 1..%d strings",
                 RDZV_REPLICAS_LIST_MAX);
        goto out;
    }
    for (i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));

        if (!s || strlen(s) > RDZV_ENDPOINT_MAX || !endpoint_valid(s)) {
            snprintf(err, errlen, "REPLICAS: endpoint %zu must be HOST:PORT (at most %d bytes)",
                     i, RDZV_ENDPOINT_MAX);
            goto out;
        }
        snprintf(r->endpoint[i], sizeof(r->endpoint[i]), "%s", s);
    }
    r->n = (unsigned)n;
    rc = 0;
out:
    json_decref(root);
    return rc;
}
