/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-journal.h: an append-only journal that makes one store survive a daemon restart.
 *
 * File DIR/<name>.journal: a header ("RDZVJRN1", u32 version 3, u32 length of name, name, u32 CRC
 * of all before it), then records, all integers little-endian:
 *
 *     u32 crc32 (of everything after it) | u8 type | u32 klen | u32 vlen | key | value
 *
 * type is SET (the key's whole new value), APPEND (only the bytes appended), DEL, QPUSH (value)
 * or QPOP (no value) (rdzvd-record.h). Every successful store mutation appends one record, whose
 * size is that of the request's own key and value: a one-byte APPEND to an 8 MiB value costs 19
 * bytes plus its key, not 8 MiB. Unbuffered, each record is written(2) at once.
 * Buffered (rdzvd_journal_set_buffered: what rdzvd does), records collect in memory and the
 * owner writes them with rdzvd_journal_flush() once per event-loop iteration, BEFORE it sends
 * the replies of that iteration: one write(2) for a whole batch of requests, and still nothing a
 * client saw acknowledged is lost when rdzvd crashes or is SIGKILLed. When the records reach the
 * disk depends on the fsync mode (enum rdzvd_fsync).
 *
 * Replay on open stops at the first record that is cut short or bad (CRC, type, or a record of the
 * replicas' job table). If no intact record starts anywhere after it, it is a torn tail, which is
 * all a crash mid-write leaves: it is truncated away, with a warning saying how many bytes went,
 * and the journal opens. If an intact record does follow (at any byte offset: a corrupt length
 * hides where the next record starts), the bad record is corruption in the middle of the file:
 * open fails with -EBADMSG and one error line naming the file, the bad record's byte offset and
 * the command that keeps the records before it ('truncate -s OFFSET FILE'), and the file is left
 * exactly as it is. The search checksums at most 256 MiB; past that the bad record counts as
 * corruption too.
 *
 * The header names the journal's owner: a journal whose header names another state name (a
 * file renamed or planted under this one's name) is never replayed, overwritten or deleted:
 * open fails with -EEXIST and a log line. A version 1 journal (16-byte header: magic, u32 1, CRC
 * of the first 12 bytes; no name) or a version 2 one (the header of version 3; no APPEND records)
 * is replayed and at once rewritten as version 3, so that an rdzvd from before APPEND records
 * refuses the file (an unsupported version) instead of cutting it at the first APPEND.
 *
 * Compaction: once the file outgrows max(RDZVD_JOURNAL_COMPACT_MIN, RDZVD_JOURNAL_COMPACT_FACTOR x
 * the store's live size, RDZVD_JOURNAL_COMPACT_FACTOR x the last snapshot), a snapshot of the live
 * content goes to <name>.journal.tmp, which is fsynced, renamed over the journal, and the
 * directory fsynced. Each compaction follows at least a doubling of the file, so its cost is
 * amortised O(1) per byte appended. It runs on the loop thread, like the fsyncs.
 *
 * A compaction that finds no room on disk (ENOSPC) leaves the journal as it was, and it goes on.
 *
 * Bound on disk (rdzvd_journal_bound: a store of TCPStore clients): the journal holds at most
 * rdzvd_journal_max_bytes, its store's share of --max-store-bytes plus as much again (1 MiB at
 * least), the compaction's slack; and its records leave the state directory's reserve free
 * (rdzvd-disk.h), and above it at least as much again as the journal holds. A change whose
 * record would pass either is refused before it is made (the store's room hook: -EDQUOT, nothing
 * changed), as one past the store's memory is: that store's clients get the error, and the job
 * table keeps its reserve. So a store is refused only once it holds as much as is left free: a
 * full journal is its own store's problem, and the next store always finds half of the free
 * room above the reserve (the main store's and each job's). A journal holding
 * more than RDZVD_JOURNAL_COMPACT_FACTOR times its live content compacts before it refuses, so
 * deleted keys give their room back. Deletes and pops are never refused: one that takes the
 * journal past its bound compacts it at once (its live records fit the bound: they passed it).
 *
 * A write or fsync error is logged once (for ENOSPC, with the free space and the directory's
 * largest files) and turns persistence off for that store; the store itself keeps serving. The
 * journal holds an exclusive flock(2) on its file: a second rdzvd on the same directory gets
 * -EBUSY instead of interleaving records.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct rdzvd_disk;
struct rdzvd_store;
struct rdzvd_journal;

/* Compact when the journal is larger than this ... */
#define RDZVD_JOURNAL_COMPACT_MIN (1u << 20)
/* ... and larger than this many times both the live content and the last snapshot. */
#define RDZVD_JOURNAL_COMPACT_FACTOR 2
/* Longest state name (the file is DIR/<name>.journal). */
#define RDZVD_STATE_NAME_MAX 200

/* When journal writes are fsynced (Redis's appendfsync). Records always reach the kernel before
 * their replies leave, so a crash of rdzvd alone loses nothing in any mode.
 *   EVERYSEC: fdatasync at most once a second, and only while there is something unsynced: a
 *             one-shot timer armed by the first unsynced write (no timer runs while idle).
 *             A power failure loses up to about one second of acknowledged writes.
 *   ALWAYS:   fdatasync in rdzvd_journal_flush(), so before the replies: once per event-loop
 *             iteration that wrote (a batch of requests shares one fsync). Unbuffered, after
 *             each record. A power failure loses nothing that was acknowledged.
 *   NO:       never fsync (the kernel writes back when it likes, typically within 30 s).
 * Compaction always fsyncs; a clean close fsyncs unless the mode is NO. fsync runs on the loop
 * thread: on a slow disk, requests in that iteration wait for it. */
enum rdzvd_fsync { RDZVD_FSYNC_EVERYSEC, RDZVD_FSYNC_ALWAYS, RDZVD_FSYNC_NO };

/* Parse "always" / "everysec" / "no". Returns 0 or -EINVAL. */
int rdzvd_fsync_parse(const char *s, enum rdzvd_fsync *ret);
const char *rdzvd_fsync_name(enum rdzvd_fsync mode);

/* A state name is 1..RDZVD_STATE_NAME_MAX characters of [A-Za-z0-9._-]. */
bool rdzvd_state_name_valid(const char *name);

struct rdzvd_journal_stats {
    uint64_t size;        /* bytes in the journal file now */
    uint64_t replayed;    /* records applied when it was opened */
    uint64_t dropped;     /* bytes of torn tail truncated away when it was opened */
    uint64_t records;     /* records appended since open */
    uint64_t fsyncs;      /* fdatasync calls since open (compaction not counted) */
    uint64_t compactions; /* snapshots written since open */
};

/* Open DIR/<name>.journal (dirfd is DIR, opened O_DIRECTORY; dir names it in logs) and replay
 * it into store, creating an empty journal if there is none. store must be fresh: no keys, no
 * waiters, no watchers (replay goes through the ordinary store calls, which then wake nobody).
 * From then on every change of store is journaled. loop may be NULL: then nothing is fsynced
 * except by rdzvd_journal_sync(), compaction and close (unit tests).
 * Logs its own errors. Returns 0, -EINVAL (bad name, store not empty), -EBADMSG (not a journal,
 * a corrupt header, or a corrupt record with intact records after it: the file is untouched),
 * -ENOSPC / -EMSGSIZE (the journal holds more than the store's limits
 * allow), -EBUSY (another process has it open), -EEXIST (the file is another state name's
 * journal: left as it is) or another negative errno from the file system.
 * dirfd, dir and store are borrowed and must outlive the journal. */
int rdzvd_journal_open(uv_loop_t *loop, int dirfd, const char *dir, const char *name,
                       enum rdzvd_fsync mode, struct rdzvd_store *store,
                       struct rdzvd_journal **ret);

/* Delete DIR/<name>.journal if it exists, unless its header names another state name (then
 * -EEXIST, and the file is left as it is). 0 or a negative errno (never -ENOENT). No logging. */
int rdzvd_journal_unlink(int dirfd, const char *name);

/* Buffer records from now on. pending_fn(ud) is called when the buffer turns non-empty (from
 * inside a store mutation: it must not touch the store); the owner must then call
 * rdzvd_journal_flush() before any reply leaves the process. A full buffer (64 KiB) or a large
 * record is written at once. If the buffer can't be allocated the journal stays unbuffered. */
void rdzvd_journal_set_buffered(struct rdzvd_journal *j, void (*pending_fn)(void *ud), void *ud);
/* True while buffered records wait for rdzvd_journal_flush(). */
bool rdzvd_journal_pending(const struct rdzvd_journal *j);
/* Write the buffered records (and fdatasync in ALWAYS mode). Returns 0 or the error (persistence
 * is then off: nothing is pending any more either way). */
int rdzvd_journal_flush(struct rdzvd_journal *j);

/* Write what is buffered and fdatasync now if anything is unsynced. Returns 0 or the error
 * (persistence is then off). */
int rdzvd_journal_sync(struct rdzvd_journal *j);
/* Write a snapshot now (normally automatic). Returns 0 or the error (persistence is then off). */
int rdzvd_journal_compact(struct rdzvd_journal *j);
/* Bound the journal on disk from now on (see the top): its store's changes whose records have no
 * room are refused (-EDQUOT). disk (borrowed, may be NULL: the bound alone) must outlive j. The
 * journal leaves at least as much free above the reserve as it holds: at most half of the room
 * that is left when it writes, so that one store's journal never takes another's. */
void rdzvd_journal_bound(struct rdzvd_journal *j, struct rdzvd_disk *disk);
/* The bound: the store's share of its budget (rdzvd_store_room), plus as much again, 1 MiB at
 * least. */
uint64_t rdzvd_journal_max_bytes(const struct rdzvd_journal *j);
/* True once an error has turned persistence off. */
bool rdzvd_journal_failed(const struct rdzvd_journal *j);
const struct rdzvd_journal_stats *rdzvd_journal_stats(const struct rdzvd_journal *j);

/* Stop journaling the store (its change hook is removed at once), write what is buffered, fsync
 * unless the mode is NO, close the file; with drop, delete the file instead. With a loop the
 * memory is released in the timer's close callback (the loop must run once more); without one,
 * at once. NULL is fine. */
void rdzvd_journal_close(struct rdzvd_journal *j, bool drop);
