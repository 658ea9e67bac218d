/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-raft-wire.c: libraft 0.15's replica messages, checked (rdzv-raft-wire.h). */
#include "proto/rdzv-raft-wire.h"

#include <errno.h>
#include <string.h>

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int bad(const char **why, const char *what)
{
    *why = what;
    return -EBADMSG;
}

const char *rdzv_raft_type_name(unsigned type)
{
    static const char *const names[] = {
        [RDZV_RAFT_APPEND_ENTRIES] = "AppendEntries",
        [RDZV_RAFT_APPEND_ENTRIES_RESULT] = "AppendEntriesResult",
        [RDZV_RAFT_REQUEST_VOTE] = "RequestVote",
        [RDZV_RAFT_REQUEST_VOTE_RESULT] = "RequestVoteResult",
        [RDZV_RAFT_INSTALL_SNAPSHOT] = "InstallSnapshot",
        [RDZV_RAFT_TIMEOUT_NOW] = "TimeoutNow",
    };

    return type >= 1 && type <= RDZV_RAFT_TIMEOUT_NOW ? names[type] : "unknown";
}

int rdzv_raft_check_preamble(const uint8_t p[RDZV_RAFT_PREAMBLE_LEN], struct rdzv_raft_msg *m,
                             const char **why)
{
    uint64_t type = le64(p), len = le64(p + 8);
    bool ok;

    memset(m, 0, sizeof(*m));
    switch (type) {
    case RDZV_RAFT_APPEND_ENTRIES:
        ok = len >= 48 && len <= RDZV_RAFT_HEADER_MAX && (len - 48) % RDZV_RAFT_ENTRY_HDR_LEN == 0;
        break;
    case RDZV_RAFT_APPEND_ENTRIES_RESULT:
    case RDZV_RAFT_TIMEOUT_NOW:
        ok = len == 24;
        break;
    case RDZV_RAFT_REQUEST_VOTE:
        ok = len == 32 || len == 40;
        break;
    case RDZV_RAFT_REQUEST_VOTE_RESULT:
        ok = len == 16 || len == 24;
        break;
    case RDZV_RAFT_INSTALL_SNAPSHOT:
        ok = len >= 56 + 16 && len <= 56 + RDZV_RAFT_CONF_MAX;
        break;
    default:
        return bad(why, "unknown message type");
    }
    if (!ok)
        return bad(why, "header length not that of its type");
    m->type = (unsigned)type;
    m->header_len = (size_t)len;
    return 0;
}

/* A term a message may carry: below the ceiling, at most RDZV_RAFT_TERM_JUMP_MAX past ours. */
static int check_term(uint64_t term, const struct rdzv_raft_view *v, const char **why)
{
    if (term >= RDZV_RAFT_TERM_CEILING)
        return bad(why, "term at the ceiling (it would wrap)");
    if (term > v->term && term - v->term > RDZV_RAFT_TERM_JUMP_MAX)
        return bad(why, "term too far past ours");
    return 0;
}

/* AppendEntries or InstallSnapshot at term: from the one leader of that term, and not us. */
static int check_leader(uint64_t term, const struct rdzv_raft_view *v, const char **why)
{
    if (term == 0)
        return bad(why, "term 0 from a leader");
    if (term == v->term && v->leader)
        return bad(why, "a second leader in our own term");
    if (term == v->term && v->leader_id && v->leader_id != v->peer)
        return bad(why, "a second leader in a term whose leader we follow");
    return 0;
}

static int check_append(const uint8_t *h, struct rdzv_raft_msg *m, const char **why)
{
    uint64_t term = le64(h), prev_index = le64(h + 8), prev_term = le64(h + 16);
    uint64_t n = le64(h + 32), total = 0;

    if (prev_term > term)
        return bad(why, "previous entry's term past the message's");
    if (n != (m->header_len - 48) / RDZV_RAFT_ENTRY_HDR_LEN || n > RDZV_RAFT_ENTRIES_MAX)
        return bad(why, "entry count does not match the header's length");
    if (prev_index > UINT64_MAX - n)
        return bad(why, "entry index past 2^64");
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *e = h + 40 + i * RDZV_RAFT_ENTRY_HDR_LEN;
        uint64_t eterm = le64(e), len = le32(e + 12);
        unsigned type = e[8];

        if (type != RDZV_RAFT_COMMAND && type != RDZV_RAFT_BARRIER && type != RDZV_RAFT_CHANGE)
            return bad(why, "unknown entry type");
        if (eterm == 0 || eterm > term)
            return bad(why, "entry term 0 or past the message's");
        if (len % 8 != 0)
            return bad(why, "entry length not a multiple of 8");
        if (len > RDZV_RAFT_ENTRY_MAX || (type == RDZV_RAFT_CHANGE && len > RDZV_RAFT_CONF_MAX))
            return bad(why, "entry too long");
        if (len == 0)
            return bad(why, "empty entry"); /* libraft leaves its pointers uninitialised */
        total += len;
    }
    if (total > RDZV_RAFT_APPEND_MAX)
        return bad(why, "entries too long in all");
    m->n_entries = (uint32_t)n;
    m->payload_len = total;
    return 0;
}

static int check_snapshot(const uint8_t *h, struct rdzv_raft_msg *m, const char **why)
{
    uint64_t term = le64(h), last_index = le64(h + 8), last_term = le64(h + 16);
    uint64_t conf_index = le64(h + 24), conf_len = le64(h + 32), data_len;
    int r;

    if (last_term == 0 || last_term > term || last_index == 0)
        return bad(why, "snapshot's last term or index out of range");
    if (conf_index == 0 || conf_index > last_index)
        return bad(why, "configuration index past the snapshot's last index");
    if (conf_len != m->header_len - 56)
        return bad(why, "configuration length does not match the header's length");
    if ((r = rdzv_raft_check_conf(h + 40, (size_t)conf_len, why)) < 0)
        return r;
    data_len = le64(h + 40 + conf_len);
    if (data_len == 0 || data_len > RDZV_RAFT_SNAPSHOT_MAX)
        return bad(why, "snapshot data empty or too long");
    m->payload_len = data_len;
    return 0;
}

int rdzv_raft_check_state(unsigned type, uint64_t term, uint64_t candidate,
                          const struct rdzv_raft_view *v, const char **why)
{
    int r;

    if (!v->peer_member)
        return bad(why, "the sender is not in our configuration");
    if ((r = check_term(term, v, why)) < 0)
        return r;
    switch (type) {
    case RDZV_RAFT_APPEND_ENTRIES:
    case RDZV_RAFT_INSTALL_SNAPSHOT:
        return check_leader(term, v, why);
    case RDZV_RAFT_REQUEST_VOTE:
        if (term == 0 || candidate != v->peer)
            return bad(why, "vote requested for another candidate than the sender");
        return 0;
    default:
        return 0;
    }
}

int rdzv_raft_check_header(const uint8_t *h, const struct rdzv_raft_view *v,
                           struct rdzv_raft_msg *m, const char **why)
{
    uint64_t term = le64(h);
    int r;

    m->payload_len = 0;
    m->n_entries = 0;
    if ((r = rdzv_raft_check_state(
             m->type, term, m->type == RDZV_RAFT_REQUEST_VOTE ? le64(h + 8) : 0, v, why)) < 0)
        return r;
    switch (m->type) {
    case RDZV_RAFT_APPEND_ENTRIES:
        return check_append(h, m, why);
    case RDZV_RAFT_INSTALL_SNAPSHOT:
        return check_snapshot(h, m, why);
    case RDZV_RAFT_APPEND_ENTRIES_RESULT:
        return 0; /* term, rejected (an index), last index: any values */
    case RDZV_RAFT_REQUEST_VOTE:
        if (le64(h + 24) > term)
            return bad(why, "candidate's last term past its term");
        if (m->header_len == 40 && le64(h + 32) > 3)
            return bad(why, "unknown vote request flags");
        return 0;
    case RDZV_RAFT_REQUEST_VOTE_RESULT:
        if (le64(h + 8) > 1)
            return bad(why, "vote granted neither 0 nor 1");
        if (m->header_len == 24 && le64(h + 16) > 1)
            return bad(why, "unknown vote result flags");
        return 0;
    case RDZV_RAFT_TIMEOUT_NOW:
        if (term == 0 || le64(h + 16) > term)
            return bad(why, "last term past the message's");
        return 0;
    default:
        return bad(why, "unknown message type");
    }
}

void rdzv_raft_entry(const uint8_t *h, uint32_t i, unsigned *type, uint64_t *len)
{
    const uint8_t *e = h + 40 + (size_t)i * RDZV_RAFT_ENTRY_HDR_LEN;

    *type = e[8];
    *len = le32(e + 12);
}

static bool address_ok(const uint8_t *a, size_t len)
{
    if (len == 0 || len > RDZV_RAFT_ADDRESS_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (a[i] <= ' ' || a[i] > '~')
            return false;
    return true;
}

int rdzv_raft_check_conf(const uint8_t *p, size_t len, const char **why)
{
    uint64_t ids[RDZV_RAFT_SERVERS_MAX];
    size_t at = 9;
    uint64_t n;

    if (len < 9 || len > RDZV_RAFT_CONF_MAX)
        return bad(why, "configuration length out of range");
    if (p[0] != 1)
        return bad(why, "unknown configuration format");
    n = le64(p + 1);
    if (n == 0 || n > RDZV_RAFT_SERVERS_MAX)
        return bad(why, "configuration's server count out of range");
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *nul;
        size_t alen;

        if (len - at < 8 + 1 + 1)
            return bad(why, "configuration ends inside a server");
        ids[i] = le64(p + at);
        if (ids[i] == 0)
            return bad(why, "server id 0 in a configuration");
        for (uint64_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return bad(why, "server id twice in a configuration");
        at += 8;
        nul = memchr(p + at, 0, len - at);
        if (!nul)
            return bad(why, "configuration ends inside an address");
        alen = (size_t)(nul - (p + at));
        if (!address_ok(p + at, alen))
            return bad(why, "server address empty, too long or not printable");
        at += alen + 1;
        if (at >= len)
            return bad(why, "configuration ends before a server's role");
        if (p[at] > 2)
            return bad(why, "unknown server role");
        at++;
    }
    if (len - at >= 8)
        return bad(why, "configuration longer than its servers and padding");
    return 0; /* the padding is not read (libraft leaves it uninitialised) */
}
