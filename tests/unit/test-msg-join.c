/* SPDX-License-Identifier: Apache-2.0 */
/* test-msg-join.c: JOIN's members of protocol 1.14 (proto/rdzv-msg.h): "command", the
 * fingerprint of the agent's command, sent only when set, parsed back as sent, and refused when
 * it is not RDZV_COMMAND_HEX lowercase hex characters; 1.18's incarnation (JOINED, and a
 * resume's echo of it); 1.20's ran_incarnation. (test-msg.c holds the rest of JOIN's
 * codec; it is at its length limit.) */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "../tap.h"
#include "msgtest.h"

static char err[512];

/* a, put and parsed back into b: 0 or the parser's error. The body is kept in body. */
static int round_trip(const struct rdzv_join *a, struct rdzv_join *b, char *body, size_t len)
{
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    int r;

    ASSERT_OK(rdzv_msg_put_join(&out, a));
    msgtest_frame(&out, RDZV_MSG_JOIN, &p, &n, body, len);
    r = rdzv_msg_parse_join(p, n, b, err, sizeof(err));
    rdzv_buf_free(&out);
    return r;
}

static void test_join_command(void)
{
    struct rdzv_join a = {.run_id = "job", .node_id = "n", .host = "h", .nproc = 1,
                          .node_rank = -1, .min = 1, .max = 1, .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1, .heartbeat_timeout_ms = 100},
                     b;
    char body[2048];

    /* Not set (an older agent): not on the wire, "" back. */
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "command") == NULL);
    ASSERT_EQ(b.command[0], '\0');
    /* Set: as sent. */
    memcpy(a.command, "0123456789abcdef", RDZV_COMMAND_HEX + 1);
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "\"command\":\"0123456789abcdef\"") != NULL);
    ASSERT_EQ(strcmp(b.command, "0123456789abcdef"), 0);
    /* Not 16 lowercase hex characters: refused, saying which member. */
    static const char *const bad[] = {"0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF",
                                      "0123456789abcdeg"};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *at;

        ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
        at = strstr(body, "0123456789abcdef");
        ASSERT_NOT_NULL(at);
        memmove(at + strlen(bad[i]), at + RDZV_COMMAND_HEX, strlen(at + RDZV_COMMAND_HEX) + 1);
        memcpy(at, bad[i], strlen(bad[i]));
        ASSERT_EQ(rdzv_msg_parse_join((const uint8_t *)body, strlen(body), &b, err, sizeof(err)),
                  -EBADMSG);
        ASSERT_TRUE(strstr(err, "'command'") != NULL);
    }
}

/* 1.18: JOINED "incarnation" (the rdzvd's) and the resume's echo of it: on the wire only when
 * set, parsed back as sent, absent read as 0; negative or past RDZV_INCARNATION_MAX refused. */
static void test_incarnation(void)
{
    struct rdzv_join a = {.run_id = "job", .node_id = "n", .host = "h", .nproc = 1,
                          .node_rank = -1, .min = 1, .max = 2, .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1, .heartbeat_timeout_ms = 100,
                          .resume = {.generation = 3, .nnodes = 2, .world_size = 2}},
                     b;
    struct rdzv_joined ja = {.run_id = "job", .incarnation = RDZV_INCARNATION_MAX}, jb;
    struct rdzv_buf out = {0};
    char body[2048];
    const uint8_t *p;
    uint32_t n;

    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "incarnation") == NULL);
    ASSERT_EQ(b.resume.incarnation, 0);
    a.resume.incarnation = 1234567;
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "\"incarnation\":1234567") != NULL);
    ASSERT_EQ(b.resume.incarnation, 1234567);
    ASSERT_EQ(b.resume.generation, 3);
    a.resume.incarnation = (uint64_t)RDZV_INCARNATION_MAX + 1;
    ASSERT_EQ(round_trip(&a, &b, body, sizeof(body)), -EBADMSG);
    ASSERT_OK(rdzv_msg_put_joined(&out, &ja));
    msgtest_frame(&out, RDZV_MSG_JOINED, &p, &n, body, sizeof(body));
    ASSERT_OK(rdzv_msg_parse_joined(p, n, &jb, err, sizeof(err)));
    ASSERT_EQ(jb.incarnation, RDZV_INCARNATION_MAX);
    rdzv_buf_free(&out);
    ja.incarnation = 0; /* an older rdzvd: none */
    ASSERT_OK(rdzv_msg_put_joined(&out, &ja));
    msgtest_frame(&out, RDZV_MSG_JOINED, &p, &n, body, sizeof(body));
    ASSERT_TRUE(strstr(body, "incarnation") == NULL);
    ASSERT_OK(rdzv_msg_parse_joined(p, n, &jb, err, sizeof(err)));
    ASSERT_EQ(jb.incarnation, 0);
    rdzv_buf_free(&out);
    ASSERT_EQ(rdzv_msg_parse_joined((const uint8_t *)"{\"incarnation\":-1}", 18, &jb, err,
                                    sizeof(err)),
              -EBADMSG);
    ASSERT_TRUE(strstr(err, "'incarnation'") != NULL);
}

/* 1.20: a plain JOIN's "ran_incarnation" (the agent's workers ran a generation): on the wire
 * only when set and no resume is sent (a resume has its own), parsed back as sent, absent read
 * as 0; negative or past RDZV_INCARNATION_MAX refused; with a resume, read as none. */
static void test_ran_incarnation(void)
{
    struct rdzv_join a = {.run_id = "job", .node_id = "n", .host = "h", .nproc = 1,
                          .node_rank = -1, .min = 1, .max = 2, .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1, .heartbeat_timeout_ms = 100},
                     b;
    char body[2048], *at;

    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "ran_incarnation") == NULL);
    ASSERT_EQ(b.ran_incarnation, 0);
    a.ran_incarnation = RDZV_INCARNATION_MAX;
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "\"ran_incarnation\":9007199254740991") != NULL);
    ASSERT_EQ(b.ran_incarnation, RDZV_INCARNATION_MAX);
    a.ran_incarnation = (uint64_t)RDZV_INCARNATION_MAX + 1;
    ASSERT_EQ(round_trip(&a, &b, body, sizeof(body)), -EBADMSG);
    ASSERT_TRUE(strstr(err, "ran_incarnation") != NULL);
    a.ran_incarnation = 5;
    a.resume = (struct rdzv_resume){.generation = 3, .nnodes = 2, .world_size = 2};
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE(strstr(body, "ran_incarnation") == NULL);
    a.resume.generation = 0;
    a.ran_incarnation = 0;
    ASSERT_OK(round_trip(&a, &b, body, sizeof(body)));
    ASSERT_TRUE((at = strrchr(body, '}')) != NULL);
    snprintf(at, sizeof(body) - (size_t)(at - body), ",\"ran_incarnation\":-1}");
    ASSERT_EQ(rdzv_msg_parse_join((const uint8_t *)body, strlen(body), &b, err, sizeof(err)),
              -EBADMSG);
    ASSERT_TRUE(strstr(err, "ran_incarnation") != NULL);
}

int main(void)
{
    TEST(test_join_command);
    TEST(test_incarnation);
    TEST(test_ran_incarnation);
    return tap_done();
}
