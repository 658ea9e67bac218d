/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-raft-wire.h: libraft 0.15's messages between replicas (src/uv_encoding.c), checked before
 * libraft reads them.
 *
 * libraft trusts every byte a peer sends once a connection is handed to it: it decodes a header
 * without comparing its fields to the bytes present, reads a configuration's servers past the
 * end of its buffer, mallocs whatever payload length a header claims, adopts any term, and lets a
 * second leader's AppendEntries overwrite its own leader state. rdzvd therefore reads each
 * message on an inbound replica link itself (daemon/repl/rdzvd-repl-guard.c), checks it here, and
 * passes on to libraft only messages that passed; the first that does not closes the link.
 *
 * The wire format (all integers little endian, as libraft writes them):
 *   preamble   u64 type (1..6), u64 header length in bytes (> 0)
 *   header     by type, below; libraft's encoder counts 8 bytes more than it writes for
 *              AppendEntries and InstallSnapshot (a "leader id" it never sends): those are zero
 *   payload    AppendEntries: each entry's bytes in turn; InstallSnapshot: the snapshot's data
 *
 *   type  name                  header                                             length
 *   1     AppendEntries         term, prev_index, prev_term, commit, n,            48 + 16 n
 *                               n x {term u64, type u8, 3 unused, length u32}, 8 unused
 *   2     AppendEntriesResult   term, rejected, last_log_index                    24
 *   3     RequestVote           term, candidate_id, last_index, last_term[, flags] 32 or 40
 *   4     RequestVoteResult     term, granted[, flags]                             16 or 24
 *   5     InstallSnapshot       term, last_index, last_term, conf_index, conf_len, 56 + conf_len
 *                               configuration (conf_len bytes), data_len, 8 unused
 *   6     TimeoutNow            term, last_index, last_term                        24
 *
 * A configuration: u8 format (1), u64 n, n x {u64 id, address NUL-terminated, u8 role}, padding
 * to a multiple of 8 (uninitialised: libraft mallocs the buffer and writes no padding).
 *
 * What is checked where:
 *   libraft 0.15 itself  a header length of zero; the message type (after decoding, which has
 *                        already read the header); an entry's type; an address's NUL within
 *                        the configuration's bytes (not the 8-byte id before it, nor the role
 *                        after); duplicate ids. Nothing else: its decode is unchecked, and a
 *                        claimed length is malloc'd as is. cowsql/raft (the maintained fork)
 *                        changed the preamble (a version byte) and limits the entries a leader
 *                        sends, but its configuration decode is unchecked still.
 *   here (the bytes)     each type's exact header length; n and conf_len against the header;
 *                        every entry a known type, a multiple of 8 bytes long (libraft steps
 *                        over padding it assumes there), not empty (an AppendEntries whose
 *                        entries are all empty has no payload, and libraft then leaves their
 *                        buffer and batch pointers uninitialised and frees them later: found by
 *                        the replica-link fuzzer), within RDZV_RAFT_ENTRY_MAX, at most
 *                        RDZV_RAFT_ENTRIES_MAX of them and RDZV_RAFT_APPEND_MAX bytes in all; a
 *                        snapshot within RDZV_RAFT_SNAPSHOT_MAX and not empty; a configuration
 *                        (in a snapshot's header or in a RAFT_CHANGE entry, rdzv_raft_check_conf)
 *                        decoded within its bytes: format 1, 1..RDZV_RAFT_SERVERS_MAX servers,
 *                        non-zero distinct ids, addresses of 1..255 printable bytes, roles 0..2,
 *                        less than 8 bytes of padding; flags and vote values within their bits.
 *                        (The bytes libraft marks unused are not read: its encoder leaves them
 *                        uninitialised.)
 *   here (the state)     terms: no term below a message's own (prev_term, last_term, entry
 *                        terms), no term at or past RDZV_RAFT_TERM_CEILING (no wrap) and none more
 *                        than RDZV_RAFT_TERM_JUMP_MAX past the receiver's; the sender is the
 *                        link's authenticated peer (a RequestVote's candidate id) and a member of
 *                        the receiver's configuration once it has one; AppendEntries and
 *                        InstallSnapshot at the receiver's own term are refused when the
 *                        receiver leads that term or follows another leader in it (one leader a
 *                        term: Raft's election safety). These rules (rdzv_raft_check_state) run
 *                        twice: as the message arrives, and again as libraft processes it
 *                        (rdzvd-repl-net.c wraps libraft's receive callback), since the messages
 *                        before it in one write, or on another link, may have changed the state
 *                        (AppendEntries(T'), TimeoutNow, RequestVoteResult(T'+1) and
 *                        AppendEntries(T'+1) in one write could make a follower lead T'+1 and
 *                        then reach it as a second leader: a crash). A message refused then is
 *                        dropped and its peer's links close.
 *   the guard (payloads) an AppendEntries with entries or an InstallSnapshot of a term below the
 *                        receiver's: libraft would only answer it with its term, but allocates the
 *                        claimed payload first (up to RDZV_RAFT_SNAPSHOT_MAX a link). libraft gets
 *                        an AppendEntries of that term and no entries; the payload is dropped
 *                        (rdzvd-repl-guard.c).
 *   the application      an entry's contents (RAFT_COMMAND: rdzvd-repl.c's batch decode), a
 *                        snapshot's data (rdzvd-repl.c's restore).
 *
 * Not checkable from one message: an AppendEntries that contradicts a committed entry (libraft
 * then turns RAFT_UNAVAILABLE; rdzvd exits non-zero when it does, rdzvd-replica.c).
 *
 * Pure functions, no allocation; errors are -EBADMSG with *why set to a static string. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_RAFT_PREAMBLE_LEN 16
#define RDZV_RAFT_ENTRY_HDR_LEN 16

/* Limits: one place. An honest message never comes near them: rdzvd batches a leader's changes
 * into entries of a few records (a value is at most 8 MiB), and a snapshot holds the store
 * (--max-store-bytes, 4 GiB by default) encoded. */
#define RDZV_RAFT_HEADER_MAX (1u << 20)          /* bytes of one header (65,533 entries) */
#define RDZV_RAFT_ENTRIES_MAX 65533u             /* entries in one AppendEntries */
#define RDZV_RAFT_ENTRY_MAX (256ull << 20)       /* bytes of one entry */
#define RDZV_RAFT_APPEND_MAX (1ull << 30)        /* payload of one AppendEntries */
#define RDZV_RAFT_SNAPSHOT_MAX (16ull << 30)     /* data of one InstallSnapshot */
#define RDZV_RAFT_CONF_MAX (64u << 10)           /* bytes of one encoded configuration */
#define RDZV_RAFT_SERVERS_MAX 255u               /* servers in one configuration */
#define RDZV_RAFT_ADDRESS_MAX 255u               /* bytes of one address */
#define RDZV_RAFT_TERM_JUMP_MAX (1ull << 20)     /* terms past the receiver's in one message */
#define RDZV_RAFT_TERM_CEILING (UINT64_MAX >> 1) /* no term reaches it: no wrap */

enum rdzv_raft_type {
    RDZV_RAFT_APPEND_ENTRIES = 1,
    RDZV_RAFT_APPEND_ENTRIES_RESULT = 2,
    RDZV_RAFT_REQUEST_VOTE = 3,
    RDZV_RAFT_REQUEST_VOTE_RESULT = 4,
    RDZV_RAFT_INSTALL_SNAPSHOT = 5,
    RDZV_RAFT_TIMEOUT_NOW = 6,
};

enum rdzv_raft_entry_type { RDZV_RAFT_COMMAND = 1, RDZV_RAFT_BARRIER = 2, RDZV_RAFT_CHANGE = 3 };

/* The receiving replica as the message arrives (its struct raft; rdzvd-replica.c fills it). */
struct rdzv_raft_view {
    uint64_t term;      /* its current term */
    bool leader;        /* it leads term */
    uint64_t leader_id; /* the leader it follows in term; 0 if none is known */
    uint64_t peer;      /* the sender: the link's authenticated replica id */
    bool peer_member;   /* peer is in its configuration, or it has none yet (joining) */
};

/* One message, as far as it has been checked. */
struct rdzv_raft_msg {
    unsigned type;        /* enum rdzv_raft_type */
    size_t header_len;    /* bytes after the preamble */
    uint64_t payload_len; /* bytes after the header (after rdzv_raft_check_header) */
    uint32_t n_entries;   /* AppendEntries */
};

/* The name of a message type, for logs ("type 9" style names are not kept: "unknown"). */
const char *rdzv_raft_type_name(unsigned type);

/* The 16 bytes of a preamble: a known type and a header length that type can have. Fills m's
 * type and header_len. 0 or -EBADMSG. */
int rdzv_raft_check_preamble(const uint8_t p[RDZV_RAFT_PREAMBLE_LEN], struct rdzv_raft_msg *m,
                             const char **why);

/* The header h of m->header_len bytes (m from rdzv_raft_check_preamble), against the receiver's
 * state v. Fills m's payload_len and n_entries. 0 or -EBADMSG. */
int rdzv_raft_check_header(const uint8_t *h, const struct rdzv_raft_view *v,
                           struct rdzv_raft_msg *m, const char **why);

/* The rules on the receiver's state alone, for a message of type at term from v->peer (candidate:
 * a RequestVote's candidate id, else unused): a member sender, the term's bounds, one leader a
 * term, a RequestVote for the sender. rdzv_raft_check_header applies them as a message arrives;
 * the transport applies them again as libraft processes it (rdzvd-repl-net.c), since the
 * messages before it in the same write may have changed the state meanwhile. 0 or -EBADMSG. */
int rdzv_raft_check_state(unsigned type, uint64_t term, uint64_t candidate,
                          const struct rdzv_raft_view *v, const char **why);

/* Entry i (< m->n_entries) of a checked AppendEntries header h: its type and length. */
void rdzv_raft_entry(const uint8_t *h, uint32_t i, unsigned *type, uint64_t *len);

/* An encoded configuration of len bytes (a RAFT_CHANGE entry's or a snapshot's). 0 or
 * -EBADMSG. */
int rdzv_raft_check_conf(const uint8_t *p, size_t len, const char **why);
