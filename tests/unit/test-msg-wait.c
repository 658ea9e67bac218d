/* SPDX-License-Identifier: Apache-2.0 */
/* test-msg-wait.c: HEARTBEAT's "wait" of protocol 1.15 (proto/rdzv-msg.h): what rdzvd's answer
 * says the agent's job waits for. Absent, nothing is written (the answer an older agent reads);
 * each kind goes and comes back; a "for" the reader does not know reads as none; a member out of
 * range or of the wrong type is refused. And the EVENT's "cost" of 1.16 (what failures cost the
 * job, at its end): optional both ways, cut at a character on both sides. And 1.17's warning
 * in JOINED and HEARTBEAT's answer (another agent of the job under this host name): the same;
 * and EVENT restart's startup_grace_ms (1.17), bounded. And WORKER_EXIT's error (1.18). And
 * HEARTBEAT's loop_stall_ms (1.21): optional, bounded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "../tap.h"
#include "msgtest.h"

#define BODY(s) (const uint8_t *)(s), strlen(s)

static char err[512];

/* a, put and parsed back into b: 0 or the parser's error. The body is kept in body. */
static int round_trip(const struct rdzv_heartbeat *a, struct rdzv_heartbeat *b, char *body,
                      size_t len)
{
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    int r;

    ASSERT_OK(rdzv_msg_put_heartbeat(&out, a));
    msgtest_frame(&out, RDZV_MSG_HEARTBEAT, &p, &n, body, len);
    r = rdzv_msg_parse_heartbeat(p, n, b, err, sizeof(err));
    rdzv_buf_free(&out);
    return r;
}

static void test_heartbeat_wait(void)
{
    struct rdzv_heartbeat *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    char body[512];

    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    a->generation = 2;
    /* None: the answer as before 1.15. */
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_BYTES_STR(body, strlen(body), "{\"generation\":2}");
    ASSERT_EQ(b->wait.what, RDZV_WAIT_NONE);
    /* Each kind, as sent. */
    a->wait = (struct rdzv_wait){RDZV_WAIT_NODES, 1, 2, 4, 570000};
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_BYTES_STR(body, strlen(body),
                     "{\"generation\":2,\"wait\":{\"for\":\"nodes\",\"nodes\":1,\"need\":2,"
                     "\"max\":4,\"left_ms\":570000}}");
    ASSERT_EQ(b->wait.what, RDZV_WAIT_NODES);
    ASSERT_EQ(b->wait.nodes, 1);
    ASSERT_EQ(b->wait.need, 2);
    ASSERT_EQ(b->wait.max, 4);
    ASSERT_EQ(b->wait.left_ms, 570000);
    a->wait = (struct rdzv_wait){RDZV_WAIT_REBUILD, 3, 4, 0, -1};
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_EQ(b->wait.what, RDZV_WAIT_REBUILD);
    ASSERT_EQ(b->wait.nodes, 3);
    ASSERT_EQ(b->wait.left_ms, -1);
    a->wait = (struct rdzv_wait){RDZV_WAIT_BACKOFF, 0, 0, 0, RDZV_WAIT_LEFT_MAX_MS};
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_EQ(b->wait.what, RDZV_WAIT_BACKOFF);
    ASSERT_EQ(b->wait.left_ms, RDZV_WAIT_LEFT_MAX_MS);
    /* A kind of a later rdzvd: none, the HEARTBEAT read. */
    ASSERT_OK(rdzv_msg_parse_heartbeat(BODY("{\"generation\":5,\"wait\":{\"for\":\"moon\","
                                            "\"nodes\":1,\"need\":1,\"max\":1,\"left_ms\":0}}"),
                                       b, err, sizeof(err)));
    ASSERT_EQ(b->generation, 5);
    ASSERT_EQ(b->wait.what, RDZV_WAIT_NONE);
    /* Out of range or of the wrong type: refused. */
    static const char *const bad[] = {
        "{\"generation\":1,\"wait\":1}",
        "{\"generation\":1,\"wait\":{\"for\":\"nodes\",\"nodes\":1,\"need\":1,\"max\":1}}",
        "{\"generation\":1,\"wait\":{\"for\":1,\"nodes\":1,\"need\":1,\"max\":1,\"left_ms\":0}}",
        "{\"generation\":1,\"wait\":{\"for\":\"nodes\",\"nodes\":-1,\"need\":1,\"max\":1,"
        "\"left_ms\":0}}",
        "{\"generation\":1,\"wait\":{\"for\":\"nodes\",\"nodes\":1,\"need\":100001,\"max\":1,"
        "\"left_ms\":0}}",
        "{\"generation\":1,\"wait\":{\"for\":\"nodes\",\"nodes\":1,\"need\":1,\"max\":1,"
        "\"left_ms\":-2}}",
        "{\"generation\":1,\"wait\":{\"for\":\"nodes\",\"nodes\":1,\"need\":1,\"max\":1,"
        "\"left_ms\":31536000001}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_msg_parse_heartbeat(BODY(bad[i]), b, err, sizeof(err)), -EBADMSG);
    free(a);
    free(b);
}

static void test_event_cost(void)
{
    struct rdzv_event e = {.type = "succeeded", .generation = 4, .summary = "done"}, e2;
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];

    /* Absent: not written, read as "". */
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    msgtest_frame(&out, RDZV_MSG_EVENT, &p, &n, body, sizeof(body));
    ASSERT_NULL(strstr(body, "cost"));
    ASSERT_OK(rdzv_msg_parse_event(p, n, &e2, err, sizeof(err)));
    ASSERT_EQ(e2.cost[0], '\0');
    rdzv_buf_free(&out);
    /* Set: it comes back; one cut in the middle of a character is trimmed before it goes. */
    snprintf(e.cost, sizeof(e.cost), "wall 9.0 s: start-up 1.0 s (11%%)");
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    msgtest_frame(&out, RDZV_MSG_EVENT, &p, &n, body, sizeof(body));
    ASSERT_OK(rdzv_msg_parse_event(p, n, &e2, err, sizeof(err)));
    ASSERT_EQ(strcmp(e2.cost, e.cost), 0);
    rdzv_buf_free(&out);
    memset(e.cost, 'a', sizeof(e.cost));
    memcpy(e.cost + sizeof(e.cost) - 2, "\xc3\xa9", 2);
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    msgtest_frame(&out, RDZV_MSG_EVENT, &p, &n, body, sizeof(body));
    ASSERT_OK(rdzv_msg_parse_event(p, n, &e2, err, sizeof(err)));
    ASSERT_EQ(strlen(e2.cost), sizeof(e.cost) - 2);
    rdzv_buf_free(&out);
    /* Of the wrong type: refused, as any member. */
    ASSERT_EQ(rdzv_msg_parse_event(BODY("{\"type\":\"failed\",\"generation\":1,\"cost\":3}"),
                                   &e2, err, sizeof(err)),
              -EBADMSG);
}

/* JOINED's and HEARTBEAT's "warning" (1.17): absent, not written and read as ""; set, it comes
 * back; too long, cut on a character; not UTF-8, left out, the message still sent; of the
 * wrong type, refused as any member. */
static void test_warning(void)
{
    struct rdzv_joined j = {.run_id = "r", .waiting = 1, .generation = 2}, j2;
    struct rdzv_heartbeat *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];

    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    ASSERT_OK(rdzv_msg_put_joined(&out, &j));
    msgtest_frame(&out, RDZV_MSG_JOINED, &p, &n, body, sizeof(body));
    ASSERT_NULL(strstr(body, "warning"));
    ASSERT_OK(rdzv_msg_parse_joined(p, n, &j2, err, sizeof(err)));
    ASSERT_EQ(j2.warning[0], '\0');
    rdzv_buf_free(&out);
    snprintf(j.warning, sizeof(j.warning), "another agent of job r runs on this host");
    ASSERT_OK(rdzv_msg_put_joined(&out, &j));
    msgtest_frame(&out, RDZV_MSG_JOINED, &p, &n, body, sizeof(body));
    ASSERT_OK(rdzv_msg_parse_joined(p, n, &j2, err, sizeof(err)));
    ASSERT_EQ(strcmp(j2.warning, j.warning), 0);
    rdzv_buf_free(&out);
    snprintf(j.warning, sizeof(j.warning), "bad \xff byte");
    ASSERT_OK(rdzv_msg_put_joined(&out, &j));
    msgtest_frame(&out, RDZV_MSG_JOINED, &p, &n, body, sizeof(body));
    ASSERT_NULL(strstr(body, "warning"));
    ASSERT_NOT_NULL(strstr(body, "\"run_id\":\"r\""));
    rdzv_buf_free(&out);
    ASSERT_EQ(rdzv_msg_parse_joined(BODY("{\"run_id\":\"r\",\"warning\":7}"), &j2, err,
                                    sizeof(err)),
              -EBADMSG);
    /* HEARTBEAT: with and without a wait; cut to fit on a character. */
    a->generation = 3;
    memset(a->warning, 'w', sizeof(a->warning) - 3);
    memcpy(a->warning + sizeof(a->warning) - 3, "\xc3\xa9", 3);
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_EQ(strlen(b->warning), sizeof(a->warning) - 1);
    ASSERT_EQ(b->wait.what, RDZV_WAIT_NONE);
    a->wait = (struct rdzv_wait){RDZV_WAIT_NODES, 1, 2, 2, 1000};
    snprintf(a->warning, sizeof(a->warning), "twin");
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_EQ(strcmp(b->warning, "twin"), 0);
    ASSERT_EQ(b->wait.what, RDZV_WAIT_NODES);
    a->warning[0] = '\0';
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_NULL(strstr(body, "warning"));
    ASSERT_EQ(b->warning[0], '\0');
    ASSERT_EQ(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"warning\":[]}"), b, err,
                                       sizeof(err)),
              -EBADMSG);
    free(a);
    free(b);
}

/* EVENT restart's startup_grace_ms (1.17): absent, not written and read as 0; set, it comes
 * back; past RDZV_STARTUP_GRACE_MAX_MS, read as that (a later rdzvd's); negative or not a
 * number, refused. */
static void test_event_startup_grace(void)
{
    struct rdzv_event e = {.type = "restart", .generation = 2, .summary = "root cause"}, e2;
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];
    const char *bad[] = {
        "{\"type\":\"restart\",\"generation\":1,\"startup_grace_ms\":-1}",
        "{\"type\":\"restart\",\"generation\":1,\"startup_grace_ms\":\"1\"}",
    };

    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    msgtest_frame(&out, RDZV_MSG_EVENT, &p, &n, body, sizeof(body));
    ASSERT_NULL(strstr(body, "startup_grace_ms"));
    ASSERT_OK(rdzv_msg_parse_event(p, n, &e2, err, sizeof(err)));
    ASSERT_EQ(e2.startup_grace_ms, 0);
    rdzv_buf_free(&out);
    e.startup_grace_ms = 1500;
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    msgtest_frame(&out, RDZV_MSG_EVENT, &p, &n, body, sizeof(body));
    ASSERT_NOT_NULL(strstr(body, "\"startup_grace_ms\":1500"));
    ASSERT_OK(rdzv_msg_parse_event(p, n, &e2, err, sizeof(err)));
    ASSERT_EQ(e2.startup_grace_ms, 1500);
    rdzv_buf_free(&out);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_EQ(rdzv_msg_parse_event(BODY(bad[i]), &e2, err, sizeof(err)), -EBADMSG);
    ASSERT_OK(rdzv_msg_parse_event(
        BODY("{\"type\":\"restart\",\"generation\":1,\"startup_grace_ms\":600000}"), &e2, err,
        sizeof(err)));
    ASSERT_EQ(e2.startup_grace_ms, RDZV_STARTUP_GRACE_MAX_MS);
}

/* WORKER_EXIT's optional error (1.18), the last stderr line of the worker: sent only when set,
 * read back; a longer one is cut on a character, not refused; a control character is refused. */
static void test_worker_exit_error(void)
{
    struct rdzv_worker_exit w = {.generation = 4, .rank = 5, .local_rank = 1, .exit_code = 1,
                                 .time = 1.5, .host = "nodeB", .error = "RuntimeError: boom"},
                            w2;
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[1024], big[600];

    ASSERT_OK(rdzv_msg_put_worker_exit(&out, &w));
    msgtest_frame(&out, RDZV_MSG_WORKER_EXIT, &p, &n, body, sizeof(body));
    ASSERT_OK(rdzv_msg_parse_worker_exit(p, n, &w2, err, sizeof(err)));
    ASSERT_EQ(strcmp(w2.error, "RuntimeError: boom"), 0);
    rdzv_buf_free(&out);
    w.error[0] = '\0';
    ASSERT_OK(rdzv_msg_put_worker_exit(&out, &w));
    msgtest_frame(&out, RDZV_MSG_WORKER_EXIT, &p, &n, body, sizeof(body));
    ASSERT_TRUE(strstr(body, "error") == NULL);
    rdzv_buf_free(&out);
    /* 254 bytes, then a 2-byte character across the bound: cut before it */
    snprintf(big, sizeof(big), "{\"generation\":1,\"rank\":0,\"local_rank\":0,\"exit_code\":1,"
             "\"signal\":0,\"error\":\"%0254d\\u00e9xyz\"}", 0);
    ASSERT_OK(rdzv_msg_parse_worker_exit(BODY(big), &w2, err, sizeof(err)));
    ASSERT_EQ(strlen(w2.error), 254);
    ASSERT_EQ(rdzv_msg_parse_worker_exit(BODY("{\"generation\":1,\"rank\":0,\"local_rank\":0,"
                                              "\"exit_code\":1,\"signal\":0,"
                                              "\"error\":\"a\\u001bb\"}"),
                                         &w2, err, sizeof(err)),
              -EBADMSG);
}

/* 1.21: the agent's longest loop stall, written only when said, with or without progress; an
 * older agent's HEARTBEAT has none; out of range or not a number: refused. */
static void test_heartbeat_loop_stall(void)
{
    struct rdzv_heartbeat *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    char body[512];

    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    a->generation = 2;
    a->has_loop_stall = true;
    a->loop_stall_ms = 140;
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_BYTES_STR(body, strlen(body), "{\"generation\":2,\"loop_stall_ms\":140}");
    ASSERT_TRUE(b->has_loop_stall);
    ASSERT_EQ(b->loop_stall_ms, 140);
    a->n_progress = 1;
    a->progress[0] = (struct rdzv_rank_progress){.local_rank = 0, .step = 1, .age_ms = 5};
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_BYTES_STR(body, strlen(body),
                     "{\"generation\":2,\"progress\":[{\"local_rank\":0,\"step\":1,"
                     "\"age_ms\":5}],\"loop_stall_ms\":140}");
    ASSERT_EQ(b->loop_stall_ms, 140);
    ASSERT_EQ(b->n_progress, 1);
    a->has_loop_stall = false;
    a->n_progress = 0;
    ASSERT_OK(round_trip(a, b, body, sizeof(body)));
    ASSERT_BYTES_STR(body, strlen(body), "{\"generation\":2}");
    ASSERT_TRUE(!b->has_loop_stall);
    ASSERT_OK(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"loop_stall_ms\":86400000}"),
                                       b, err, sizeof(err)));
    ASSERT_EQ(b->loop_stall_ms, 86400000);
    ASSERT_EQ(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"loop_stall_ms\":86400001}"),
                                       b, err, sizeof(err)),
              -EBADMSG);
    ASSERT_EQ(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"loop_stall_ms\":-1}"), b, err,
                                       sizeof(err)),
              -EBADMSG);
    ASSERT_EQ(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"loop_stall_ms\":\"1\"}"), b,
                                       err, sizeof(err)),
              -EBADMSG);
    free(a);
    free(b);
}

int main(void)
{
    TEST(test_heartbeat_wait);
    TEST(test_event_cost);
    TEST(test_warning);
    TEST(test_event_startup_grace);
    TEST(test_worker_exit_error);
    TEST(test_heartbeat_loop_stall);
    return tap_done();
}
