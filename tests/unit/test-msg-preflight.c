/* SPDX-License-Identifier: Apache-2.0 */
/* test-msg-preflight.c: the network pre-flight's members and messages (protocol 1.23,
 * proto/rdzv-msg.h): JOIN "preflight", PREFLIGHT and PREFLIGHT_REPORT put and parsed back, and
 * every bad value refused with a line that names the message; STATUS_REPLY's "network" count
 * (1.23) of the nodes put aside, written only once one was, and read back. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-status.h"
#include "../tap.h"
#include "msgtest.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static char err[512];

/* body with the first from replaced by to, parsed by parse: its result. */
typedef int (*parse_fn)(const char *body);
static int edited(parse_fn parse, const char *body, const char *from, const char *to)
{
    char buf[2048];
    const char *at = strstr(body, from);

    ASSERT_NOT_NULL(at);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - body), body, to, at + strlen(from));
    return parse(buf);
}

static struct rdzv_join join_out;
static int parse_join(const char *s)
{
    return rdzv_msg_parse_join((const uint8_t *)s, strlen(s), &join_out, err, sizeof(err));
}

static void test_join_preflight(void)
{
    static const char *const bad[][2] = {
        {"\"addr\":\"10.0.0.1\"", "\"addr\":\"node1\""},
        {"\"addr\":\"10.0.0.1\"", "\"addr\":\"\""},
        {"\"port\":4000", "\"port\":0"},
        {"\"port\":4000", "\"port\":65536"},
        {"\"token\":\"" TOKEN "\"", "\"token\":\"0123\""},
        {"\"token\":\"" TOKEN "\"", "\"token\":\"0123456789ABCDEF0123456789abcdef\""},
        {"\"fraction\":0.25", "\"fraction\":0"},
        {"\"fraction\":0.25", "\"fraction\":1"},
        {"\"fraction\":0.25", "\"fraction\":\"x\""},
        {",\"fraction\":0.25", ""},
    };
    struct rdzv_join a = {.run_id = "job", .node_id = "n", .host = "h", .nproc = 1,
                          .node_rank = -1, .min = 1, .max = 2, .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1, .heartbeat_timeout_ms = 100};
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];

    /* Off (an older agent): not on the wire, off back. */
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    msgtest_frame(&out, RDZV_MSG_JOIN, &p, &n, body, sizeof(body));
    rdzv_buf_free(&out);
    ASSERT_TRUE(strstr(body, "preflight") == NULL);
    ASSERT_OK(parse_join(body));
    ASSERT_TRUE(!join_out.preflight.on);
    /* On: as sent. */
    a.preflight = (struct rdzv_join_preflight){true, "10.0.0.1", 4000, TOKEN, 0.25};
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    msgtest_frame(&out, RDZV_MSG_JOIN, &p, &n, body, sizeof(body));
    rdzv_buf_free(&out);
    ASSERT_OK(parse_join(body));
    ASSERT_TRUE(join_out.preflight.on && join_out.preflight.port == 4000 &&
                join_out.preflight.fraction == 0.25);
    ASSERT_EQ(strcmp(join_out.preflight.addr, "10.0.0.1"), 0);
    ASSERT_EQ(strcmp(join_out.preflight.token, TOKEN), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(edited(parse_join, body, bad[i][0], bad[i][1]), -EBADMSG);
        ASSERT_TRUE(strstr(err, "JOIN preflight") != NULL);
    }
}

static struct rdzv_preflight pf_out;
static int parse_pf(const char *s)
{
    return rdzv_msg_parse_preflight((const uint8_t *)s, strlen(s), &pf_out, err, sizeof(err));
}

static void test_preflight(void)
{
    static const char *const bad[][2] = {
        {"\"id\":7", "\"id\":0"},
        {"\"id\":7", "\"id\":9007199254740992"},
        {"\"addr\":\"::1\"", "\"addr\":\"localhost\""},
        {"\"port\":4000", "\"port\":-1"},
        {"\"token\":\"" TOKEN "\"", "\"token\":\"\""},
        {"\"bound_ms\":3000", "\"bound_ms\":0"},
        {"\"bound_ms\":3000", "\"bound_ms\":10001"},
        {",\"bound_ms\":3000", ""},
        {"\"full\":true", "\"full\":1"},
    };
    struct rdzv_preflight a = {7, "::1", 4000, TOKEN, 3000, true};
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];

    ASSERT_OK(rdzv_msg_put_preflight(&out, &a));
    msgtest_frame(&out, RDZV_MSG_PREFLIGHT, &p, &n, body, sizeof(body));
    rdzv_buf_free(&out);
    ASSERT_OK(parse_pf(body));
    ASSERT_TRUE(pf_out.id == 7 && pf_out.port == 4000 && pf_out.bound_ms == 3000);
    ASSERT_TRUE(pf_out.full);
    ASSERT_EQ(strcmp(pf_out.addr, "::1"), 0);
    ASSERT_OK(edited(parse_pf, body, ",\"full\":true", "")); /* absent: a short probe */
    ASSERT_FALSE(pf_out.full);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(edited(parse_pf, body, bad[i][0], bad[i][1]), -EBADMSG);
        ASSERT_TRUE(strstr(err, "PREFLIGHT") != NULL);
    }
}

static struct rdzv_preflight_report rep_out;
static int parse_rep(const char *s)
{
    return rdzv_msg_parse_preflight_report((const uint8_t *)s, strlen(s), &rep_out, err,
                                           sizeof(err));
}

static void test_preflight_report(void)
{
    static const char *const bad[][2] = {
        {"\"id\":3", "\"id\":0"},
        {"\"up\":870.5", "\"up\":-0.5"},
        {"\"up\":870.5", "\"up\":10000001.0"},
        {"\"up\":870.5", "\"up\":\"fast\""},
        {"\"down\":-1.0", "\"down\":-2.0"},
        {",\"down\":-1.0", ""},
    };
    struct rdzv_preflight_report a = {3, 870.5, -1};
    struct rdzv_buf out = {0};
    const uint8_t *p;
    uint32_t n;
    char body[2048];

    ASSERT_OK(rdzv_msg_put_preflight_report(&out, &a));
    msgtest_frame(&out, RDZV_MSG_PREFLIGHT_REPORT, &p, &n, body, sizeof(body));
    rdzv_buf_free(&out);
    ASSERT_OK(parse_rep(body));
    ASSERT_TRUE(rep_out.id == 3 && rep_out.up == 870.5 && rep_out.down == -1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(edited(parse_rep, body, bad[i][0], bad[i][1]), -EBADMSG);
        ASSERT_TRUE(strstr(err, "PREFLIGHT_REPORT") != NULL);
    }
    /* An agent's report past its limit is refused before it is parsed. */
    ASSERT_TRUE(rdzv_msg_max_body(RDZV_MSG_PREFLIGHT_REPORT) <= 4096);
}

static void test_status_network_count(void)
{
    struct rdzv_status a = {.daemon = "rdzvd", .version = "v"}, b;
    json_t *o;
    char *t;

    o = rdzv_status_to_json(&a);
    t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_TRUE(t && strstr(t, "nodes_put_aside") == NULL); /* none: as before */
    free(t);
    a.put_aside_network = 2;
    o = rdzv_status_to_json(&a);
    t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT_NOT_NULL(strstr(t, "\"straggler\":0,\"network\":2}"));
    ASSERT_OK(rdzv_status_parse((const uint8_t *)t, strlen(t), &b, err, sizeof(err)));
    ASSERT_EQ(b.put_aside_network, 2);
    rdzv_status_free(&b);
    free(t);
}

int main(void)
{
    TEST(test_join_preflight);
    TEST(test_preflight);
    TEST(test_preflight_report);
    TEST(test_status_network_count);
    return tap_done();
}
