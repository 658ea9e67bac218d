/* SPDX-License-Identifier: Apache-2.0 */
/* test-status.c: the status struct's codec (proto/rdzv-status.h): the exact JSON the encoder
 * writes (what STATUS_REPLY and /status.json carried before the struct), parse(encode(x)) == x,
 * and the bounds the decoder enforces. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-status.h"
#include "../tap.h"

static char err[512];

#define BODY(s) (const uint8_t *)(s), strlen(s)

/* A body the decoder must refuse with -EBADMSG and a reason that starts with prefix. */
static void assert_refused(const char *body, const char *prefix)
{
    struct rdzv_status st;

    err[0] = '\0';
    ASSERT_EQ(rdzv_status_parse(BODY(body), &st, err, sizeof(err)), -EBADMSG);
    rdzv_status_free(&st);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fprintf(stderr, "got: %s\n", err);
    ASSERT_EQ(strncmp(err, prefix, strlen(prefix)), 0);
}

/* One job with a spare node, a rank's progress, an event and an outcome. */
static void fill(struct rdzv_status *st)
{
    struct rdzv_status_job *j;
    struct rdzv_status_node *n;

    memset(st, 0, sizeof(*st));
    snprintf(st->daemon, sizeof(st->daemon), "rdzvd");
    snprintf(st->version, sizeof(st->version), "0.1.0");
    st->port = 29400;
    st->uptime_s = 1.5;
    st->jobs_left_out = 7;
    st->connections = 3;
    st->accepted = 4;
    st->protocol_errors = 1;
    st->requests = 10;
    st->main_store_keys = 2;
    ASSERT_OK(rdzv_status_alloc_jobs(st, 1));
    j = &st->jobs[0];
    snprintf(j->run_id, sizeof(j->run_id), "r");
    snprintf(j->state, sizeof(j->state), "ended");
    j->generation = 2;
    j->restart_count = 1;
    j->max_restarts = 3;
    j->min_nodes = 1;
    j->max_nodes = 2;
    j->nodes_in_generation = 1;
    j->world_size = 4;
    j->age_s = 2.5;
    ASSERT_OK(rdzv_status_alloc_nodes(j, 1));
    n = &j->nodes[0];
    snprintf(n->host, sizeof(n->host), "h");
    snprintf(n->node_id, sizeof(n->node_id), "n");
    n->node_rank = -1;
    n->workers = 4;
    n->last_heartbeat_age_s = 0.25;
    n->age_s = 2;
    n->spare = true;
    snprintf(n->state, sizeof(n->state), "spare");
    ASSERT_OK(rdzv_status_alloc_ranks(j, 1));
    j->ranks[0] =
        (struct rdzv_status_rank){.rank = 3, .node_rank = 0, .host = "h", .step = 7, .age_s = 0.5,
                                  .compute_ms = -1};
    j->ranks_left_out = 2;
    j->members_left_out = 5;
    j->n_events = 1;
    j->events[0].time = 100.5;
    snprintf(j->events[0].text, sizeof(j->events[0].text), "round 1");
    j->ended = true;
    snprintf(j->outcome_type, sizeof(j->outcome_type), "succeeded");
    snprintf(j->outcome_summary, sizeof(j->outcome_summary), "done");
    j->duration_s = 12.5;
    j->ended_age_s = 3;
}

#define EXPECTED                                                                                   \
    "{\"daemon\":\"rdzvd\",\"version\":\"0.1.0\",\"port\":29400,\"uptime_s\":1.5,\"stats\":"       \
    "{\"connections\":3,\"accepted\":4,\"rejected\":0,\"protocol_errors\":1,\"requests\":10,"      \
    "\"main_store_keys\":2},\"jobs\":[{\"run_id\":\"r\",\"state\":\"ended\",\"generation\":2,"     \
    "\"restart_count\":1,\"max_restarts\":3,\"min_nodes\":1,\"max_nodes\":2,"                      \
    "\"nodes_in_generation\":1,\"world_size\":4,\"age_s\":2.5,\"store_port\":0,\"nodes\":"         \
    "[{\"host\":\"h\",\"node_id\":\"n\",\"node_rank\":-1,\"workers\":4,"                           \
    "\"last_heartbeat_age_s\":0.25,\"age_s\":2.0,\"failures\":0,\"spare\":true,"                   \
    "\"connected\":false,\"state\":\"spare\"}],\"events\":[{\"time\":100.5,\"text\":"              \
    "\"round 1\"}],\"ranks\":[{\"rank\":3,\"node_rank\":0,\"host\":\"h\",\"step\":7,"              \
    "\"age_s\":0.5}],\"ranks_left_out\":2,\"members_left_out\":5,\"outcome\":{\"type\":"           \
    "\"succeeded\",\"exit_code\":0,\"summary\":\"done\",\"duration_s\":12.5,"              \
    "\"ended_age_s\":3.0}}],\"jobs_left_out\":7}"

/* The daemon's part, up to the jobs array; uptime_s an integer. */
#define NO_JOBS_HEAD                                                                               \
    "{\"daemon\":\"rdzvd\",\"version\":\"1\",\"port\":1,\"uptime_s\":3,\"stats\":"                 \
    "{\"connections\":0,\"accepted\":0,\"rejected\":0,\"protocol_errors\":0,\"requests\":0,"       \
    "\"main_store_keys\":0},\"jobs\":"

/* Member names and order as rdzvd wrote them before the struct (rdzvd_status_json). */
static void test_encode_bytes(void)
{
    struct rdzv_status st;
    struct rdzv_buf b = {0};
    const uint8_t *body = NULL;
    const char *why = NULL;
    uint32_t len = 0;
    uint8_t op = 0;

    fill(&st);
    ASSERT_OK(rdzv_status_put_reply(&b, &st));
    ASSERT_EQ(rdzv_frame_peek(rdzv_buf_head(&b), rdzv_buf_avail(&b), RDZV_MAX_MSG, &op, &body, &len,
                              &why),
              rdzv_buf_avail(&b));
    ASSERT_EQ(op, RDZV_MSG_STATUS_REPLY);
    ASSERT_BYTES_STR(body, len, EXPECTED);
    rdzv_buf_free(&b);
    rdzv_status_free(&st);
    ASSERT_EQ(st.n_jobs, 0);
    ASSERT_NULL(st.jobs);
}

static char *edit(const char *from, const char *to);

#define RANKS_MEMBERS                                                                              \
    ",\"ranks\":[{\"rank\":3,\"node_rank\":0,\"host\":\"h\",\"step\":7,\"age_s\":0.5}],"           \
    "\"ranks_left_out\":2"

static void test_round_trip(void)
{
    struct rdzv_status a, b;
    char *t1, *t2;
    json_t *o;

    fill(&a);
    ASSERT_OK(rdzv_status_parse(BODY(EXPECTED), &b, err, sizeof(err)));
    ASSERT_EQ(b.n_jobs, 1);
    ASSERT_EQ(b.jobs[0].n_nodes, 1);
    ASSERT_EQ(b.jobs[0].nodes[0].node_rank, -1);
    ASSERT_TRUE(b.jobs[0].nodes[0].spare);
    ASSERT_FALSE(b.jobs[0].nodes[0].connected);
    ASSERT_EQ(strcmp(b.jobs[0].nodes[0].state, "spare"), 0);
    ASSERT_EQ(b.jobs[0].n_events, 1);
    ASSERT_EQ(strcmp(b.jobs[0].events[0].text, "round 1"), 0);
    ASSERT_TRUE(b.jobs[0].ended);
    ASSERT_EQ(strcmp(b.jobs[0].outcome_summary, "done"), 0);
    ASSERT_TRUE(b.jobs[0].duration_s == 12.5 && b.jobs[0].ended_age_s == 3);
    ASSERT_EQ(b.jobs[0].generation, 2);
    ASSERT_EQ(b.jobs[0].n_ranks, 1);
    ASSERT_EQ(b.jobs[0].ranks[0].rank, 3);
    ASSERT_EQ(b.jobs[0].ranks[0].step, 7);
    ASSERT_TRUE(b.jobs[0].ranks[0].age_s == 0.5);
    ASSERT_EQ(strcmp(b.jobs[0].ranks[0].host, "h"), 0);
    ASSERT_EQ(b.jobs[0].ranks_left_out, 2);
    ASSERT_EQ(b.jobs[0].members_left_out, 5);
    ASSERT_EQ(b.jobs_left_out, 7);
    ASSERT_TRUE(b.uptime_s == 1.5);
    /* Re-encoding the decoded struct gives the same document (rdzvctl status --json). */
    o = rdzv_status_to_json(&b);
    ASSERT_NOT_NULL(o);
    t2 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    o = rdzv_status_to_json(&a);
    t1 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_NOT_NULL(t1);
    ASSERT_NOT_NULL(t2);
    ASSERT_EQ(strcmp(t1, t2), 0);
    free(t1);
    free(t2);
    rdzv_status_free(&a);
    rdzv_status_free(&b);

    /* 1.5: a rank's progress timeout, written only when it has one. */
    t1 = edit("\"age_s\":0.5}]", "\"age_s\":0.5,\"timeout_s\":2.5}]");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_TRUE(b.jobs[0].ranks[0].timeout_s == 2.5);
    ASSERT_EQ(b.jobs[0].ranks[0].compute_ms, -1); /* none said */
    o = rdzv_status_to_json(&b);
    t2 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t2 && strstr(t2, "\"age_s\":0.5,\"timeout_s\":2.5}") != NULL);
    free(t2);
    rdzv_status_free(&b);
    free(t1);
    t1 = edit("\"age_s\":0.5}]", "\"age_s\":0.5,\"timeout_s\":-1}]");
    ASSERT_EQ(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)), -EBADMSG);
    rdzv_status_free(&b);
    free(t1);

    /* A rank's compute time, written only when it has one; bounded. */
    t1 = edit("\"age_s\":0.5}]", "\"age_s\":0.5,\"compute_ms\":153}]");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs[0].ranks[0].compute_ms, 153);
    o = rdzv_status_to_json(&b);
    t2 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t2 && strstr(t2, "\"age_s\":0.5,\"compute_ms\":153}") != NULL);
    free(t2);
    rdzv_status_free(&b);
    free(t1);
    t1 = edit("\"age_s\":0.5}]", "\"age_s\":0.5,\"compute_ms\":3600001}]");
    ASSERT_EQ(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)), -EBADMSG);
    rdzv_status_free(&b);
    free(t1);

    /* ... and per node, its slowest rank's. */
    t1 = edit("\"state\":\"spare\"}]", "\"state\":\"spare\",\"compute_ms\":90}]");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs[0].nodes[0].compute_ms, 90);
    o = rdzv_status_to_json(&b);
    t2 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t2 && strstr(t2, "\"state\":\"spare\",\"compute_ms\":90}") != NULL);
    free(t2);
    rdzv_status_free(&b);
    free(t1);
    t1 = edit("\"state\":\"spare\"}]", "\"state\":\"spare\",\"compute_ms\":-1}]");
    ASSERT_EQ(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)), -EBADMSG);
    rdzv_status_free(&b);
    free(t1);

    /* An older daemon writes no "ranks" nor "ranks_left_out": none. */
    t1 = edit(RANKS_MEMBERS, "");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    free(t1);
    ASSERT_EQ(b.jobs[0].n_ranks, 0);
    ASSERT_NULL(b.jobs[0].ranks);
    ASSERT_EQ(b.jobs[0].ranks_left_out, 0);
    rdzv_status_free(&b);

    /* An older daemon writes no "members_left_out" nor "jobs_left_out": 0. */
    t1 = edit(",\"members_left_out\":5", "");
    t2 = edit(",\"jobs_left_out\":7", "");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs[0].members_left_out, 0);
    rdzv_status_free(&b);
    ASSERT_OK(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs_left_out, 0);
    rdzv_status_free(&b);
    free(t1);
    free(t2);

    /* An older daemon writes no duration: -1, not known. */
    t1 = edit(",\"duration_s\":12.5,\"ended_age_s\":3.0", "");
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_TRUE(b.jobs[0].ended && b.jobs[0].duration_s == -1 && b.jobs[0].ended_age_s == -1);
    rdzv_status_free(&b);
    free(t1);

    /* No jobs; integer where a real is written is accepted. */
    ASSERT_OK(rdzv_status_parse(BODY(NO_JOBS_HEAD "[]}"), &b, err, sizeof(err)));
    ASSERT_EQ(b.n_jobs, 0);
    ASSERT_TRUE(b.uptime_s == 3);
    rdzv_status_free(&b);
}

/* EXPECTED with the text between the first `from` and the end of that member replaced. */
static char *edit(const char *from, const char *to)
{
    const char *p = strstr(EXPECTED, from);
    size_t n = strlen(EXPECTED) + strlen(to) + 1;
    char *s = malloc(n);

    ASSERT_NOT_NULL(p);
    ASSERT_NOT_NULL(s);
    snprintf(s, n, "%.*s%s%s", (int)(p - EXPECTED), EXPECTED, to, p + strlen(from));
    return s;
}

/* A JSON array of n copies of item. */
static char *array_of(size_t n, const char *item)
{
    size_t il = strlen(item), cap = 3 + n * (il + 1);
    char *s = malloc(cap), *p = s;

    ASSERT_NOT_NULL(s);
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, item, il);
        p += il;
    }
    *p++ = ']';
    *p = '\0';
    return s;
}

/* EXPECTED with from replaced by to must be refused with a reason starting with prefix. */
static void assert_edit_refused(const char *from, const char *to, const char *prefix)
{
    char *s = edit(from, to);

    assert_refused(s, prefix);
    free(s);
}

/* The same with to = before, an array of n copies of item, after (a count past a limit). */
static void assert_array_refused(const char *from, const char *before, size_t n, const char *item,
                                 const char *after, const char *prefix)
{
    char *arr = array_of(n, item);
    size_t cap = strlen(before) + strlen(arr) + strlen(after) + 1;
    char *t = malloc(cap);

    ASSERT_NOT_NULL(t);
    snprintf(t, cap, "%s%s%s", before, arr, after);
    assert_edit_refused(from, t, prefix);
    free(t);
    free(arr);
}

/* A job's nodes put aside ("put_aside", "put_aside_total") and the daemon's count of
 * them by reason ("nodes_put_aside"), absent while there are none: they round-trip, their node
 * ids are hidden like the members', and values out of range are refused. */
static void test_put_aside_round_trip(void)
{
    const char *aside = "\"members_left_out\":5,\"put_aside\":[{\"node_id\":\"n9\",\"host\":"
                        "\"h9\",\"failures\":2,\"reason\":\"its workers failed 2 times\"}],"
                        "\"put_aside_total\":3";
    struct rdzv_status b;
    char *t1, *t2, *t3;
    json_t *o;

    t1 = edit("\"members_left_out\":5", aside);
    t2 = malloc(strlen(t1) + 64);
    ASSERT_NOT_NULL(t2);
    snprintf(t2, strlen(t1) + 64, "%.*s,\"nodes_put_aside\":{\"failures\":3,\"check\":1}}",
             (int)strlen(t1) - 1, t1);
    ASSERT_OK(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs[0].n_aside, 1);
    ASSERT_EQ(b.jobs[0].aside_total, 3);
    ASSERT_EQ(strcmp(b.jobs[0].aside[0].host, "h9"), 0);
    ASSERT_EQ(b.jobs[0].aside[0].failures, 2);
    ASSERT_EQ(b.put_aside_failures, 3);
    ASSERT_EQ(b.put_aside_check, 1);
    o = rdzv_status_to_json(&b);
    t3 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t3 && strstr(t3, aside) != NULL);
    /* (an older rdzvd's, without "straggler": read as 0, written with it) */
    ASSERT_TRUE(strstr(t3, "\"nodes_put_aside\":{\"failures\":3,\"check\":1,\"straggler\":0}") !=
                NULL);
    free(t3);
    rdzv_status_hide_node_ids(&b);
    ASSERT_EQ(b.jobs[0].aside[0].node_id[0], '\0');
    rdzv_status_free(&b);
    free(t2);
    /* fewer in all than listed, a negative count: refused */
    t2 = edit("\"members_left_out\":5", "\"members_left_out\":5,\"put_aside\":[{\"node_id\":"
              "\"n\",\"host\":\"h\",\"failures\":1,\"reason\":\"r\"}],\"put_aside_total\":0");
    ASSERT_EQ(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)), -EBADMSG);
    ASSERT_TRUE(strstr(err, "put_aside_total") != NULL);
    rdzv_status_free(&b);
    free(t2);
    t2 = edit("\"members_left_out\":5", "\"members_left_out\":5,\"put_aside\":[{\"node_id\":"
              "\"n\",\"host\":\"h\",\"failures\":-1,\"reason\":\"r\"}],\"put_aside_total\":1");
    ASSERT_EQ(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)), -EBADMSG);
    rdzv_status_free(&b);
    free(t2);
    free(t1);
}

/* A node put aside lists its GPUs ("gpu_uuids", at most RDZV_STATUS_ASIDE_GPUS, the rest
 * counted in "gpu_uuids_left_out"), absent when it has none: they round-trip, and a malformed
 * or too long list, or a negative count, is refused. */
static void test_put_aside_gpus_round_trip(void)
{
#define G(n) "\"GPU-00000000-0000-0000-0000-0000000000" #n "\""
    const char *aside = "\"members_left_out\":5,\"put_aside\":[{\"node_id\":\"n9\",\"host\":"
                        "\"h9\",\"failures\":2,\"reason\":\"r\",\"gpu_uuids\":[" G(10) "," G(11)
                        "],\"gpu_uuids_left_out\":3}],\"put_aside_total\":1";
    static const char *const bad[] = {
        "[\"GPU-1\"]", "[" G(10) "," G(10) "]", "7",
        "[" G(10) "," G(11) "," G(12) "," G(13) "," G(14) "," G(15) "," G(16) "," G(17) "," G(18)
        "," G(19) "," G(20) "," G(21) "," G(22) "," G(23) "," G(24) "," G(25) "," G(26) "]",
    };
    struct rdzv_status b;
    char *t1, *t3, *t2;
    json_t *o;

    t1 = edit("\"members_left_out\":5", aside);
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_EQ(b.jobs[0].aside[0].n_gpus, 2);
    ASSERT_EQ(b.jobs[0].aside[0].gpus_left_out, 3);
    ASSERT_EQ(b.jobs[0].aside[0].gpus[1].b[15], 0x11);
    o = rdzv_status_to_json(&b);
    t3 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t3 && strstr(t3, aside) != NULL);
    free(t3);
    rdzv_status_free(&b);
    free(t1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 1; i++) {
        char to[2048];

        if (i < sizeof(bad) / sizeof(bad[0]))
            snprintf(to, sizeof(to), "\"members_left_out\":5,\"put_aside\":[{\"node_id\":"
                     "\"n\",\"host\":\"h\",\"failures\":1,\"reason\":\"r\",\"gpu_uuids\":"
                     "%s}],\"put_aside_total\":1", bad[i]);
        else
            snprintf(to, sizeof(to), "\"members_left_out\":5,\"put_aside\":[{\"node_id\":"
                     "\"n\",\"host\":\"h\",\"failures\":1,\"reason\":\"r\","
                     "\"gpu_uuids_left_out\":-1}],\"put_aside_total\":1");
        t2 = edit("\"members_left_out\":5", to);
        ASSERT_EQ(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)), -EBADMSG);
        rdzv_status_free(&b);
        free(t2);
    }
#undef G
}

/* A job's timeline and steps per second, encoded and decoded back, and what the
 * decoder refuses in them. */
#define TIMELINE                                                                                   \
    "\"steps_per_second\":9.5,\"timeline\":{\"generations\":[{\"generation\":1,\"start\":100.0,"   \
    "\"end\":110.0,\"world_size\":4,\"nodes\":2},{\"generation\":2,\"start\":110.5,\"end\":0.0,"   \
    "\"world_size\":4,\"nodes\":2}],\"marks\":[{\"time\":110.0,\"generation\":1,\"kind\":"         \
    "\"node_lost\",\"text\":\"root cause: the agent of node rank 1 (b) disconnected\"},"           \
    "{\"time\":110.5,\"generation\":2,\"kind\":\"spare\",\"text\":\"1 node(s) taken in\"}],"       \
    "\"steps_per_second\":{\"start\":100.0,\"interval_s\":2.0,\"rates\":[10.0,9.5,0.0]},"          \
    "\"recoveries\":{\"total\":2,\"phase_sum_s\":{\"stop\":0.5,\"rendezvous\":0.25,"               \
    "\"nccl\":0.125,\"first_step\":1.0,\"total\":1.875},\"list\":[{\"generation\":1,"              \
    "\"kind\":\"node_lost\",\"inplace\":true,\"detected\":110.0,\"stopped\":110.5,"                \
    "\"rendezvous\":110.75,\"sent\":110.875,\"first_step\":111.875},{\"generation\":2,"            \
    "\"kind\":\"failure\",\"inplace\":false,\"detected\":120.0,\"stopped\":0.0,"                   \
    "\"rendezvous\":0.0,\"sent\":0.0,\"first_step\":0.0}]}}"

static void test_timeline_round_trip(void)
{
    const struct rdzv_status_timeline *tl;
    struct rdzv_status b;
    char *t1, *t2, *t3;
    json_t *o;

    t1 = edit("\"members_left_out\":5", "\"members_left_out\":5," TIMELINE);
    ASSERT_OK(rdzv_status_parse(BODY(t1), &b, err, sizeof(err)));
    ASSERT_TRUE(b.jobs[0].rate_known && b.jobs[0].steps_per_second == 9.5);
    tl = b.jobs[0].timeline;
    ASSERT_NOT_NULL(tl);
    ASSERT_EQ(tl->n_bands, 2);
    ASSERT_TRUE(tl->bands[1].generation == 2 && tl->bands[1].end == 0 && tl->bands[0].end == 110);
    ASSERT_EQ(tl->n_marks, 2);
    ASSERT_EQ(tl->marks[0].kind, RDZV_MARK_NODE_LOST);
    ASSERT_EQ(tl->marks[1].kind, RDZV_MARK_SPARE);
    ASSERT_TRUE(tl->n_rates == 3 && tl->rates[1] == 9.5 && tl->rate_interval_s == 2);
    /* The recoveries: the first complete (in place), the second under way. */
    ASSERT_TRUE(tl->recoveries_total == 2 && tl->n_recoveries == 2);
    ASSERT_TRUE(tl->phase_sum_s[RDZV_RECOVERY_TOTAL] == 1.875 && tl->phase_sum_s[2] == 0.125);
    ASSERT_TRUE(tl->recoveries[0].inplace && tl->recoveries[0].kind == RDZV_MARK_NODE_LOST);
    ASSERT_TRUE(rdzv_recovery_phase_s(&tl->recoveries[0], 0) == 0.5);
    ASSERT_TRUE(rdzv_recovery_phase_s(&tl->recoveries[0], RDZV_RECOVERY_TOTAL) == 1.875);
    ASSERT_TRUE(rdzv_recovery_phase_s(&tl->recoveries[1], 0) == -1);
    ASSERT_TRUE(tl->recoveries[1].generation == 2 && tl->recoveries[1].t[0] == 120);
    o = rdzv_status_to_json(&b);
    t3 = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t3 && strstr(t3, TIMELINE) != NULL);
    free(t3);
    rdzv_status_free(&b);
    /* Without a rate reported: no steps_per_second; an older rdzvd: no timeline. */
    ASSERT_OK(rdzv_status_parse(BODY(EXPECTED), &b, err, sizeof(err)));
    ASSERT_TRUE(!b.jobs[0].rate_known && b.jobs[0].timeline == NULL);
    rdzv_status_free(&b);
    static const char *const bad[][2] = {
        {"\"rates\":[10.0,9.5,0.0]", "\"rates\":[10.0,-9.5,0.0]"},
        {"\"rates\":[10.0,9.5,0.0]", "\"rates\":[10.0,\"x\",0.0]"},
        {"\"interval_s\":2.0", "\"interval_s\":-2.0"},
        {"\"generation\":1,\"start\":100.0", "\"generation\":-1,\"start\":100.0"},
        {"\"steps_per_second\":9.5", "\"steps_per_second\":-3"},
        {"\"generations\":[", "\"generations\":{},\"x\":["},
        {"\"total\":2,", "\"total\":-2,"},
        {"\"stopped\":110.5", "\"stopped\":-110.5"},
        {"\"sent\":110.875", "\"sent\":\"soon\""},
        {"\"nccl\":0.125", "\"nccl\":1e300"},
        {"\"list\":[", "\"list\":{},\"y\":["},
        {"\"inplace\":true", "\"inplace\":1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *p = strstr(t1, bad[i][0]);

        ASSERT_NOT_NULL(p);
        t2 = malloc(strlen(t1) + strlen(bad[i][1]) + 1);
        ASSERT_NOT_NULL(t2);
        sprintf(t2, "%.*s%s%s", (int)(p - t1), t1, bad[i][1], p + strlen(bad[i][0]));
        ASSERT_EQ(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)), -EBADMSG);
        rdzv_status_free(&b);
        free(t2);
    }
    /* A mark or recovery of a kind a newer rdzvd knows is left out, the rest read. */
    {
        char *t5, *t4 = edit("\"members_left_out\":5", "\"members_left_out\":5," TIMELINE);
        t5 = strstr(t4, "\"kind\":\"node_lost\",\"text\"");
        ASSERT_NOT_NULL(t5);
        memcpy(t5, "\"kind\":\"meteor___\"", strlen("\"kind\":\"meteor___\""));
        ASSERT_OK(rdzv_status_parse(BODY(t4), &b, err, sizeof(err)));
        ASSERT_EQ(b.jobs[0].timeline->n_marks, 1);
        ASSERT_EQ(b.jobs[0].timeline->marks[0].kind, RDZV_MARK_SPARE);
        rdzv_status_free(&b);
        t5 = strstr(t4, "\"kind\":\"failure\"");
        ASSERT_NOT_NULL(t5);
        memcpy(t5, "\"kind\":\"xxxxxxx\"", strlen("\"kind\":\"xxxxxxx\""));
        ASSERT_OK(rdzv_status_parse(BODY(t4), &b, err, sizeof(err)));
        ASSERT_EQ(b.jobs[0].timeline->n_recoveries, 1);
        ASSERT_EQ(b.jobs[0].timeline->recoveries[0].kind, RDZV_MARK_NODE_LOST);
        rdzv_status_free(&b);
        free(t4);
    }
    /* More samples than a timeline holds. */
    {
        char rates[8 * (RDZV_STATUS_RATES + 2)] = "\"rates\":[1.0";
        char *p = strstr(t1, "\"rates\":[10.0,9.5,0.0]");

        for (int k = 0; k < RDZV_STATUS_RATES; k++)
            strcat(rates, ",1.0");
        t2 = malloc(strlen(t1) + strlen(rates) + 1);
        ASSERT_NOT_NULL(t2);
        sprintf(t2, "%.*s%s]%s", (int)(p - t1), t1, rates,
                p + strlen("\"rates\":[10.0,9.5,0.0]"));
        ASSERT_EQ(rdzv_status_parse(BODY(t2), &b, err, sizeof(err)), -EBADMSG);
        ASSERT_TRUE(strstr(err, "'rates' must be an array of at most 120") != NULL);
        rdzv_status_free(&b);
        free(t2);
    }
    free(t1);
}

static void test_refused(void)
{
    char big[RDZV_ID_MAX + 16], *s, *arr, *t;

    assert_refused("", "STATUS_REPLY: bad JSON");
    assert_refused("[]", "STATUS_REPLY: bad JSON");
    assert_refused("{\"daemon\":\"rdzvd\"}", "STATUS_REPLY: ");
    /* A missing member, a wrong type, deep inside: the reason says where. */
    s = edit("\"workers\":4,", "");
    assert_refused(s, "STATUS_REPLY: jobs[0]: nodes[0]: ");
    free(s);
    s = edit("\"text\":\"round 1\"", "\"text\":1");
    assert_refused(s, "STATUS_REPLY: jobs[0]: events[0]: ");
    free(s);
    s = edit("\"exit_code\":0", "\"exit_code\":\"0\"");
    assert_refused(s, "STATUS_REPLY: jobs[0]: outcome: ");
    free(s);
    s = edit("\"duration_s\":12.5", "\"duration_s\":-5");
    assert_refused(s, "STATUS_REPLY: jobs[0]: outcome: duration_s or ended_age_s out of range");
    free(s);
    s = edit("\"store_port\":0", "\"store_port\":70000");
    assert_refused(s, "STATUS_REPLY: jobs[0]: ");
    free(s);
    /* Strings longer than their field. */
    memset(big, 'x', RDZV_ID_MAX + 1);
    big[RDZV_ID_MAX + 1] = '\0';
    t = malloc(sizeof(big) + 16);
    ASSERT_NOT_NULL(t);
    snprintf(t, sizeof(big) + 16, "\"run_id\":\"%s\"", big);
    s = edit("\"run_id\":\"r\"", t);
    assert_refused(s, "STATUS_REPLY: jobs[0]: 'run_id' longer than");
    free(s);
    free(t);
    /* Counts past the limits. */
    assert_array_refused("\"events\":[{\"time\":100.5,\"text\":\"round 1\"}]",
                         "\"events\":", RDZV_STATUS_EVENTS + 1, "{\"time\":1.0,\"text\":\"e\"}", "",
                         "STATUS_REPLY: jobs[0]: 'events' must be an array of at most");
    assert_array_refused("\"nodes\":[{\"host\":\"h\",\"node_id\":\"n\",\"node_rank\":-1,"
                         "\"workers\":4,\"last_heartbeat_age_s\":0.25,\"age_s\":2.0,"
                         "\"failures\":0,\"spare\":true,\"connected\":false,"
                         "\"state\":\"spare\"}],\"events\"",
                         "\"nodes\":", RDZV_STATUS_MAX_NODES + 1, "{}", ",\"events\"",
                         "STATUS_REPLY: jobs[0]: 'nodes' must be an array of at most");
    /* Ranks: past the limit, out of range, a member missing. */
    assert_array_refused(RANKS_MEMBERS, ",\"ranks\":", RDZV_STATUS_MAX_RANKS + 1,
                         "{\"rank\":3,\"node_rank\":0,\"host\":\"h\",\"step\":7,\"age_s\":0.5}",
                         ",\"ranks_left_out\":2",
                         "STATUS_REPLY: jobs[0]: 'ranks' must be an array of at most");
    assert_edit_refused("\"step\":7", "\"step\":-1", "STATUS_REPLY: jobs[0]: ranks[0]: ");
    assert_edit_refused("\"age_s\":0.5", "\"age_s\":-0.5", "STATUS_REPLY: jobs[0]: ranks[0]: ");
    assert_edit_refused("\"members_left_out\":5", "\"members_left_out\":-1",
                        "STATUS_REPLY: jobs[0]: ");
    assert_edit_refused("\"jobs_left_out\":7", "\"jobs_left_out\":-1", "STATUS_REPLY: ");
    assert_edit_refused("\"rank\":3,", "", "STATUS_REPLY: jobs[0]: ranks[0]: ");
    assert_edit_refused("\"ranks_left_out\":2", "\"ranks_left_out\":-2", "STATUS_REPLY: jobs[0]: ");
    arr = array_of(RDZV_STATUS_MAX_JOBS + 1, "{}");
    t = malloc(strlen(arr) + sizeof(NO_JOBS_HEAD) + 4);
    ASSERT_NOT_NULL(t);
    sprintf(t, NO_JOBS_HEAD "%s}", arr);
    assert_refused(t, "STATUS_REPLY: 'jobs' must be an array of at most");
    free(t);
    free(arr);
}


/* "\"name\":\"xxx...\"" with n x's (a string member of n bytes). */
static char *member_of_len(const char *name, size_t n)
{
    size_t cap = strlen(name) + n + 8;
    char *s = malloc(cap);
    int k;

    ASSERT_NOT_NULL(s);
    k = snprintf(s, cap, "\"%s\":\"", name);
    memset(s + k, 'x', n);
    snprintf(s + k + n, cap - k - n, "\"");
    return s;
}

/* from replaced by name's member n bytes long must be refused with prefix. */
static void assert_long_refused(const char *from, const char *name, size_t n, const char *prefix)
{
    char *m = member_of_len(name, n);

    assert_edit_refused(from, m, prefix);
    free(m);
}

/* Every string field one byte past its limit, and every range, at each level. */
static void test_refused_fields(void)
{
    assert_long_refused("\"daemon\":\"rdzvd\"", "daemon", RDZV_STATUS_NAME_MAX + 1,
                        "STATUS_REPLY: 'daemon' longer than 15 bytes");
    assert_long_refused("\"version\":\"0.1.0\"", "version", RDZV_STATUS_VERSION_MAX + 1,
                        "STATUS_REPLY: 'version' longer than 63 bytes");
    assert_edit_refused("\"jobs\":[", "\"jobs\":{},\"x\":[",
                        "STATUS_REPLY: 'jobs' must be an array");
    assert_refused(NO_JOBS_HEAD "[{}]}", "STATUS_REPLY: jobs[0]: ");
    assert_refused(NO_JOBS_HEAD "[1]}", "STATUS_REPLY: jobs[0]: ");
    /* The job. */
    assert_long_refused("\"state\":\"ended\"", "state", RDZV_STATUS_NAME_MAX + 1,
                        "STATUS_REPLY: jobs[0]: 'state' longer than");
    assert_edit_refused("\"generation\":2", "\"generation\":-1",
                        "STATUS_REPLY: jobs[0]: 'generation', 'store_port'");
    assert_edit_refused("\"store_port\":0", "\"store_port\":-1",
                        "STATUS_REPLY: jobs[0]: 'generation', 'store_port'");
    assert_edit_refused("\"age_s\":2.5", "\"age_s\":\"2.5\"", "STATUS_REPLY: jobs[0]: ");
    /* Arrays that are not arrays. */
    assert_edit_refused("\"nodes\":[", "\"nodes\":{},\"x\":[",
                        "STATUS_REPLY: jobs[0]: 'nodes' must be an array");
    assert_edit_refused("\"events\":[", "\"events\":\"e\",\"x\":[",
                        "STATUS_REPLY: jobs[0]: 'events' must be an array");
    assert_edit_refused(RANKS_MEMBERS, ",\"ranks\":5,\"ranks_left_out\":2",
                        "STATUS_REPLY: jobs[0]: 'ranks' must be an array");
    /* A node. */
    assert_long_refused("\"host\":\"h\"", "host", RDZV_HOST_MAX + 1,
                        "STATUS_REPLY: jobs[0]: nodes[0]: 'host' longer than 255 bytes");
    assert_long_refused("\"node_id\":\"n\"", "node_id", RDZV_ID_MAX + 1,
                        "STATUS_REPLY: jobs[0]: nodes[0]: 'node_id' longer than 128 bytes");
    assert_long_refused("\"state\":\"spare\"", "state", RDZV_STATUS_NAME_MAX + 1,
                        "STATUS_REPLY: jobs[0]: nodes[0]: 'state' longer than 15 bytes");
    assert_edit_refused("\"spare\":true", "\"spare\":1", "STATUS_REPLY: jobs[0]: nodes[0]: ");
    /* A rank. */
    assert_edit_refused("\"rank\":3,", "\"rank\":-1,", "STATUS_REPLY: jobs[0]: ranks[0]: rank,");
    assert_edit_refused("\"node_rank\":0,", "\"node_rank\":-1,",
                        "STATUS_REPLY: jobs[0]: ranks[0]: rank,");
    assert_edit_refused("\"age_s\":0.5", "\"age_s\":1e10",
                        "STATUS_REPLY: jobs[0]: ranks[0]: rank,");
    {
        char *m = member_of_len("host", RDZV_HOST_MAX + 1), *t = malloc(strlen(m) + 16);

        ASSERT_NOT_NULL(t);
        sprintf(t, "%s,\"step\"", m);
        assert_edit_refused("\"host\":\"h\",\"step\"", t,
                            "STATUS_REPLY: jobs[0]: ranks[0]: 'host' longer than");
        free(t);
        free(m);
    }
    /* An event. */
    assert_long_refused("\"text\":\"round 1\"", "text", RDZV_STATUS_TEXT_MAX + 1,
                        "STATUS_REPLY: jobs[0]: events[0]: 'text' longer than 199 bytes");
    assert_edit_refused("\"time\":100.5", "\"time\":null", "STATUS_REPLY: jobs[0]: events[0]: ");
    /* The outcome. */
    assert_edit_refused("\"ended_age_s\":3.0", "\"ended_age_s\":-1.5",
                        "STATUS_REPLY: jobs[0]: outcome: duration_s or ended_age_s");
    assert_edit_refused("\"ended_age_s\":3.0", "\"ended_age_s\":1e10",
                        "STATUS_REPLY: jobs[0]: outcome: duration_s or ended_age_s");
    assert_edit_refused("\"duration_s\":12.5", "\"duration_s\":1e10",
                        "STATUS_REPLY: jobs[0]: outcome: duration_s or ended_age_s");
    assert_long_refused("\"type\":\"succeeded\"", "type", RDZV_STATUS_NAME_MAX + 1,
                        "STATUS_REPLY: jobs[0]: outcome: 'type' longer than");
    assert_long_refused("\"summary\":\"done\"", "summary", RDZV_SUMMARY_MAX + 1,
                        "STATUS_REPLY: jobs[0]: outcome: 'summary' longer than");
}

/* Every string field at its limit survives encode and parse whole. */
static void test_limits_round_trip(void)
{
    struct rdzv_status a, b;
    struct rdzv_status_job *j;
    json_t *o;
    char *text;

    fill(&a);
    j = &a.jobs[0];
    memset(a.daemon, 'd', RDZV_STATUS_NAME_MAX);
    memset(a.version, 'v', RDZV_STATUS_VERSION_MAX);
    memset(j->run_id, 'r', RDZV_ID_MAX);
    memset(j->state, 's', RDZV_STATUS_NAME_MAX);
    memset(j->nodes[0].host, 'h', RDZV_HOST_MAX);
    memset(j->nodes[0].node_id, 'n', RDZV_ID_MAX);
    memset(j->nodes[0].state, 't', RDZV_STATUS_NAME_MAX);
    memset(j->ranks[0].host, 'k', RDZV_HOST_MAX);
    memset(j->events[0].text, 'e', RDZV_STATUS_TEXT_MAX);
    memset(j->outcome_type, 'o', RDZV_STATUS_NAME_MAX);
    memset(j->outcome_summary, 'u', RDZV_SUMMARY_MAX);
    j->generation = UINT64_C(1) << 52;
    j->store_port = 65535;
    j->duration_s = -1;
    j->ended_age_s = 9999999999.0;
    o = rdzv_status_to_json(&a);
    ASSERT_NOT_NULL(o);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_NOT_NULL(text);
    ASSERT_OK(rdzv_status_parse(BODY(text), &b, err, sizeof(err)));
    free(text);
    ASSERT_EQ(strcmp(a.daemon, b.daemon), 0);
    ASSERT_EQ(strcmp(a.version, b.version), 0);
    ASSERT_EQ(strcmp(j->run_id, b.jobs[0].run_id), 0);
    ASSERT_EQ(strcmp(j->state, b.jobs[0].state), 0);
    ASSERT_EQ(strcmp(j->nodes[0].host, b.jobs[0].nodes[0].host), 0);
    ASSERT_EQ(strcmp(j->nodes[0].node_id, b.jobs[0].nodes[0].node_id), 0);
    ASSERT_EQ(strcmp(j->nodes[0].state, b.jobs[0].nodes[0].state), 0);
    ASSERT_EQ(strcmp(j->ranks[0].host, b.jobs[0].ranks[0].host), 0);
    ASSERT_EQ(strcmp(j->events[0].text, b.jobs[0].events[0].text), 0);
    ASSERT_EQ(strcmp(j->outcome_type, b.jobs[0].outcome_type), 0);
    ASSERT_EQ(strcmp(j->outcome_summary, b.jobs[0].outcome_summary), 0);
    ASSERT_EQ(b.jobs[0].generation, UINT64_C(1) << 52);
    ASSERT_EQ(b.jobs[0].store_port, 65535);
    ASSERT_TRUE(b.jobs[0].duration_s == -1 && b.jobs[0].ended_age_s == 9999999999.0);
    rdzv_status_free(&a);
    rdzv_status_free(&b);
}

/* A live job has no "outcome"; at most RDZV_STATUS_EVENTS events are written, the first ones;
 * hiding node ids clears them in every job and nothing else. */
static void test_live_jobs_and_hidden_ids(void)
{
    struct rdzv_status a, b;
    json_t *o;
    char *text;

    fill(&a);
    ASSERT_OK(rdzv_status_alloc_jobs(&a, 2));
    for (size_t i = 0; i < 2; i++) {
        struct rdzv_status_job *j = &a.jobs[i];

        snprintf(j->run_id, sizeof(j->run_id), "job%zu", i);
        snprintf(j->state, sizeof(j->state), "running");
        ASSERT_OK(rdzv_status_alloc_nodes(j, 2));
        for (size_t k = 0; k < 2; k++) {
            snprintf(j->nodes[k].host, sizeof(j->nodes[k].host), "host%zu%zu", i, k);
            snprintf(j->nodes[k].node_id, sizeof(j->nodes[k].node_id), "id%zu%zu", i, k);
            snprintf(j->nodes[k].state, sizeof(j->nodes[k].state), "running");
            j->nodes[k].connected = true;
        }
    }
    a.jobs[1].n_events = RDZV_STATUS_EVENTS + 4;
    for (unsigned e = 0; e < RDZV_STATUS_EVENTS; e++) {
        a.jobs[1].events[e].time = e;
        snprintf(a.jobs[1].events[e].text, sizeof(a.jobs[1].events[e].text), "event %u", e);
    }
    o = rdzv_status_to_json(&a);
    ASSERT_NOT_NULL(o);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_NOT_NULL(text);
    ASSERT_NULL(strstr(text, "outcome"));
    ASSERT_OK(rdzv_status_parse(BODY(text), &b, err, sizeof(err)));
    free(text);
    ASSERT_EQ(b.n_jobs, 2);
    ASSERT_FALSE(b.jobs[0].ended);
    ASSERT_EQ(b.jobs[0].n_events, 0);
    ASSERT_EQ(b.jobs[1].n_events, RDZV_STATUS_EVENTS);
    ASSERT_EQ(strcmp(b.jobs[1].events[RDZV_STATUS_EVENTS - 1].text, "event 15"), 0);
    ASSERT_TRUE(b.jobs[1].nodes[1].connected);
    ASSERT_EQ(strcmp(b.jobs[1].nodes[1].node_id, "id11"), 0);
    rdzv_status_hide_node_ids(&b);
    for (size_t i = 0; i < 2; i++)
        for (size_t k = 0; k < 2; k++) {
            char host[16];

            snprintf(host, sizeof(host), "host%zu%zu", i, k);
            ASSERT_EQ(b.jobs[i].nodes[k].node_id[0], '\0');
            ASSERT_EQ(strcmp(b.jobs[i].nodes[k].host, host), 0);
        }
    rdzv_status_free(&a);
    rdzv_status_free(&b);
}

/* Equal ages: the lower rank first, whatever the order they came in. */
static void test_oldest_ties(void)
{
    struct rdzv_status_job j = {0};
    const struct rdzv_status_rank **v;

    ASSERT_OK(rdzv_status_alloc_ranks(&j, 5));
    for (int k = 0; k < 5; k++)
        j.ranks[k] = (struct rdzv_status_rank){.rank = 10 - k, .age_s = 2};
    v = rdzv_status_ranks_oldest(&j);
    ASSERT_NOT_NULL(v);
    for (int k = 0; k < 5; k++)
        ASSERT_EQ(v[k]->rank, 6 + k);
    free(v);
    rdzv_status_job_free_arrays(&j);
    ASSERT_NULL(j.ranks);
    ASSERT_EQ(j.n_ranks, 0);
}

/* What rdzvctl and the page show past their limits: the step range, the oldest reports first. */
/* However many and large the jobs, the document fits RDZV_STATUS_JSON_MAX and so one frame:
 * jobs that do not fit are counted, a job too large with its nodes and ranks is listed without
 * them. */
static void test_document_is_bounded(void)
{
    struct rdzv_status st, back;
    struct rdzv_buf b = {0};
    const uint8_t *body = NULL;
    const char *why = NULL;
    uint32_t len = 0;
    uint8_t op = 0;
    size_t njobs = 3000;
    json_t *o;

    fill(&st);
    st.jobs_left_out = 0;
    ASSERT_OK(rdzv_status_alloc_jobs(&st, njobs));
    for (size_t i = 0; i < njobs; i++) {
        struct rdzv_status_job *j = &st.jobs[i];

        snprintf(j->run_id, sizeof(j->run_id), "%04zu-%0120d", i, 0);
        snprintf(j->state, sizeof(j->state), "forming");
        ASSERT_OK(rdzv_status_alloc_nodes(j, 1));
        memset(j->nodes[0].host, 'h', RDZV_HOST_MAX);
        snprintf(j->nodes[0].state, sizeof(j->nodes[0].state), "spare");
        if (i == 0) { /* alone larger than the limit: its ranks are left out */
            ASSERT_OK(rdzv_status_alloc_ranks(j, RDZV_STATUS_MAX_RANKS));
            for (size_t k = 0; k < RDZV_STATUS_MAX_RANKS; k++) {
                j->ranks[k].rank = (int64_t)k;
                memset(j->ranks[k].host, 'r', RDZV_HOST_MAX);
            }
        }
    }
    o = rdzv_status_to_json(&st);
    ASSERT_NOT_NULL(o);
    ASSERT_LE(json_dumpb(o, NULL, 0, JSON_COMPACT), RDZV_STATUS_JSON_MAX);
    json_decref(o);
    ASSERT_OK(rdzv_status_put_reply(&b, &st));
    ASSERT_EQ(rdzv_frame_peek(rdzv_buf_head(&b), rdzv_buf_avail(&b), RDZV_MAX_MSG, &op, &body, &len,
                              &why),
              rdzv_buf_avail(&b));
    ASSERT_OK(rdzv_status_parse(body, len, &back, err, sizeof(err)));
    ASSERT_TRUE(back.jobs_left_out > 0);
    ASSERT_EQ(back.n_jobs + (size_t)back.jobs_left_out, njobs);
    ASSERT_EQ(strncmp(back.jobs[0].run_id, "0000-", 5), 0);
    ASSERT_EQ(back.jobs[0].n_ranks, 0);
    ASSERT_EQ(back.jobs[0].ranks_left_out, RDZV_STATUS_MAX_RANKS);
    ASSERT_EQ(back.jobs[0].n_nodes, 0);
    ASSERT_EQ(back.jobs[0].members_left_out, 1);
    ASSERT_EQ(back.jobs[1].n_nodes, 1);
    ASSERT_EQ(back.jobs[1].members_left_out, 0);
    rdzv_status_free(&back);
    rdzv_buf_free(&b);
    rdzv_status_free(&st);
}

static void test_ranks_helpers(void)
{
    struct rdzv_status_job j = {0};
    const struct rdzv_status_rank **v;
    int64_t lo = -1, hi = -1;

    rdzv_status_step_range(&j, &lo, &hi);
    ASSERT_TRUE(lo == 0 && hi == 0);
    ASSERT_NULL(rdzv_status_ranks_oldest(&j));
    ASSERT_OK(rdzv_status_alloc_ranks(&j, 4));
    for (int k = 0; k < 4; k++)
        j.ranks[k] = (struct rdzv_status_rank){
            .rank = k, .step = 10 + 3 * (k % 2) - k, .age_s = k == 2 ? 9 : 1 + 0.5 * (k % 2)};
    rdzv_status_step_range(&j, &lo, &hi);
    ASSERT_TRUE(lo == 8 && hi == 12); /* steps 10, 12, 8, 10 */
    v = rdzv_status_ranks_oldest(&j);
    ASSERT_NOT_NULL(v);
    /* ages 1, 1.5, 9, 1.5: rank 2, then 1 and 3 (a tie: by rank), then 0 */
    ASSERT_TRUE(v[0]->rank == 2 && v[1]->rank == 1 && v[2]->rank == 3 && v[3]->rank == 0);
    free(v);
    free(j.ranks);
}

int main(void)
{
    TEST(test_encode_bytes);
    TEST(test_put_aside_round_trip);
    TEST(test_put_aside_gpus_round_trip);
    TEST(test_timeline_round_trip);
    TEST(test_round_trip);
    TEST(test_refused);
    TEST(test_ranks_helpers);
    TEST(test_document_is_bounded);
    TEST(test_refused_fields);
    TEST(test_limits_round_trip);
    TEST(test_live_jobs_and_hidden_ids);
    TEST(test_oldest_ties);
    return tap_done();
}
