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
 * configuration that passes decodes, by the independent reading below, within its bytes.
 *
 * Sequences: the stream is one write, every message of it checked on arrival against
 * the state before libraft processed any (the worst case: the guard may hold them all in one
 * read), and then, in order, processed by a model of libraft's role changes (a newer term
 * resets the role; an AppendEntries or InstallSnapshot makes the sender the leader; a
 * TimeoutNow from the leader makes a candidate of the next term; a vote granted in that term a
 * leader) behind rdzv_raft_check_state with the modelled state, as rdzvd-repl-recv.c runs it.
 * Property: no AppendEntries or InstallSnapshot of the modelled term reaches a leader of it, or a
 * follower of another leader. Without the second check, AppendEntries(T'), TimeoutNow,
 * RequestVoteResult(T'+1, granted), AppendEntries(T'+1) breaks it (seed-batch-checked-per-message).
 * A stale-term message with a payload reaches the model as an AppendEntries without entries. */
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

/* The model of libraft processing a message that passed (rdzvd-repl-recv.c's check first).
 * Returns false when the check refuses it: the link closes, the stream ends. */
static bool processed(struct rdzv_raft_view *now, bool *candidate, unsigned type, const uint8_t *h)
{
    uint64_t term = u64_at(h);
    const char *why = NULL;

    if (rdzv_raft_check_state(type, term, type == RDZV_RAFT_REQUEST_VOTE ? u64_at(h + 8) : 0, now,
                              &why) < 0) {
        CHECK(why != NULL);
        return false;
    }
    if (type == RDZV_RAFT_APPEND_ENTRIES || type == RDZV_RAFT_INSTALL_SNAPSHOT) {
        CHECK(!(term == now->term && now->leader));
        CHECK(!(term == now->term && now->leader_id != 0 && now->leader_id != now->peer));
    }
    if (term > now->term) {
        now->term = term;
        now->leader = *candidate = false;
        now->leader_id = 0;
    }
    if (term < now->term)
        return true; /* answered with our term, nothing changes */
    switch (type) {
    case RDZV_RAFT_APPEND_ENTRIES:
    case RDZV_RAFT_INSTALL_SNAPSHOT:
        *candidate = false;
        now->leader_id = now->peer;
        break;
    case RDZV_RAFT_TIMEOUT_NOW:
        if (!now->leader && !*candidate && now->leader_id == now->peer) {
            now->term++;
            now->leader_id = 0;
            *candidate = true;
        }
        break;
    case RDZV_RAFT_REQUEST_VOTE_RESULT:
        if (*candidate && u64_at(h + 8) == 1) {
            *candidate = false;
            now->leader = true;
        }
        break;
    default:
        break;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rdzv_raft_view v, now;
    const uint8_t *p = data + VIEW_LEN, *end = data + size;
    bool candidate = false;
    const char *why;

    if (size < VIEW_LEN)
        return 0;
    v.leader = data[0] & 1;
    v.leader_id = (data[0] & 2) ? 1 : 0;
    v.peer_member = (data[0] & 4) != 0;
    v.term = u64_at(data + 1);
    v.peer = data[9];
    now = v;

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
        if (m.payload_len > 0 && u64_at(h) < v.term) {
            /* Stale: libraft gets an AppendEntries without entries; the payload is dropped. */
            if (!processed(&now, &candidate, RDZV_RAFT_APPEND_ENTRIES, h))
                return 0;
        } else if (!processed(&now, &candidate, m.type, h)) {
            return 0;
        }
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
