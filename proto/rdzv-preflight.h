/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-preflight.h: the network pre-flight's pairing and verdict (docs/design/preflight.md).
 *
 * Nodes are indices 0..n-1. Round 1 pairs them: (0,1), (2,3), ...; with an odd n, the last
 * three form a trio (three links, run one after the other). Each link is measured each way
 * (MB/s, or unreachable). rdzv_pf_judge() then says which links are slow: below `fraction` of
 * the job's median. The median is over round 1's links, where every node measures at once under
 * the same load: each node's fastest one, of the nodes that reached a peer. Where at most
 * RDZV_PF_SMALL_JOB nodes reached one, it is at most the median of what each prober measured
 * over both rounds (one figure a node): a prober's report raises its peer's fastest link too. A
 * node with no fast link is a suspect; round 2 (rdzv_pf_round2) pairs each suspect with two nodes
 * that have a fast link, one after the other. Judged again over both rounds, a node is bad when
 * none of its links is fast and at least two of them are slow links to peers that have a fast link
 * elsewhere. So one node's reports never convict another alone: its peer needs a second slow link,
 * to a third node that is itself fine. A bad node that reached a peer is then confirmed
 * (rdzv_pf_confirm): a full probe to a fine node, against a full probe between two fine nodes.
 * Measured alone and for the whole window, an honest link that only looked slow is cleared.
 *
 * No I/O, no clock, no logging, no state: any thread may call these. O(n) work (the median by
 * selection). Errors are negative errnos. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_PF_UNREACHABLE (-1.0)    /* a figure: the link did not connect or finish */
#define RDZV_PF_MBPS_MAX 1e7          /* a figure: at most 10 TB/s (PREFLIGHT_REPORT's bound) */
#define RDZV_PF_FRACTION_DEFAULT 0.25 /* slow: below a quarter of the job's median */
#define RDZV_PF_NODE_LINKS 4          /* links per node over both rounds: at most 3 are made */
#define RDZV_PF_SMALL_JOB 5           /* nodes with a figure of round 1 where probers' count */

/* One link between nodes a and b; the transfers of one slot run at the same time, a node's
 * slots one after the other. */
struct rdzv_pf_link {
    uint32_t a, b;
    uint32_t slot;
    bool round2;   /* rdzv_pf_round2's: judged, but not in the median */
    uint8_t confirm; /* rdzv_pf_confirm's: 1 a suspect's full probe, 2 the reference; else 0 */
    double ab, ba; /* MB/s each way, or RDZV_PF_UNREACHABLE */
};

/* One node as judged: its links (peers and whether each was slow) and its verdict. */
struct rdzv_pf_node {
    uint32_t peer[RDZV_PF_NODE_LINKS];
    bool slow[RDZV_PF_NODE_LINKS];
    uint8_t nlinks;
    uint8_t nfast;      /* links at or above the threshold */
    uint8_t convicting; /* slow links to peers with a fast link elsewhere */
    bool bad;
    bool cleared;  /* bad by both rounds, but its full probe was not slow: not bad */
    bool reached;  /* one of its links was measured (not unreachable) */
    bool paired2;  /* rdzv_pf_round2's mark: given a link in the slot being made */
    uint32_t ref1; /* rdzv_pf_round2's: the suspect's fine node of the first slot */
    double best;   /* its fastest link, MB/s (0: none reachable) */
};

/* A link's figure: the slower way, or RDZV_PF_UNREACHABLE. */
double rdzv_pf_link_mbps(const struct rdzv_pf_link *l);

/* Round 1's links for n nodes (figures unset) into out, which has room for
 * rdzv_pf_round1_max(n); returns how many. */
size_t rdzv_pf_round1_max(uint32_t n);
size_t rdzv_pf_round1(uint32_t n, struct rdzv_pf_link *out);

/* Judges links[0..nlinks) between n nodes into nodes[0..n): each node's links, which are slow
 * (below fraction x the median of the nodes' fastest links, or unreachable) and its verdict.
 * The median counts the links not marked round2, and leaves out the nodes whose every such link
 * is unreachable; where at most RDZV_PF_SMALL_JOB nodes are left, and the median of each
 * prober's fastest link of both rounds is lower, that is the median. With a median of 0 (no
 * link measured) or no links, nothing is slow: nobody can be told from the others. Links marked
 * confirm are not judged: they clear bad nodes (rdzv_pf_confirm). *median (if not NULL) gets
 * the median.
 * 0, -EINVAL (a node index >= n, a node in more than RDZV_PF_NODE_LINKS links, fraction
 * outside (0, 1)) or -ENOMEM. */
int rdzv_pf_judge(uint32_t n, const struct rdzv_pf_link *links, size_t nlinks, double fraction,
                  struct rdzv_pf_node *nodes, double *median);

/* The confirmation, from both rounds' judged nodes: a bad node that reached a peer (and is not
 * skip[i]; skip may be NULL) is a candidate. In slot, each candidate probes a fine node (a fast
 * link, not bad) of its own, a full probe. In slot + 1, the reference: one full probe between
 * two fine nodes, alone. Writes into out (room for n + 1 links, marked confirm 1 and 2); returns
 * how many: 0 without a candidate or two fine nodes. Candidates left over (more than fine nodes)
 * get no link. rdzv_pf_judge then clears a candidate whose full probe is at least fraction x the
 * reference's; one with no full probe, or no reference figure, stays bad. */
size_t rdzv_pf_confirm(uint32_t n, const struct rdzv_pf_node *nodes, const bool *skip,
                       uint32_t slot, struct rdzv_pf_link *out);

/* Round 2 from round 1's judged nodes: two slots (slot, slot + 1), one after the other. In
 * each, every suspect (links, none fast) is paired with a node that has a fast link, is not yet
 * its peer and has no other link in that slot (in index order). So a suspect ends with two
 * links to fine nodes. Writes into out (room for n links); returns how many. Suspects left over
 * (more suspects than fine nodes) stay unpaired, and so are not convicted. */
size_t rdzv_pf_round2(uint32_t n, struct rdzv_pf_node *nodes, uint32_t slot,
                      struct rdzv_pf_link *out);
