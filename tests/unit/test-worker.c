/* SPDX-License-Identifier: Apache-2.0 */
/* test-worker.c: the worker lines (proto/rdzv-worker.h, proto/WORKER.md): progress lines and
 * control lines format and parse back to the same values, at the edges of every field, and the
 * parsers refuse what the format does not allow. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../tap.h"
#include "proto/rdzv-worker.h"

static void progress_round_trip(const struct rdzv_progress_line *p, const char *want)
{
    char buf[RDZV_PROGRESS_ERROR_LINE_MAX + 2];
    struct rdzv_progress_line q;
    int n = rdzv_progress_format(p, buf, sizeof(buf));

    ASSERT_EQ(n, (int)strlen(want));
    ASSERT_BYTES_STR(buf, (size_t)n, want);
    ASSERT_EQ(buf[n - 1], '\n');
    ASSERT_OK(rdzv_progress_parse(buf, (size_t)n - 1, &q));
    ASSERT_EQ(q.kind, p->kind);
    if (p->kind == RDZV_PROGRESS_STEP) {
        ASSERT_EQ(q.step, p->step);
        ASSERT_EQ(q.has_compute, p->has_compute);
        ASSERT_EQ(q.compute_ms, p->has_compute ? p->compute_ms : 0);
    }
}

/* "step N compute_ms M": a step's compute time, optional; bounded; the old line still reads. */
static void test_progress_compute(void)
{
    struct rdzv_progress_line p = {0};
    char buf[RDZV_PROGRESS_LINE_MAX + 2];

    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP, .step = 7,
                                                     .has_compute = true, .compute_ms = 0},
                        "step 7 compute_ms 0\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP, .step = 812,
                                                     .has_compute = true, .compute_ms = 153},
                        "step 812 compute_ms 153\n");
    /* The longest such line still fits the channel's line. */
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP,
                                                     .step = UINT64_MAX, .has_compute = true,
                                                     .compute_ms = RDZV_COMPUTE_MS_MAX},
                        "step 18446744073709551615 compute_ms 3600000\n");
    ASSERT_EQ(rdzv_progress_format(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP,
                                                                .has_compute = true,
                                                                .compute_ms =
                                                                    RDZV_COMPUTE_MS_MAX + 1},
                                   buf, sizeof(buf)),
              -EINVAL);
    ASSERT_OK(rdzv_progress_parse("step 9", 6, &p));
    ASSERT_EQ(p.step, 9);
    ASSERT_FALSE(p.has_compute);
    /* Refused: past the bound, another word, spacing, sign, missing number, on another kind. */
    static const char *const bad[] = {
        "step 1 compute_ms 3600001", "step 1 compute_ms 18446744073709551616",
        "step 1 compute_ms", "step 1 compute_ms ", "step 1 compute_ms -1",
        "step 1 compute_ms +1", "step 1 compute_ms  1", "step 1 compute_ms 1 ",
        "step 1 compute_ms 1x", "step 1 compute 1", "step 1  compute_ms 1",
        "step compute_ms 1", "step  compute_ms 1", "slow 5 compute_ms 1", "wait compute_ms 1",
        "step 1 compute_ms 1 compute_ms 1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_progress_parse(bad[i], strlen(bad[i]), &p), -EINVAL);
    /* A refused line leaves *p as it was. */
    ASSERT_EQ(p.step, 9);
}

static void test_progress(void)
{
    struct rdzv_progress_line p;
    char small[6];

    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP, .step = 0},
                        "step 0\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP, .step = 812},
                        "step 812\n");
    progress_round_trip(
        &(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STEP, .step = UINT64_MAX},
        "step 18446744073709551615\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_WAIT}, "wait\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_STACKS}, "stacks\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_DONE}, "done\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_CONTROL},
                        "control\n");
    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_SLOW, .step = 600},
                        "slow 600\n");
    progress_round_trip(
        &(struct rdzv_progress_line){.kind = RDZV_PROGRESS_SLOW, .step = RDZV_PROGRESS_SLOW_MAX},
        "slow 604800\n");
    ASSERT_EQ(rdzv_progress_format(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_SLOW},
                                   small, sizeof(small)),
              -EINVAL);
    ASSERT_EQ(rdzv_progress_format(&(struct rdzv_progress_line){.kind = 7}, small, sizeof(small)),
              -EINVAL);
    ASSERT_EQ(rdzv_progress_format(&(struct rdzv_progress_line){.step = 12}, small, sizeof(small)),
              -ENOSPC);
    /* Not the format: sign, spaces, overflow, other words, prefixes. */
    static const char *const bad[] = {
        "step",      "step ",   "step -1", "step +1",
        "step  1",   "step 1 ", "step 1x", "step 18446744073709551616",
        "Step 1",    "wait ",   "waiting", "",
        "step 0x10", "stacks ", "stack",   "done ",
        "Done",      "don",     "slow 0",  "slow 604801",
        "slow",      "slow x",  "control ", "Control",
        "contro",    "error",   "error ",  "error a\tb",
        "Error x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_progress_parse(bad[i], strlen(bad[i]), &p), -EINVAL);
    /* The length is n, not the NUL: "step 12" cut to "step 1". */
    ASSERT_OK(rdzv_progress_parse("step 12", 6, &p));
    ASSERT_EQ(p.step, 1);
}

/* "error TEXT": the error a worker dies of, said before it exits (rdzv-agent's Python hooks):
 * 1 to 255 bytes of text, no control character. */
static void test_progress_error(void)
{
    static const char boom[] = "RuntimeError: shapes do not match (train.py:42)";
    char text[RDZV_PROGRESS_ERROR_MAX + 2], line[RDZV_PROGRESS_ERROR_LINE_MAX + 2];
    struct rdzv_progress_line p;

    progress_round_trip(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_ERROR, .text = boom,
                                                     .text_len = strlen(boom)},
                        "error RuntimeError: shapes do not match (train.py:42)\n");
    ASSERT_OK(rdzv_progress_parse("error x y", 9, &p));
    ASSERT_TRUE(p.kind == RDZV_PROGRESS_ERROR && p.text_len == 3 && memcmp(p.text, "x y", 3) == 0);
    memset(text, 'e', sizeof(text));
    snprintf(line, sizeof(line), "error %.*s", RDZV_PROGRESS_ERROR_MAX, text);
    ASSERT_OK(rdzv_progress_parse(line, strlen(line), &p)); /* 255 bytes: the most */
    ASSERT_EQ(p.text_len, RDZV_PROGRESS_ERROR_MAX);
    snprintf(line, sizeof(line), "error %.*s", RDZV_PROGRESS_ERROR_MAX + 1, text);
    ASSERT_EQ(rdzv_progress_parse(line, strlen(line), &p), -EINVAL);
    ASSERT_EQ(rdzv_progress_format(&(struct rdzv_progress_line){.kind = RDZV_PROGRESS_ERROR,
                                                                .text = "a\nb", .text_len = 3},
                                   line, sizeof(line)),
              -EINVAL);
}

static void gen_round_trip(const struct rdzv_worker_gen *g)
{
    char buf[RDZV_WORKER_LINE_MAX];
    struct rdzv_worker_gen q;
    int n = rdzv_worker_gen_format(g, buf, sizeof(buf));

    ASSERT_TRUE(n > 0 && (size_t)n + 1 <= RDZV_WORKER_LINE_MAX && !memchr(buf, '\n', (size_t)n));
    ASSERT_EQ(rdzv_worker_gen_parse(buf, &q), 1);
    ASSERT_EQ(q.generation, g->generation);
    ASSERT_EQ(q.rank, g->rank);
    ASSERT_EQ(q.world, g->world);
    ASSERT_EQ(q.local_rank, g->local_rank);
    ASSERT_EQ(q.master_port, g->master_port);
    ASSERT_EQ(q.restart_count, g->restart_count);
    ASSERT_TRUE(strcmp(q.master_addr, g->master_addr) == 0);
    ASSERT_TRUE(strcmp(q.nccl_id, g->nccl_id) == 0);
}

static void test_control(void)
{
    struct rdzv_worker_gen g = {.generation = 7, .rank = 3, .world = 4, .local_rank = 1,
                                .master_addr = "10.0.0.1", .master_port = 29517,
                                .nccl_id = "abcd", .restart_count = 2};
    const char *want = "{\"op\":\"generation\",\"generation\":7,\"rank\":3,\"world_size\":4,"
                       "\"local_rank\":1,\"master_addr\":\"10.0.0.1\",\"master_port\":29517,"
                       "\"nccl_id\":\"abcd\",\"restart_count\":2}";
    char buf[RDZV_WORKER_LINE_MAX];
    int n = rdzv_worker_gen_format(&g, buf, sizeof(buf));

    ASSERT_EQ(n, (int)strlen(want));
    ASSERT_BYTES_STR(buf, (size_t)n, want);
    gen_round_trip(&g);
    /* The edges of every field: the largest the parser takes. */
    g.generation = INT64_MAX;
    g.world = 1u << 24;
    g.rank = g.world - 1;
    g.local_rank = 1u << 24;
    g.master_port = 65535;
    g.restart_count = UINT32_MAX;
    memset(g.master_addr, 'h', sizeof(g.master_addr) - 1);
    memset(g.nccl_id, 'f', sizeof(g.nccl_id) - 1);
    gen_round_trip(&g);
    /* No id: null, and back to "". */
    g = (struct rdzv_worker_gen){.world = 1, .master_addr = "h"};
    ASSERT_TRUE(rdzv_worker_gen_format(&g, buf, sizeof(buf)) > 0 &&
                strstr(buf, "\"nccl_id\":null"));
    gen_round_trip(&g);
    /* What the format cannot carry, and a buffer too small. */
    g.rank = 1;
    ASSERT_EQ(rdzv_worker_gen_format(&g, buf, sizeof(buf)), -EINVAL);
    g.rank = 0;
    strcpy(g.master_addr, "a\"b");
    ASSERT_EQ(rdzv_worker_gen_format(&g, buf, sizeof(buf)), -EINVAL);
    strcpy(g.master_addr, "a\\b");
    ASSERT_EQ(rdzv_worker_gen_format(&g, buf, sizeof(buf)), -EINVAL);
    strcpy(g.master_addr, "h");
    strcpy(g.nccl_id, "a\x01");
    ASSERT_EQ(rdzv_worker_gen_format(&g, buf, sizeof(buf)), -EINVAL);
    g.nccl_id[0] = '\0';
    ASSERT_EQ(rdzv_worker_gen_format(&g, buf, 20), -ENOSPC);
}

static void test_control_parse_refuses(void)
{
    struct rdzv_worker_gen g;
    static const char *const bad[] = {
        "not json", "[]", "{\"generation\":1}", "{\"op\":1}",
        /* rank >= world, world 0, port out of range, generation past INT64_MAX */
        "{\"op\":\"generation\",\"generation\":8,\"rank\":1,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":1}",
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":0,"
        "\"master_addr\":\"h\",\"master_port\":1}",
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":70000}",
        "{\"op\":\"generation\",\"generation\":9223372036854775808,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":1}",
        /* missing or empty address, a duplicate key, an id that is not a string */
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":1,\"master_port\":1}",
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"\",\"master_port\":1}",
        "{\"op\":\"generation\",\"generation\":8,\"generation\":9,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":1}",
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":1,\"nccl_id\":5}",
        "{\"op\":\"generation\",\"generation\":8,\"rank\":0,\"world_size\":1,"
        "\"master_addr\":\"h\",\"master_port\":1,\"restart_count\":-1}",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_worker_gen_parse(bad[i], &g), -EINVAL);
    /* Another op is for a later version: ignored, not an error. */
    ASSERT_EQ(rdzv_worker_gen_parse("{\"op\":\"later-op\",\"x\":1}", &g), 0);
}

int main(void)
{
    TEST(test_progress);
    TEST(test_progress_error);
    TEST(test_progress_compute);
    TEST(test_control);
    TEST(test_control_parse_refuses);
    return tap_done();
}
