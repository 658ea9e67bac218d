/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-msg-priv.h: helpers shared by the message codecs of proto/ (rdzv-msg.c, rdzv-msg-ctl.c);
 * not for use outside proto/. Pure functions: any thread may call them. Each failing helper
 * writes a one-line reason to err[0..errlen) and returns -EBADMSG (or NULL). */
#pragma once
#include <jansson.h>
#include <stddef.h>

#include "proto/rdzv-msg.h"

/* Copy the borrowed string src into dst[0..cap), refusing (-EBADMSG) what does not fit. */
int rdzv_msg_copy_str(char *dst, size_t cap, const char *src, const char *name, char *err,
                      size_t errlen);

/* Load body as a JSON object and json_unpack_ex it (flags 0) with fmt; what names the message
 * in err ("LEAVE: ...", "LEAVE: bad JSON: ..."). Returns the root, which owns the borrowed
 * strings fmt's "s" wrote (copy them, then json_decref it), or NULL with err set. */
json_t *rdzv_msg_unpack(const uint8_t *body, size_t len, const char *what, char *err,
                        size_t errlen, const char *fmt, ...);

/* Report a failed json_unpack_ex as "<what>: <jansson's reason>". Returns -EBADMSG. */
int rdzv_msg_unpack_fail(const json_error_t *jerr, const char *what, char *err, size_t errlen);

/* Copy the NCCL ids of the JSON array arr (at most RDZV_MAX_NCCL_IDS, each exactly
 * RDZV_NCCL_HEX_LEN lowercase hex characters) into ids[0..*ret_n); what names the array in err
 * ("ROUND: nccl_ids"). ids[*ret_n..] are left as they were. */
int rdzv_msg_get_ids(const json_t *arr, const char *what, char (*ids)[RDZV_NCCL_HEX_LEN + 1],
                     unsigned *ret_n, char *err, size_t errlen);

/* A new JSON array of ids[0..n) (NULL on -ENOMEM). */
/* Sets o[key] = v (v's reference taken, NULL included) and returns o; on any failure (o or v
 * NULL, no memory) releases both and returns NULL, so optional fields chain without a check each:
 * `if (cond) o = rdzv_json_set(o, "key", json_string(...));` then one check of o at the end. */
json_t *rdzv_json_set(json_t *o, const char *key, json_t *v);

json_t *rdzv_msg_ids_array(const char (*ids)[RDZV_NCCL_HEX_LEN + 1], unsigned n);

/* Where a link check listens (1.23: JOIN "preflight", PREFLIGHT): addr a numeric IP address,
 * port 1..65535, token RDZV_PF_TOKEN_HEX lowercase hex; copied into addr_out
 * (RDZV_STORE_ADDR_MAX + 1 bytes) and token_out (RDZV_PF_TOKEN_HEX + 1); what names the
 * message in err. */
int rdzv_msg_pf_listener_ok(const char *what, const char *addr, json_int_t port,
                            const char *token, char *addr_out, char *token_out, char *err,
                            size_t errlen);
