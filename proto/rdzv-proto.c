/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-proto.c: opcode tables for each TCPStore dialect. */
#include "proto/rdzv-proto.h"

#include <errno.h>
#include <string.h>

#define NONE 0xff

/* wire byte -> op, per dialect (proto/TCPSTORE.md section 2). */
static const uint8_t wire_to_op[_RDZV_DIALECT_MAX][20] = {
    [RDZV_DIALECT_V20] = {RDZV_OP_SET, RDZV_OP_COMPARE_SET, RDZV_OP_GET, RDZV_OP_ADD,
                          RDZV_OP_CHECK, RDZV_OP_WAIT, RDZV_OP_GETNUMKEYS, RDZV_OP_WATCH_KEY,
                          RDZV_OP_DELETE_KEY, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE,
                          NONE, NONE, NONE},
    [RDZV_DIALECT_V21] = {RDZV_OP_SET, RDZV_OP_COMPARE_SET, RDZV_OP_GET, RDZV_OP_ADD,
                          RDZV_OP_CHECK, RDZV_OP_WAIT, RDZV_OP_GETNUMKEYS, RDZV_OP_DELETE_KEY,
                          RDZV_OP_APPEND, RDZV_OP_MULTI_GET, RDZV_OP_MULTI_SET,
                          RDZV_OP_CANCEL_WAIT, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE},
    [RDZV_DIALECT_MODERN] = {RDZV_OP_VALIDATE, RDZV_OP_SET, RDZV_OP_COMPARE_SET, RDZV_OP_GET,
                             RDZV_OP_ADD, RDZV_OP_CHECK, RDZV_OP_WAIT, RDZV_OP_GETNUMKEYS,
                             RDZV_OP_DELETE_KEY, RDZV_OP_APPEND, RDZV_OP_MULTI_GET,
                             RDZV_OP_MULTI_SET, RDZV_OP_CANCEL_WAIT, RDZV_OP_PING,
                             RDZV_OP_QUEUE_PUSH, RDZV_OP_QUEUE_POP, RDZV_OP_QUEUE_LEN,
                             RDZV_OP_LIST, NONE, NONE},
    [RDZV_DIALECT_FRONT] = {RDZV_OP_VALIDATE, RDZV_OP_SET, RDZV_OP_COMPARE_SET, RDZV_OP_GET,
                            RDZV_OP_ADD, RDZV_OP_CHECK, NONE, RDZV_OP_GETNUMKEYS,
                            RDZV_OP_DELETE_KEY, RDZV_OP_APPEND, RDZV_OP_MULTI_GET,
                            RDZV_OP_MULTI_SET, NONE, RDZV_OP_PING, RDZV_OP_QUEUE_PUSH,
                            RDZV_OP_QUEUE_POP, RDZV_OP_QUEUE_LEN, RDZV_OP_LIST,
                            RDZV_OP_TAG_WAIT, RDZV_OP_TAG_CANCEL},
};

static const char *const op_names[_RDZV_OP_MAX] = {
    [RDZV_OP_VALIDATE] = "VALIDATE",     [RDZV_OP_SET] = "SET",
    [RDZV_OP_COMPARE_SET] = "COMPARE_SET", [RDZV_OP_GET] = "GET",
    [RDZV_OP_ADD] = "ADD",               [RDZV_OP_CHECK] = "CHECK",
    [RDZV_OP_WAIT] = "WAIT",             [RDZV_OP_GETNUMKEYS] = "GETNUMKEYS",
    [RDZV_OP_DELETE_KEY] = "DELETE_KEY", [RDZV_OP_APPEND] = "APPEND",
    [RDZV_OP_MULTI_GET] = "MULTI_GET",   [RDZV_OP_MULTI_SET] = "MULTI_SET",
    [RDZV_OP_CANCEL_WAIT] = "CANCEL_WAIT", [RDZV_OP_PING] = "PING",
    [RDZV_OP_QUEUE_PUSH] = "QUEUE_PUSH", [RDZV_OP_QUEUE_POP] = "QUEUE_POP",
    [RDZV_OP_QUEUE_LEN] = "QUEUE_LEN",   [RDZV_OP_LIST] = "LIST",
    [RDZV_OP_WATCH_KEY] = "WATCH_KEY", [RDZV_OP_TAG_WAIT] = "TAG_WAIT",
    [RDZV_OP_TAG_CANCEL] = "TAG_CANCEL",
};

static const char *const dialect_names[_RDZV_DIALECT_MAX] = {
    [RDZV_DIALECT_V20] = "2.0",
    [RDZV_DIALECT_V21] = "2.1",
    [RDZV_DIALECT_MODERN] = "modern",
    [RDZV_DIALECT_FRONT] = "front",
};

const char *rdzv_op_name(enum rdzv_op op)
{
    return (unsigned)op < _RDZV_OP_MAX ? op_names[op] : "?";
}

const char *rdzv_dialect_name(enum rdzv_dialect d)
{
    return (unsigned)d < _RDZV_DIALECT_MAX ? dialect_names[d] : "?";
}

bool rdzv_op_has_reply(enum rdzv_op op)
{
    switch (op) {
    case RDZV_OP_VALIDATE:
    case RDZV_OP_SET:
    case RDZV_OP_APPEND:
    case RDZV_OP_MULTI_SET:
    case RDZV_OP_QUEUE_PUSH:
    case RDZV_OP_TAG_WAIT:
    case RDZV_OP_TAG_CANCEL:
        return false;
    default:
        return true;
    }
}

int rdzv_dialect_parse(const char *s, enum rdzv_dialect *ret)
{
    for (int d = 0; d < RDZV_DIALECT_FRONT; d++)
        if (strcmp(s, dialect_names[d]) == 0) {
            *ret = (enum rdzv_dialect)d;
            return 0;
        }
    if (strcmp(s, "1.13") == 0 || strcmp(s, "1.x") == 0) {
        *ret = RDZV_DIALECT_V20;
        return 0;
    }
    return -EINVAL;
}

int rdzv_op_from_wire(enum rdzv_dialect d, uint8_t byte)
{
    if ((unsigned)d >= _RDZV_DIALECT_MAX || byte >= sizeof(wire_to_op[0]))
        return -EPROTO;
    return wire_to_op[d][byte] == NONE ? -EPROTO : wire_to_op[d][byte];
}

int rdzv_op_to_wire(enum rdzv_dialect d, enum rdzv_op op)
{
    if ((unsigned)d >= _RDZV_DIALECT_MAX)
        return -EPROTO;
    for (unsigned b = 0; b < sizeof(wire_to_op[0]); b++)
        if (wire_to_op[d][b] == op)
            return (int)b;
    return -EPROTO;
}
