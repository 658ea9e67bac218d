/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-record.h: one change of a store as bytes, the unit that the journal appends and that a
 * replicated rdzvd commits through Raft (rdzvd-repl.h): the same record, read by the same
 * decoder and applied by the same function, so a journal's replay and a replica's apply are one
 * path.
 *
 * Format (little-endian): u32 crc, u8 type, u32 klen, u32 vlen, key, value. crc is CRC-32 (zlib's)
 * of everything after it. Types: 1 SET (the key holds the value), 2 DELETE, 3 QPUSH (the value at
 * the tail of the key's queue), 4 QPOP (the head of the key's queue removed), 5 DECISION (a job's
 * decision, the value: the store's decision replayer applies it to the key's record), 6 APPEND (the
 * value added at the end of the key's value, which a missing key starts empty: an APPEND costs the
 * journal and the Raft log the bytes it sent, not the key's whole new value); DELETE and QPOP carry
 * no value, DECISION always does. Type 6 is new with journal version 3 (rdzvd-journal.h): readers
 * before it refuse it as corrupt. The type's high bit (RDZVD_RECORD_JOBS) marks a record of the
 * replicas' job table (rdzvd-repl.h) rather than of the clients' store; a journal holds none.
 *
 * Pure functions but rdzvd_record_apply (which changes the store). Errors: negative errno. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/data/rdzvd-store.h"

#define RDZVD_RECORD_HDR_LEN 13u /* u32 crc, u8 type, u32 klen, u32 vlen */

/* Which key space a record changes. */
enum rdzvd_table {
    RDZVD_TABLE_STORE = 0, /* the TCPStore clients' keys (the main store) */
    RDZVD_TABLE_JOBS = 1,  /* a replicated rdzvd's own: its jobs' records (rdzvd-job-journals.h) */
};

/* One decoded record; key and val point into the bytes it was decoded from. */
struct rdzvd_record {
    enum rdzvd_table table;
    enum rdzvd_change what;
    const uint8_t *key;
    size_t klen;
    const uint8_t *val; /* NULL for DELETE and QPOP; the appended bytes for APPEND */
    size_t vlen;
};

/* crc32(0, p, n) of zlib; chains as crc32(crc32(0, a), b) = crc32 of a then b. */
uint32_t rdzvd_crc32(uint32_t crc, const void *p, size_t n);

/* The header of a record of what, key and val (the bytes that follow it) into h. 0, or
 * -EMSGSIZE when a length does not fit the format. */
int rdzvd_record_header(uint8_t h[RDZVD_RECORD_HDR_LEN], enum rdzvd_change what,
                        const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen);
/* The same for a record of table. */
int rdzvd_record_header_in(uint8_t h[RDZVD_RECORD_HDR_LEN], enum rdzvd_table table,
                           enum rdzvd_change what, const uint8_t *key, size_t klen,
                           const uint8_t *val, size_t vlen);

/* The record at p[0..n) into *rec: the bytes it takes (> 0); -EAGAIN when p ends before it does
 * (a torn tail); -EBADMSG when it is corrupt (CRC, type, a value where none goes). *why, when
 * not NULL, says which in a few words. */
ssize_t rdzvd_record_decode(const uint8_t *p, size_t n, struct rdzvd_record *rec,
                            const char **why);

/* Make the change in s. 0, or the store's error (a limit of s exceeded, e.g. an APPEND past
 * max_value_len: -EMSGSIZE, nothing changed; a QPOP's of an empty queue), or a DECISION's (the
 * store's decision replayer: rdzvd_decision_apply's -EBADMSG, -ESTALE; -EINVAL for a store that
 * takes none). A DELETE of a missing key is a no-op. */
int rdzvd_record_apply(struct rdzvd_store *s, const struct rdzvd_record *rec);
