/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-proto.h: the wire vocabulary shared by rdzvd, rdzvctl and the agent: TCPStore operations,
 * their byte values in each PyTorch dialect, reply codes, and every size limit (in one place). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

/* TCPStore's VALIDATE magic (PyTorch >= 2.2), little-endian on the wire: CE F7 85 3C. */
#define RDZV_VALIDATE_MAGIC 0x3C85F7CEu
/* A VALIDATE with this magic opens rdzvd's store-front numbering (RDZV_DIALECT_FRONT): a node's
 * store front (agent/front/) speaking for its workers on one connection. On the wire: 72 64 7A 46
 * ("rdzF"); PyTorch's server refuses it as a wrong magic. */
#define RDZV_FRONT_MAGIC 0x467A6472u

/* Default port: torchrun's c10d rendezvous default. */
#define RDZV_DEFAULT_PORT 29400

/* The operations, independent of their byte value on the wire. */
enum rdzv_op {
    RDZV_OP_VALIDATE,
    RDZV_OP_SET,
    RDZV_OP_COMPARE_SET,
    RDZV_OP_GET,
    RDZV_OP_ADD,
    RDZV_OP_CHECK,
    RDZV_OP_WAIT,
    RDZV_OP_GETNUMKEYS,
    RDZV_OP_DELETE_KEY,
    RDZV_OP_APPEND,
    RDZV_OP_MULTI_GET,
    RDZV_OP_MULTI_SET,
    RDZV_OP_CANCEL_WAIT,
    RDZV_OP_PING,
    RDZV_OP_QUEUE_PUSH,
    RDZV_OP_QUEUE_POP,
    RDZV_OP_QUEUE_LEN,
    RDZV_OP_LIST,
    RDZV_OP_WATCH_KEY, /* PyTorch <= 2.0 only */
    RDZV_OP_TAG_WAIT,   /* the front numbering only: a WAIT named by a tag, answered out of turn */
    RDZV_OP_TAG_CANCEL, /* the front numbering only: drop the waits of one tag */
    _RDZV_OP_MAX,
};

/* Which numbering a connection speaks (proto/TCPSTORE.md section 2). */
enum rdzv_dialect {
    RDZV_DIALECT_V20,    /* PyTorch 1.x and 2.0: SET=0 .. WATCH_KEY=7, DELETE_KEY=8 */
    RDZV_DIALECT_V21,    /* PyTorch 2.1: DELETE_KEY=7 .. CANCEL_WAIT=11 */
    RDZV_DIALECT_MODERN, /* PyTorch >= 2.2: VALIDATE=0 .. LIST=17; opened by VALIDATE */
    /* rdzv's store fronts: the modern numbering without WAIT (6) and CANCEL_WAIT (12), with
     * TAG_WAIT=18 and TAG_CANCEL=19; every reply framed (RDZV_FRAME_*). Opened by VALIDATE with
     * RDZV_FRONT_MAGIC (proto/TCPSTORE.md section 9). */
    RDZV_DIALECT_FRONT,
    _RDZV_DIALECT_MAX,
};

/* Reply codes (one byte). */
enum { RDZV_CHECK_READY = 0, RDZV_CHECK_NOT_READY = 1 };
enum { RDZV_WAIT_STOP_WAITING = 0, RDZV_WAIT_CANCELED = 1 };
/* The front numbering's replies: each starts with one of these bytes. REPLY: the reply of the
 * next request that has one, in order (rdzv_op_has_reply); WOKEN: u64 tag, a TAG_WAIT of that
 * tag has all its keys (at once or later, between any two replies). */
enum { RDZV_FRAME_REPLY = 0, RDZV_FRAME_WOKEN = 1 };
enum {
    RDZV_WATCH_KEY_UPDATED = 0,
    RDZV_WATCH_KEY_CREATED = 1,
    RDZV_WATCH_KEY_DELETED = 2,
    RDZV_WATCH_CALLBACK_REGISTERED = 3,
};

/* Every limit a peer can push against. Checked before anything is allocated.
 * Defaults follow PyTorch's libuv server where it has one (8 KiB keys, 8 MiB values,
 * 128Ki keys per request). */
struct rdzv_limits {
    uint64_t max_key_len;      /* bytes in one key */
    uint64_t max_value_len;    /* bytes in one value (also caps APPEND results) */
    uint64_t max_keys_per_req; /* keys in CHECK/WAIT/MULTI_GET/MULTI_SET */
    uint64_t max_frame;        /* bytes in one whole request */
    uint64_t max_outbuf;       /* queued reply bytes per connection before we stop reading it;
                                * also the largest reply (rdzvd-tcpstore-apply.h) */
    uint64_t max_conns;        /* open client connections */
    uint64_t max_handshaking;  /* of them, not through their handshake yet, if set (0: no
                                * count; rdzvd: past it a new one takes the slot of an older
                                * silent one) */
    uint64_t max_handshaking_bytes; /* what those cost rdzvd together (rdzvd_conn_hs_cost and
                                     * the input they hold); past it, the same */
    uint64_t max_input_bytes;  /* incomplete requests buffered, all connections together */
    uint64_t max_store_bytes;  /* what the stores hold for clients (rdzvd_store_held) */
    uint64_t max_wait_keys;    /* pending WAIT registrations per connection */
    uint64_t max_queue_items;  /* items in one QUEUE_PUSH queue */
};

#define RDZV_LIMITS_DEFAULT                                                                        \
    {                                                                                              \
        .max_key_len = 8u << 10, .max_value_len = 8u << 20, .max_keys_per_req = 128u << 10,        \
        .max_frame = 64u << 20, .max_outbuf = 16u << 20, .max_conns = 65536,                      \
        .max_handshaking = 0, .max_handshaking_bytes = 32u << 20,                                  \
        .max_input_bytes = 256u << 20,                                                             \
        .max_store_bytes = 4ull << 30, .max_wait_keys = 128u << 10, .max_queue_items = 1u << 20,   \
    }

/* Name of an operation, for logs ("SET"). Never NULL. */
const char *rdzv_op_name(enum rdzv_op op);
/* Name of a dialect ("2.0", "2.1", "modern", "front"). Never NULL. */
const char *rdzv_dialect_name(enum rdzv_dialect d);
/* Whether op has a reply (SET, APPEND, MULTI_SET, QUEUE_PUSH, VALIDATE and the tag ops have
 * none in turn; a WAIT's comes when its keys are set). */
bool rdzv_op_has_reply(enum rdzv_op op);
/* Parse "2.0" / "2.1" / "modern" (and "1.13", "1.x"; not "front"). Returns 0 or -EINVAL. */
int rdzv_dialect_parse(const char *s, enum rdzv_dialect *ret);
/* The operation a wire byte means in dialect d, or -EPROTO if it means nothing there. */
int rdzv_op_from_wire(enum rdzv_dialect d, uint8_t byte);
/* The wire byte of op in dialect d, or -EPROTO if d has no such operation. */
int rdzv_op_to_wire(enum rdzv_dialect d, enum rdzv_op op);
