/* SPDX-License-Identifier: Apache-2.0 */
/* test-preflight.c: the network pre-flight's pairing and verdict (proto/rdzv-preflight.h), on
 * simulated nodes: each node's NIC has a speed, a link carries the slower of its two NICs, a
 * dead node's links are unreachable, and a liar reports every link of its own as slow (or, a fast
 * liar, every link it probes at the wire's bound). */
#include <errno.h>
#include <time.h>

#include "proto/rdzv-preflight.h"
#include "tests/tap.h"

#define FAST 1000.0
#define NONE UINT32_MAX

struct sim {
    uint32_t n;
    double nic[1000];
    bool dead[1000];
    uint32_t liar;      /* NONE, or the node that lies */
    uint32_t liar_slot; /* it lies from this slot on (0: always; 3: in round 2 only) */
    uint32_t liar_end;  /* and up to this slot (3: in round 1 only) */
    double noise;       /* figures vary by up to this fraction, from a fixed sequence */
    bool liar_fast;     /* the liar reports the links it probes at RDZV_PF_MBPS_MAX */
    bool one_host;      /* nodes 0 and 1 share a host: their link is ten times as fast */
};

static struct rdzv_pf_node nodes[1000];
static struct rdzv_pf_link links[1000 / 2 + 2 + 1000];
static uint64_t rng = 88172645463325252ull;

static double random01(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static void sim_init(struct sim *s, uint32_t n)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->liar = NONE;
    s->liar_end = 99;
    for (uint32_t i = 0; i < n; i++)
        s->nic[i] = FAST;
}

static void measure(const struct sim *s, struct rdzv_pf_link *l)
{
    double f = s->nic[l->a] < s->nic[l->b] ? s->nic[l->a] : s->nic[l->b];

    if (s->dead[l->a] || s->dead[l->b]) {
        l->ab = l->ba = RDZV_PF_UNREACHABLE;
        return;
    }
    if (s->one_host && l->a + l->b == 1)
        f = 10 * FAST;
    if (s->liar_fast && l->a == s->liar && l->slot >= s->liar_slot && l->slot < s->liar_end) {
        l->ab = l->ba = RDZV_PF_MBPS_MAX;
        return;
    }
    if (!s->liar_fast && (l->a == s->liar || l->b == s->liar) && l->slot >= s->liar_slot &&
        l->slot < s->liar_end)
        f = 0.5;
    l->ab = f * (1 - s->noise * random01());
    l->ba = f * (1 - s->noise * random01());
}

/* Both rounds and the verdict; returns how many nodes are bad. */
static uint32_t run(const struct sim *s, double *median)
{
    size_t k = rdzv_pf_round1(s->n, links), k2;
    uint32_t bad = 0;

    ASSERT_LE(k, rdzv_pf_round1_max(s->n));
    for (size_t i = 0; i < k; i++)
        measure(s, &links[i]);
    ASSERT_OK(rdzv_pf_judge(s->n, links, k, RDZV_PF_FRACTION_DEFAULT, nodes, NULL));
    k2 = rdzv_pf_round2(s->n, nodes, 3, links + k);
    ASSERT_LE(k2, s->n);
    for (size_t i = k; i < k + k2; i++)
        measure(s, &links[i]);
    ASSERT_OK(rdzv_pf_judge(s->n, links, k + k2, RDZV_PF_FRACTION_DEFAULT, nodes, median));
    for (uint32_t i = 0; i < s->n; i++)
        bad += nodes[i].bad;
    return bad;
}

static void test_round1_pairs_each_node_once_or_twice_in_a_trio(void)
{
    for (uint32_t n = 0; n <= 9; n++) {
        unsigned seen[9] = {0};
        size_t k = rdzv_pf_round1(n, links);

        for (size_t i = 0; i < k; i++) {
            seen[links[i].a]++;
            seen[links[i].b]++;
        }
        for (uint32_t i = 0; i < n; i++)
            ASSERT_EQ(seen[i], n == 1 ? 0 : (n % 2 && i >= n - 3) ? 2 : 1);
    }
}

static void test_one_slow_node_of_4(void)
{
    for (uint32_t slow = 0; slow < 4; slow++) {
        struct sim s;

        sim_init(&s, 4);
        s.nic[slow] = 1;
        ASSERT_EQ(run(&s, NULL), 1);
        ASSERT_TRUE(nodes[slow].bad);
        /* Round 1 alone tells the slow pair, not which of its nodes: nobody is convicted. */
        ASSERT_OK(rdzv_pf_judge(4, links, rdzv_pf_round1(4, links), 0.25, nodes, NULL));
        for (size_t i = 0; i < 2; i++)
            measure(&s, &links[i]);
        ASSERT_OK(rdzv_pf_judge(4, links, 2, 0.25, nodes, NULL));
        for (uint32_t i = 0; i < 4; i++)
            ASSERT_FALSE(nodes[i].bad);
    }
}

/* 3 nodes (round 1 is a trio), and other odd counts: the trio at the end. */
static void test_one_slow_node_of_3_and_odd_counts(void)
{
    for (uint32_t n = 3; n <= 11; n += 2)
        for (uint32_t slow = 0; slow < n; slow++) {
            struct sim s;

            sim_init(&s, n);
            s.nic[slow] = 2;
            ASSERT_EQ(run(&s, NULL), 1);
            ASSERT_TRUE(nodes[slow].bad);
        }
}

static void test_one_slow_node_of_1000_and_ten(void)
{
    struct sim s;
    double median;

    sim_init(&s, 1000);
    s.noise = 0.3;
    s.nic[517] = 3;
    ASSERT_EQ(run(&s, &median), 1);
    ASSERT_TRUE(nodes[517].bad);
    ASSERT_TRUE(median > 0.7 * FAST);
    /* Ten, two of them paired together in round 1 (6 and 7). */
    sim_init(&s, 1000);
    for (uint32_t i = 0; i < 10; i++)
        s.nic[i < 2 ? 6 + i : 97 * i + 3] = 1;
    ASSERT_EQ(run(&s, NULL), 10);
    ASSERT_TRUE(nodes[6].bad && nodes[7].bad && nodes[97 * 9 + 3].bad);
}

static void test_a_dead_node(void)
{
    uint32_t sizes[] = {3, 4, 1000};

    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        struct sim s;

        sim_init(&s, sizes[z]);
        s.dead[1] = true;
        ASSERT_EQ(run(&s, NULL), 1);
        ASSERT_TRUE(nodes[1].bad);
        ASSERT_EQ(nodes[1].best, 0);
    }
}

static void test_all_slow_flags_nobody(void)
{
    struct sim s;

    sim_init(&s, 1000);
    s.noise = 0.6; /* every link between 0.4 and 1 of 2 MB/s */
    for (uint32_t i = 0; i < 1000; i++)
        s.nic[i] = 2;
    ASSERT_EQ(run(&s, NULL), 0);
    /* No link measured at all: the median is 0, nobody can be told from the rest. */
    sim_init(&s, 4);
    for (uint32_t i = 0; i < 4; i++)
        s.dead[i] = true;
    ASSERT_EQ(run(&s, NULL), 0);
    /* Two nodes: one link, nothing to compare it with. */
    sim_init(&s, 2);
    s.nic[0] = 1;
    ASSERT_EQ(run(&s, NULL), 0);
}

/* A liar reports its links slow: it gets itself put aside, never its peer. */
static void test_a_liar_convicts_itself_not_its_peer(void)
{
    struct sim s;

    for (uint32_t liar = 0; liar < 4; liar++) {
        sim_init(&s, 4);
        s.liar = liar;
        ASSERT_EQ(run(&s, NULL), 1);
        ASSERT_TRUE(nodes[liar].bad);
        ASSERT_FALSE(nodes[liar ^ 1].bad);
        /* Lying in round 1 only: round 2 clears both. */
        s.liar_end = 3;
        ASSERT_EQ(run(&s, NULL), 0);
    }
    /* A fine node lies in round 2 about a suspect whose round-1 peer (1) is truly slow: the
     * suspect (0) is not convicted; the slow node may go free this time, nobody else is bad. */
    sim_init(&s, 6);
    s.nic[1] = 1;
    s.liar = 2;
    s.liar_slot = 3;
    run(&s, NULL);
    ASSERT_FALSE(nodes[0].bad);
    ASSERT_FALSE(nodes[2].bad);
    ASSERT_FALSE(nodes[3].bad);
}

/* A liar that reports the links it probes as fast as a figure may be raises its own fastest
 * link and its peer's: in a job of four, the median of round 1. It convicts nobody: the other
 * pair's links, and their links to it in round 2, are judged against the median of what each
 * prober measured, one figure a node. (A trio has two probers: there a fast liar's claim is
 * half the figures, a known limit.) */
static void test_a_fast_liar_convicts_nobody(void)
{
    for (uint32_t n = 4; n <= 9; n++)
        for (uint32_t liar = 0; liar < n; liar++) {
            struct sim s;

            sim_init(&s, n);
            s.liar = liar;
            s.liar_fast = true;
            snprintf(tap_note, sizeof(tap_note), "n %u, fast liar %u", n, liar);
            ASSERT_EQ(run(&s, NULL), 0);
        }
    tap_note[0] = 0;
}

/* A slow rack: a third of the nodes slow, two of them paired in round 1 (9 nodes: 0, 1 and the
 * trio's last; 7: 2, 3 and the last). Every slow node is found: in a job past
 * RDZV_PF_SMALL_JOB the median is round 1's, which the fine nodes hold. */
static void test_a_third_of_the_nodes_slow_are_all_found(void)
{
    const uint32_t slow9[] = {0, 1, 8}, slow7[] = {2, 3, 6};

    for (int k = 0; k < 2; k++) {
        uint32_t n = k ? 7 : 9;
        const uint32_t *slow = k ? slow7 : slow9;
        struct sim s;

        sim_init(&s, n);
        for (int i = 0; i < 3; i++)
            s.nic[slow[i]] = 0.1 * FAST;
        snprintf(tap_note, sizeof(tap_note), "n %u", n);
        ASSERT_EQ(run(&s, NULL), 3);
        for (int i = 0; i < 3; i++)
            ASSERT_TRUE(nodes[slow[i]].bad);
    }
    tap_note[0] = 0;
}

/* A dead node leaves fewer figures of round 1, so that a fast pair on one host, or a node that
 * claims fast links, is half of them in a job of 6 or 7: no honest node is put aside. */
static void test_a_fast_pair_and_a_dead_node_convict_no_honest_node(void)
{
    for (uint32_t n = 6; n <= 7; n++)
        for (uint32_t dead = 0; dead < n; dead++)
            for (uint32_t liar = 0; liar <= n; liar++) { /* n: no liar, nodes 0 and 1 on a host */
                struct sim s;

                if (liar == dead || (liar == n && dead < 2))
                    continue;
                sim_init(&s, n);
                s.dead[dead] = true;
                if (liar < n) {
                    s.liar = liar;
                    s.liar_fast = true;
                } else {
                    s.one_host = true;
                }
                snprintf(tap_note, sizeof(tap_note), "n %u, dead %u, %s %u", n, dead,
                         liar < n ? "fast liar" : "one host", liar);
                run(&s, NULL);
                for (uint32_t i = 0; i < n; i++)
                    if (i != dead && i != liar)
                        ASSERT_FALSE(nodes[i].bad);
            }
    tap_note[0] = 0;
}

/* Two nodes of four on one host (their link ten times the others'): the other two are fine. */
static void test_a_fast_pair_on_one_host_convicts_nobody(void)
{
    for (uint32_t n = 4; n <= 7; n++) {
        struct sim s;

        sim_init(&s, n);
        s.one_host = true;
        snprintf(tap_note, sizeof(tap_note), "n %u", n);
        ASSERT_EQ(run(&s, NULL), 0);
    }
    tap_note[0] = 0;
}

static void link_fig(struct rdzv_pf_link *l, uint32_t a, uint32_t b, double mbps)
{
    *l = (struct rdzv_pf_link){.a = a, .b = b, .ab = mbps, .ba = mbps};
}

/* The rule itself, on links made by hand (a round 2 that found one fine node only): node 0's
 * slow link to a fine node (2, which may lie) and its slow link to a node fine nowhere (1) are
 * not two independent links; nobody is convicted. */
static void test_one_slow_link_to_a_fine_node_convicts_nobody(void)
{
    struct rdzv_pf_link l[6];
    double median;

    link_fig(&l[0], 0, 1, 1);
    link_fig(&l[1], 2, 3, FAST);
    link_fig(&l[2], 4, 5, FAST);
    link_fig(&l[3], 6, 7, FAST);
    link_fig(&l[4], 0, 2, 1);
    ASSERT_OK(rdzv_pf_judge(8, l, 5, 0.25, nodes, &median));
    ASSERT_EQ(median, FAST);
    for (uint32_t i = 0; i < 8; i++)
        ASSERT_FALSE(nodes[i].bad);
    ASSERT_EQ(nodes[0].convicting, 1);
    /* A second slow link, to another fine node (4), convicts it. */
    link_fig(&l[5], 0, 4, RDZV_PF_UNREACHABLE);
    ASSERT_OK(rdzv_pf_judge(8, l, 6, 0.25, nodes, NULL));
    ASSERT_TRUE(nodes[0].bad);
    ASSERT_FALSE(nodes[1].bad || nodes[2].bad || nodes[4].bad);
    /* Bad input: a node index out of range, a fraction outside (0, 1). */
    ASSERT_EQ(rdzv_pf_judge(4, l, 6, 0.25, nodes, NULL), -EINVAL);
    ASSERT_EQ(rdzv_pf_judge(8, l, 6, 1.0, nodes, NULL), -EINVAL);
}

/* Round 2's links for the suspects, then the verdict over both rounds; each link of round 2
 * unreachable when it touches node dead, else fast. */
static void round2_then_judge(uint32_t n, size_t k, uint32_t dead, double *median)
{
    size_t k2;

    ASSERT_OK(rdzv_pf_judge(n, links, k, 0.25, nodes, NULL));
    k2 = rdzv_pf_round2(n, nodes, 3, links + k);
    for (size_t i = k; i < k + k2; i++) {
        ASSERT_TRUE(links[i].round2);
        links[i].ab = links[i].ba =
            links[i].a == dead || links[i].b == dead ? RDZV_PF_UNREACHABLE : FAST;
    }
    ASSERT_OK(rdzv_pf_judge(n, links, k + k2, 0.25, nodes, median));
}

/* Node 1 is dead, and the honest link 2-3 did not connect in time (a busy machine). The median
 * leaves out the nodes that reached nobody, so it is the fast links' figure, not 0: round 2
 * pairs the suspects with fine nodes, and the dead node alone is put aside. */
static void test_a_dead_link_does_not_zero_the_median(void)
{
    double median = 0;

    link_fig(&links[0], 0, 1, RDZV_PF_UNREACHABLE);
    link_fig(&links[1], 2, 3, RDZV_PF_UNREACHABLE);
    link_fig(&links[2], 4, 5, FAST);
    ASSERT_OK(rdzv_pf_judge(6, links, 3, 0.25, nodes, &median));
    ASSERT_EQ(median, FAST);
    round2_then_judge(6, 3, 1, &median);
    ASSERT_EQ(median, FAST);
    for (uint32_t i = 0; i < 6; i++)
        ASSERT_EQ(nodes[i].bad, i == 1);
}

/* An unreachable link between two nodes that are fast elsewhere convicts neither, in round 1
 * or round 2, and does not lower the median. */
static void test_an_unreachable_link_between_fine_nodes_convicts_neither(void)
{
    double median = 0;

    /* Round 1's 0-1 did not connect; round 2 pairs 0 and 1 with 2 and 3, and 1-2 fails too. */
    link_fig(&links[0], 0, 1, RDZV_PF_UNREACHABLE);
    link_fig(&links[1], 2, 3, FAST);
    link_fig(&links[2], 0, 2, FAST);
    link_fig(&links[3], 1, 3, 0.9 * FAST);
    link_fig(&links[4], 0, 3, FAST);
    link_fig(&links[5], 1, 2, RDZV_PF_UNREACHABLE);
    ASSERT_OK(rdzv_pf_judge(4, links, 6, 0.25, nodes, &median));
    ASSERT_EQ(median, FAST);
    for (uint32_t i = 0; i < 4; i++)
        ASSERT_FALSE(nodes[i].bad);
    ASSERT_EQ(nodes[1].nfast, 1);
    /* Eight nodes, every link fast but one between two fine nodes: nobody. */
    for (uint32_t i = 0; i < 4; i++)
        link_fig(&links[i], 2 * i, 2 * i + 1, FAST);
    link_fig(&links[4], 1, 2, RDZV_PF_UNREACHABLE);
    link_fig(&links[5], 3, 4, RDZV_PF_UNREACHABLE);
    ASSERT_OK(rdzv_pf_judge(8, links, 6, 0.25, nodes, &median));
    ASSERT_EQ(median, FAST);
    for (uint32_t i = 0; i < 8; i++)
        ASSERT_FALSE(nodes[i].bad);
}

/* The trio of issue 75: (0,1) 6.5 GB/s (its ends share a CPU), node 2's links 1.3 GB/s. Both
 * rounds find node 2 bad. The confirmation is node 2's full probe to node 0, then the reference
 * (0,1): alike, node 2 is cleared; a full probe far below the reference keeps it bad, and so does
 * no reference figure. A node not bad before stays fine whatever the full probes say. A dead
 * node (nothing reached) gets no full probe. */
static void test_the_confirmation_clears_only_a_node_that_measures_alike(void)
{
    struct rdzv_pf_link l[8];
    double median;
    size_t k;

    link_fig(&l[0], 0, 1, 6500);
    link_fig(&l[1], 1, 2, 1300);
    link_fig(&l[2], 0, 2, 1300);
    ASSERT_OK(rdzv_pf_judge(3, l, 3, 0.25, nodes, &median));
    ASSERT_TRUE(nodes[2].bad && !nodes[0].bad && !nodes[1].bad);
    k = rdzv_pf_confirm(3, nodes, NULL, 3, &l[3]);
    ASSERT_EQ(k, 2);
    ASSERT_TRUE(l[3].a == 2 && l[3].b == 0 && l[3].slot == 3 && l[3].confirm == 1);
    ASSERT_TRUE(l[4].a == 0 && l[4].b == 1 && l[4].slot == 4 && l[4].confirm == 2);
    l[3].ab = l[3].ba = 1400;
    l[4].ab = l[4].ba = 2100;
    ASSERT_OK(rdzv_pf_judge(3, l, 5, 0.25, nodes, &median));
    ASSERT_TRUE(!nodes[2].bad && nodes[2].cleared);
    ASSERT_TRUE(median == 6500);
    l[3].ab = l[3].ba = 1.0; /* shaped: 1 MB/s */
    ASSERT_OK(rdzv_pf_judge(3, l, 5, 0.25, nodes, NULL));
    ASSERT_TRUE(nodes[2].bad && !nodes[2].cleared);
    l[3].ab = l[3].ba = 1400;
    l[4].ab = RDZV_PF_UNREACHABLE; /* no reference: nothing cleared */
    ASSERT_OK(rdzv_pf_judge(3, l, 5, 0.25, nodes, NULL));
    ASSERT_TRUE(nodes[2].bad);
    l[4].ab = 1e6; /* a liar's reference keeps a conviction, never makes one */
    link_fig(&l[1], 1, 2, 6000);
    link_fig(&l[2], 0, 2, 6000);
    ASSERT_OK(rdzv_pf_judge(3, l, 5, 0.25, nodes, NULL));
    ASSERT_TRUE(!nodes[0].bad && !nodes[1].bad && !nodes[2].bad);
    link_fig(&l[1], 1, 2, RDZV_PF_UNREACHABLE); /* node 2 dead */
    link_fig(&l[2], 0, 2, RDZV_PF_UNREACHABLE);
    ASSERT_OK(rdzv_pf_judge(3, l, 3, 0.25, nodes, NULL));
    ASSERT_TRUE(nodes[2].bad && !nodes[2].reached);
    ASSERT_EQ(rdzv_pf_confirm(3, nodes, NULL, 3, &l[3]), 0);
}

/* One machine's links share its CPUs: round 2's, fewer at a time, measure faster than round
 * 1's (figures of rendezvous-preflight-net, node 2 shaped). The yardstick is round 1's median,
 * so the honest node 0, whose links are round 1's speed, is not slow against round 2's. */
static void test_round_2s_faster_links_do_not_raise_the_median(void)
{
    double median = 0;

    link_fig(&links[0], 0, 1, 1485);
    link_fig(&links[1], 2, 3, 1.0);
    link_fig(&links[2], 2, 0, 0.2);
    link_fig(&links[3], 3, 1, 6362);
    link_fig(&links[4], 2, 1, 0.9);
    link_fig(&links[5], 3, 0, 1334);
    for (int i = 2; i < 6; i++)
        links[i].round2 = true;
    ASSERT_OK(rdzv_pf_judge(4, links, 6, 0.25, nodes, &median));
    ASSERT_EQ(median, 1485);
    for (uint32_t i = 0; i < 4; i++)
        ASSERT_EQ(nodes[i].bad, i == 2);
    ASSERT_EQ(nodes[0].best, 1485);
}

/* A liar that also has a dead link: it convicts only itself (the dead node goes too, on its
 * own links), never the honest peer of its round 1. */
static void test_a_liar_and_a_dead_node_convict_only_themselves(void)
{
    for (uint32_t liar = 0; liar < 6; liar++) {
        struct sim s;

        sim_init(&s, 6);
        s.liar = liar;
        s.dead[liar < 3 ? 4 : 1] = true;
        snprintf(tap_note, sizeof(tap_note), "liar %u", liar);
        run(&s, NULL);
        for (uint32_t i = 0; i < 6; i++)
            if (i != liar && !s.dead[i])
                ASSERT_FALSE(nodes[i].bad);
    }
    tap_note[0] = 0;
}

/* Random jobs: some slow or dead nodes (a tenth at most) and one liar that lies from a random
 * slot. No node but the slow, the dead and the liar is ever bad; with no liar, every slow or
 * dead node is. */
static void test_random_jobs_convict_only_the_guilty(void)
{
    for (unsigned round = 0; round < 3000; round++) {
        struct sim s;
        uint32_t n = 2 + (uint32_t)(random01() * 300), nbad = (uint32_t)(random01() * n / 10);
        bool lies = random01() < 0.5;

        sim_init(&s, n);
        s.noise = 0.3;
        for (uint32_t i = 0; i < nbad; i++) {
            uint32_t j = (uint32_t)(random01() * n);

            if (random01() < 0.3)
                s.dead[j] = true;
            else
                s.nic[j] = random01() * 0.1 * FAST;
        }
        if (lies) {
            s.liar = (uint32_t)(random01() * n);
            s.liar_slot = (uint32_t)(random01() * 5);
            s.liar_fast = random01() < 0.5;
        }
        snprintf(tap_note, sizeof(tap_note), "round %u: n %u, liar %u from slot %u", round, n,
                 s.liar, s.liar_slot);
        run(&s, NULL);
        for (uint32_t i = 0; i < n; i++) {
            bool guilty = s.dead[i] || s.nic[i] < 0.25 * 0.7 * FAST || i == s.liar;

            if (!guilty)
                ASSERT_FALSE(nodes[i].bad);
            else if (!lies)
                ASSERT_TRUE(nodes[i].bad);
        }
    }
    tap_note[0] = 0;
}

static double seconds(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* 1,000 nodes: both rounds' pairing and both verdicts, well under a millisecond each. */
static void test_1000_nodes_time(void)
{
    struct sim s;
    double t0, dt;

    sim_init(&s, 1000);
    s.nic[10] = 1;
    s.dead[500] = true;
    t0 = seconds();
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(run(&s, NULL), 2);
    dt = (seconds() - t0) / 1000;
    printf("# 1,000 nodes: pairing and verdict of both rounds in %.1f us\n", dt * 1e6);
    ASSERT_TRUE(dt < 0.01);
}

int main(void)
{
    TEST(test_round1_pairs_each_node_once_or_twice_in_a_trio);
    TEST(test_one_slow_node_of_4);
    TEST(test_one_slow_node_of_3_and_odd_counts);
    TEST(test_one_slow_node_of_1000_and_ten);
    TEST(test_a_dead_node);
    TEST(test_all_slow_flags_nobody);
    TEST(test_a_liar_convicts_itself_not_its_peer);
    TEST(test_a_fast_liar_convicts_nobody);
    TEST(test_a_fast_pair_on_one_host_convicts_nobody);
    TEST(test_a_third_of_the_nodes_slow_are_all_found);
    TEST(test_a_fast_pair_and_a_dead_node_convict_no_honest_node);
    TEST(test_one_slow_link_to_a_fine_node_convicts_nobody);
    TEST(test_a_dead_link_does_not_zero_the_median);
    TEST(test_an_unreachable_link_between_fine_nodes_convicts_neither);
    TEST(test_a_liar_and_a_dead_node_convict_only_themselves);
    TEST(test_round_2s_faster_links_do_not_raise_the_median);
    TEST(test_the_confirmation_clears_only_a_node_that_measures_alike);
    TEST(test_random_jobs_convict_only_the_guilty);
    TEST(test_1000_nodes_time);
    return tap_done();
}
