/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz-raft-wire.c: libraft messages on a replica link (proto/rdzv-raft-wire.h), checked as the
 * guard checks them (daemon/repl/rdzvd-repl-guard.c: preamble, header against the receiver's state,
 * each AppendEntries entry, each RAFT_CHANGE entry's configuration) before libraft reads them.
 *
 * Input: 10 bytes of the receiver's state, then a stream of messages:
 *   byte 0     bit 0: it leads its term; bit 1: it follows a known leader (id 1); bit 2: the
 *              sender is a member of its configuration
 *   bytes 1-8  its current term (u64 little endian)
 *   byte 9     the sender's replica id
 * The stream is read as the guard reads it, and ends at the first message that fails a check or
 * at the input's end. Properties of every message that passes: its lengths add up (header, each
 * entry, payload) within the limits of rdzv-raft-wire.h and within the bytes present; every term
 * it names is below the ceiling and at most RDZV_RAFT_TERM_JUMP_MAX past the receiver's; an
 * AppendEntries or InstallSnapshot at the receiver's term never reaches a leader of that term; a
 * configuration that passes decodes, by the independent reading below, within its bytes. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "proto/rdzv-raft-wire.h"
#include "fuzz-check.h"

#define VIEW_LEN 10

static uint64_t u64_at(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* An independent reading of a configuration that rdzv_raft_check_conf passed: every server's
 * fields lie within len bytes, its address is NUL-terminated and non-empty there. */
static void conf_decodes(const uint8_t *p, size_t len)
{
    size_t at = 9;
    uint64_t n;

    CHECK(len >= 9 && p[0] == 1);
    n = u64_at(p + 1);
    CHECK(n >= 1 && n <= RDZV_RAFT_SERVERS_MAX);
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *nul;

        CHECK(at + 8 <= len && u64_at(p + at) != 0);
        at += 8;
        nul = memchr(p + at, '\0', len - at);
        CHECK(nul != NULL && nul > p + at && (size_t)(nul - (p + at)) <= RDZV_RAFT_ADDRESS_MAX);
        at = (size_t)(nul - p) + 1;
        CHECK(at < len && p[at] <= 2);
        at++;
    }
    CHECK(at <= len && len - at < 8);
}

/* The terms a checked header names, against the receiver's state. */
static void terms_bounded(const uint8_t *h, const struct rdzv_raft_msg *m,
                          const struct rdzv_raft_view *v)
{
    uint64_t term = u64_at(h);

    CHECK(term < RDZV_RAFT_TERM_CEILING);
    CHECK(term <= v->term || term - v->term <= RDZV_RAFT_TERM_JUMP_MAX);
    if (m->type == RDZV_RAFT_APPEND_ENTRIES || m->type == RDZV_RAFT_INSTALL_SNAPSHOT) {
        /* One leader a term: never a second one at the receiver's own term. */
        CHECK(!(term == v->term && v->leader));
        CHECK(!(term == v->term && v->leader_id != 0 && v->leader_id != v->peer));
    }
    if (m->type == RDZV_RAFT_APPEND_ENTRIES) {
        CHECK(u64_at(h + 16) <= term); /* prev_term */
        for (uint32_t i = 0; i < m->n_entries; i++)
            CHECK(u64_at(h + 40 + 16 * (size_t)i) <= term);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rdzv_raft_view v;
    const uint8_t *p = data + VIEW_LEN, *end = data + size;
    const char *why;

    if (size < VIEW_LEN)
        return 0;
    v.leader = data[0] & 1;
    v.leader_id = (data[0] & 2) ? 1 : 0;
    v.peer_member = (data[0] & 4) != 0;
    v.term = u64_at(data + 1);
    v.peer = data[9];

    while ((size_t)(end - p) >= RDZV_RAFT_PREAMBLE_LEN) {
        struct rdzv_raft_msg m;
        const uint8_t *h;
        uint64_t sum = 0;

        why = NULL;
        if (rdzv_raft_check_preamble(p, &m, &why) < 0) {
            CHECK(why != NULL);
            return 0;
        }
        CHECK(m.type >= 1 && m.type <= 6 && m.header_len > 0 &&
              m.header_len <= RDZV_RAFT_HEADER_MAX);
        p += RDZV_RAFT_PREAMBLE_LEN;
        if ((size_t)(end - p) < m.header_len)
            return 0;
        h = p;
        if (rdzv_raft_check_header(h, &v, &m, &why) < 0) {
            CHECK(why != NULL);
            return 0;
        }
        p += m.header_len;
        terms_bounded(h, &m, &v);
        switch (m.type) {
        case RDZV_RAFT_APPEND_ENTRIES:
            CHECK(m.n_entries <= RDZV_RAFT_ENTRIES_MAX);
            CHECK(m.header_len == 48 + 16 * (size_t)m.n_entries);
            CHECK(m.payload_len <= RDZV_RAFT_APPEND_MAX);
            for (uint32_t i = 0; i < m.n_entries; i++) {
                unsigned type;
                uint64_t len;

                rdzv_raft_entry(h, i, &type, &len);
                CHECK(type >= RDZV_RAFT_COMMAND && type <= RDZV_RAFT_CHANGE);
                CHECK(len > 0 && len % 8 == 0 && len <= RDZV_RAFT_ENTRY_MAX);
                sum += len;
                if ((uint64_t)(end - p) < len)
                    return 0;
                if (type == RDZV_RAFT_CHANGE) {
                    if (rdzv_raft_check_conf(p, (size_t)len, &why) < 0)
                        return 0;
                    conf_decodes(p, (size_t)len);
                }
                p += len;
            }
            CHECK(sum == m.payload_len);
            break;
        case RDZV_RAFT_INSTALL_SNAPSHOT: {
            uint64_t conf_len = u64_at(h + 32);

            CHECK(conf_len <= RDZV_RAFT_CONF_MAX && m.header_len == 56 + conf_len);
            conf_decodes(h + 40, (size_t)conf_len);
            CHECK(m.payload_len > 0 && m.payload_len <= RDZV_RAFT_SNAPSHOT_MAX);
            if ((uint64_t)(end - p) < m.payload_len)
                return 0;
            p += m.payload_len;
            break;
        }
        default:
            CHECK(m.payload_len == 0);
            break;
        }
    }
    return 0;
}
