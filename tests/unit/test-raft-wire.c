/* SPDX-License-Identifier: Apache-2.0 */
/* test-raft-wire.c: the checks on libraft's replica messages (proto/rdzv-raft-wire.h): every
 * message type as libraft 0.15 writes it passes, and each malformed message of
 * integration-replica-link (a configuration claiming 2^62 bytes, a second leader in the receiver's
 * term, a term of 2^64-1) and each malformed field is refused, with its reason. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "proto/rdzv-raft-wire.h"
#include "../tap.h"

struct msg {
    uint8_t b[4096];
    size_t n;
};

static void put64(struct msg *m, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        m->b[m->n++] = (uint8_t)(v >> (8 * i));
}

static void put8(struct msg *m, uint8_t v)
{
    m->b[m->n++] = v;
}

static void put_str(struct msg *m, const char *s)
{
    memcpy(m->b + m->n, s, strlen(s) + 1);
    m->n += strlen(s) + 1;
}

/* A configuration of n servers 1..n at 127.0.0.1:900i, voters, padded to 8: its length. */
static size_t put_conf(struct msg *m, unsigned n)
{
    size_t at = m->n;
    char addr[32];

    put8(m, 1);
    put64(m, n);
    for (unsigned i = 1; i <= n; i++) {
        put64(m, i);
        snprintf(addr, sizeof(addr), "127.0.0.1:900%u", i);
        put_str(m, addr);
        put8(m, 1);
    }
    while ((m->n - at) % 8)
        put8(m, 0xAA); /* libraft leaves the padding uninitialised */
    return m->n - at;
}

/* Preamble and header checked against v: 0 or -EBADMSG, with *why. */
static int check(const struct msg *m, const struct rdzv_raft_view *v, struct rdzv_raft_msg *out,
                 const char **why)
{
    int r = rdzv_raft_check_preamble(m->b, out, why);

    if (r < 0)
        return r;
    ASSERT_EQ(out->header_len, m->n - RDZV_RAFT_PREAMBLE_LEN);
    return rdzv_raft_check_header(m->b + RDZV_RAFT_PREAMBLE_LEN, v, out, why);
}

static const struct rdzv_raft_view FOLLOWER = {.term = 5, .leader_id = 2, .peer = 2,
                                               .peer_member = true};

/* AppendEntries from peer at term with entries {term, type, len}. */
static void append(struct msg *m, uint64_t term, uint64_t prev_term, unsigned n,
                   const uint64_t (*e)[3])
{
    m->n = 0;
    put64(m, RDZV_RAFT_APPEND_ENTRIES);
    put64(m, 48 + 16 * (uint64_t)n);
    put64(m, term);
    put64(m, 10);        /* prev index */
    put64(m, prev_term); /* prev term */
    put64(m, 9);         /* commit */
    put64(m, n);
    for (unsigned i = 0; i < n; i++) {
        put64(m, e[i][0]);
        put8(m, (uint8_t)e[i][1]);
        put8(m, 0xEE); /* unused, uninitialised */
        put8(m, 0xEE);
        put8(m, 0xEE);
        for (int k = 0; k < 4; k++)
            put8(m, (uint8_t)(e[i][2] >> (8 * k)));
    }
    put64(m, 0xDEADBEEF); /* the "leader id" libraft counts but never writes */
}

static void snapshot(struct msg *m, uint64_t term, uint64_t conf_len_claim, uint64_t data_len)
{
    struct msg conf = {.n = 0};
    size_t clen = put_conf(&conf, 3);

    m->n = 0;
    put64(m, RDZV_RAFT_INSTALL_SNAPSHOT);
    put64(m, 56 + clen);
    put64(m, term);
    put64(m, 100); /* last index */
    put64(m, term);
    put64(m, 50); /* conf index */
    put64(m, conf_len_claim ? conf_len_claim : clen);
    memcpy(m->b + m->n, conf.b, clen);
    m->n += clen;
    put64(m, data_len);
    put64(m, 0);
}

static void test_good_messages(void)
{
    static const uint64_t entries[3][3] = {{5, RDZV_RAFT_COMMAND, 64}, {4, RDZV_RAFT_BARRIER, 8},
                                           {5, RDZV_RAFT_CHANGE, 48}};
    struct rdzv_raft_msg out;
    const char *why = NULL;
    struct msg m;
    unsigned type;
    uint64_t len;

    append(&m, 5, 4, 3, entries);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    ASSERT_TRUE(out.type == RDZV_RAFT_APPEND_ENTRIES && out.n_entries == 3);
    ASSERT_EQ(out.payload_len, 64 + 8 + 48);
    rdzv_raft_entry(m.b + 16, 2, &type, &len);
    ASSERT_TRUE(type == RDZV_RAFT_CHANGE && len == 48);
    append(&m, 6, 5, 0, NULL); /* a heartbeat of a new leader, one term up */
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    ASSERT_EQ(out.payload_len, 0);

    snapshot(&m, 5, 0, 4096);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    ASSERT_EQ(out.payload_len, 4096);

    m.n = 0; /* RequestVote, pre-vote, from the sender itself */
    put64(&m, RDZV_RAFT_REQUEST_VOTE), put64(&m, 40), put64(&m, 6), put64(&m, 2), put64(&m, 11);
    put64(&m, 5), put64(&m, 2);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    m.n = 0; /* the legacy RequestVote without flags */
    put64(&m, RDZV_RAFT_REQUEST_VOTE), put64(&m, 32), put64(&m, 6), put64(&m, 2), put64(&m, 11);
    put64(&m, 5);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    m.n = 0;
    put64(&m, RDZV_RAFT_REQUEST_VOTE_RESULT), put64(&m, 24), put64(&m, 5), put64(&m, 1);
    put64(&m, 1);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    m.n = 0;
    put64(&m, RDZV_RAFT_APPEND_ENTRIES_RESULT), put64(&m, 24), put64(&m, 5), put64(&m, 0);
    put64(&m, 12);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    m.n = 0;
    put64(&m, RDZV_RAFT_TIMEOUT_NOW), put64(&m, 24), put64(&m, 5), put64(&m, 12), put64(&m, 5);
    ASSERT_OK(check(&m, &FOLLOWER, &out, &why));
    ASSERT_EQ(strcmp(rdzv_raft_type_name(RDZV_RAFT_TIMEOUT_NOW), "TimeoutNow"), 0);
    ASSERT_EQ(strcmp(rdzv_raft_type_name(77), "unknown"), 0);
}

#define REFUSED(m, v, reason)                                                                     \
    do {                                                                                           \
        struct rdzv_raft_msg out_;                                                                 \
        const char *why_ = NULL;                                                                   \
        ASSERT_EQ(check(&(m), (v), &out_, &why_), -EBADMSG);                                      \
        ASSERT_NOT_NULL(why_);                                                                     \
        ASSERT_NOT_NULL(strstr(why_, reason));                                                     \
    } while (0)

/* The malformed messages that once crashed a replica, each one message. */
static void test_malformed_messages(void)
{
    struct rdzv_raft_view leader = {.term = 5, .leader = true, .peer = 3, .peer_member = true};
    struct msg m;

    /* 1: 73 bytes of InstallSnapshot whose configuration claims 2^62 bytes. */
    m.n = 0;
    put64(&m, RDZV_RAFT_INSTALL_SNAPSHOT), put64(&m, 57), put64(&m, 1), put64(&m, 1);
    put64(&m, 1), put64(&m, 1), put64(&m, 1ull << 62), put8(&m, 1);
    memset(m.b + m.n, 0, 16);
    m.n += 16;
    ASSERT_EQ(m.n, 73);
    REFUSED(m, &FOLLOWER, "header length");
    snapshot(&m, 5, 1ull << 62, 8); /* the same claim in a header of the right length */
    REFUSED(m, &FOLLOWER, "configuration length");
    /* 2: AppendEntries at the leader's own term; and at a follower's from another leader. */
    append(&m, 5, 5, 0, NULL);
    REFUSED(m, &leader, "second leader in our own term");
    leader.leader = false;
    leader.leader_id = 2;
    REFUSED(m, &leader, "whose leader we follow");
    leader.leader_id = 0; /* no leader known yet in term 5: it may be the one */
    ASSERT_OK(check(&m, &leader, &(struct rdzv_raft_msg){0}, &(const char *){NULL}));
    snapshot(&m, 5, 0, 8);
    leader.leader = true;
    REFUSED(m, &leader, "second leader in our own term");
    /* 3: term 2^64-1 (the next term wraps to 0), and a jump far past ours. */
    append(&m, UINT64_MAX, 1, 0, NULL);
    REFUSED(m, &FOLLOWER, "ceiling");
    append(&m, 5 + RDZV_RAFT_TERM_JUMP_MAX + 1, 1, 0, NULL);
    REFUSED(m, &FOLLOWER, "too far past ours");
    append(&m, 5 + RDZV_RAFT_TERM_JUMP_MAX, 1, 0, NULL);
    ASSERT_OK(check(&m, &FOLLOWER, &(struct rdzv_raft_msg){0}, &(const char *){NULL}));
}

/* The state rules alone, as the transport applies them again when libraft processes a message.
 * A same-term AppendEntries that passed while the receiver followed no one is refused once the
 * receiver leads that term. */
static void test_state_rules(void)
{
    struct rdzv_raft_view v = {.term = 7, .peer = 3, .peer_member = true};
    const char *why = NULL;

    ASSERT_OK(rdzv_raft_check_state(RDZV_RAFT_APPEND_ENTRIES, 7, 0, &v, &why));
    v.leader = true;
    ASSERT_EQ(rdzv_raft_check_state(RDZV_RAFT_APPEND_ENTRIES, 7, 0, &v, &why), -EBADMSG);
    ASSERT_NOT_NULL(strstr(why, "second leader in our own term"));
    ASSERT_EQ(rdzv_raft_check_state(RDZV_RAFT_INSTALL_SNAPSHOT, 7, 0, &v, &why), -EBADMSG);
    ASSERT_OK(rdzv_raft_check_state(RDZV_RAFT_APPEND_ENTRIES, 8, 0, &v, &why));
    ASSERT_OK(rdzv_raft_check_state(RDZV_RAFT_APPEND_ENTRIES_RESULT, 7, 0, &v, &why));
    ASSERT_OK(rdzv_raft_check_state(RDZV_RAFT_REQUEST_VOTE, 8, 3, &v, &why));
    ASSERT_EQ(rdzv_raft_check_state(RDZV_RAFT_REQUEST_VOTE, 8, 2, &v, &why), -EBADMSG);
    ASSERT_NOT_NULL(strstr(why, "another candidate"));
    v.peer_member = false;
    ASSERT_EQ(rdzv_raft_check_state(RDZV_RAFT_TIMEOUT_NOW, 7, 0, &v, &why), -EBADMSG);
    ASSERT_NOT_NULL(strstr(why, "not in our configuration"));
}

static void test_fields(void)
{
    static const uint64_t odd[1][3] = {{5, RDZV_RAFT_COMMAND, 13}};
    static const uint64_t type9[1][3] = {{5, 9, 8}};
    static const uint64_t future[1][3] = {{6, RDZV_RAFT_COMMAND, 8}};
    static const uint64_t huge[1][3] = {{5, RDZV_RAFT_COMMAND, 0xFFFFFFF8}};
    static const uint64_t big_change[1][3] = {{5, RDZV_RAFT_CHANGE, RDZV_RAFT_CONF_MAX + 8}};
    static const uint64_t empty[2][3] = {{5, RDZV_RAFT_BARRIER, 0}, {5, RDZV_RAFT_COMMAND, 0}};
    struct rdzv_raft_view stranger = FOLLOWER;
    struct msg m;

    m.n = 0;
    put64(&m, 0), put64(&m, 24), put64(&m, 5), put64(&m, 0), put64(&m, 0);
    REFUSED(m, &FOLLOWER, "unknown message type");
    m.n = 0;
    put64(&m, RDZV_RAFT_TIMEOUT_NOW), put64(&m, 0);
    REFUSED(m, &FOLLOWER, "header length");
    m.n = 0;
    put64(&m, RDZV_RAFT_APPEND_ENTRIES), put64(&m, 1ull << 40);
    REFUSED(m, &FOLLOWER, "header length");
    append(&m, 5, 4, 1, odd);
    REFUSED(m, &FOLLOWER, "multiple of 8");
    append(&m, 5, 4, 1, type9);
    REFUSED(m, &FOLLOWER, "entry type");
    append(&m, 5, 4, 1, future);
    REFUSED(m, &FOLLOWER, "entry term");
    append(&m, 5, 4, 1, huge);
    REFUSED(m, &FOLLOWER, "entry too long");
    append(&m, 5, 4, 1, big_change);
    REFUSED(m, &FOLLOWER, "entry too long");
    append(&m, 5, 4, 2, empty); /* the fuzzer's SIGSEGV in libraft: a message of empty entries */
    REFUSED(m, &FOLLOWER, "empty entry");
    append(&m, 5, 6, 0, NULL);
    REFUSED(m, &FOLLOWER, "previous entry's term");
    append(&m, 5, 4, 0, NULL);
    m.b[16 + 32] = 7; /* n says 7 entries in a header of none */
    REFUSED(m, &FOLLOWER, "entry count");
    stranger.peer_member = false;
    append(&m, 5, 4, 0, NULL);
    REFUSED(m, &stranger, "not in our configuration");
    snapshot(&m, 5, 0, 0);
    REFUSED(m, &FOLLOWER, "snapshot data");
    snapshot(&m, 5, 0, RDZV_RAFT_SNAPSHOT_MAX + 1);
    REFUSED(m, &FOLLOWER, "snapshot data");
    m.n = 0; /* a vote asked for someone else */
    put64(&m, RDZV_RAFT_REQUEST_VOTE), put64(&m, 40), put64(&m, 6), put64(&m, 3), put64(&m, 11);
    put64(&m, 5), put64(&m, 0);
    REFUSED(m, &FOLLOWER, "another candidate");
    m.b[16 + 8] = 2, m.b[16 + 32] = 8; /* the sender, with a flag bit libraft has not */
    REFUSED(m, &FOLLOWER, "flags");
    m.n = 0;
    put64(&m, RDZV_RAFT_REQUEST_VOTE_RESULT), put64(&m, 16), put64(&m, 5), put64(&m, 2);
    REFUSED(m, &FOLLOWER, "neither 0 nor 1");
}

static void test_configurations(void)
{
    struct msg m = {.n = 0};
    const char *why = NULL;
    size_t len = put_conf(&m, 3);

    ASSERT_OK(rdzv_raft_check_conf(m.b, len, &why));
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len + 8, &why), -EBADMSG); /* 8 bytes past padding */
    for (size_t cut = 0; cut < len - 7; cut++) /* every truncation inside the servers */
        ASSERT_EQ(rdzv_raft_check_conf(m.b, cut, &why), -EBADMSG);
    m.b[0] = 2;
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    m.b[0] = 1;
    m.b[1] = 0xFF; /* 255 servers claimed, 3 present */
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    m.b[1] = 3;
    m.b[9] = 2; /* server 1 becomes 2: twice */
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    ASSERT_NOT_NULL(strstr(why, "twice"));
    m.b[9] = 0; /* id 0 */
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    m.b[9] = 1;
    m.b[17] = '\n'; /* an address that is not printable */
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    m.b[17] = '1';
    m.b[17 + 15] = 7; /* server 1's role */
    ASSERT_EQ(rdzv_raft_check_conf(m.b, len, &why), -EBADMSG);
    ASSERT_NOT_NULL(strstr(why, "role"));
    m.b[17 + 15] = 1;
    ASSERT_OK(rdzv_raft_check_conf(m.b, len, &why));
}

int main(void)
{
    TEST(test_good_messages);
    TEST(test_malformed_messages);
    TEST(test_state_rules);
    TEST(test_fields);
    TEST(test_configurations);
    return tap_done();
}
