/* SPDX-License-Identifier: Apache-2.0 */
/* test-msg.c: the rendezvous message codecs (proto/rdzv-msg.h): the exact bytes each encoder
 * writes (the wire format of RENDEZVOUS.md), parse(put(x)) == x for every message, and the
 * bodies each decoder refuses. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "../tap.h"

#define HEX256 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" \
               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" \
               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" \
               "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char err[512];

/* The one frame in b: check its op and return its body (b keeps the bytes). */
static const uint8_t *frame_body(const struct rdzv_buf *b, uint8_t want_op, uint32_t *len)
{
    const uint8_t *body = NULL;
    const char *why = NULL;
    uint8_t op = 0;
    ssize_t r = rdzv_frame_peek(rdzv_buf_head(b), rdzv_buf_avail(b), RDZV_MAX_MSG, &op, &body,
                                len, &why);

    ASSERT_EQ(r, rdzv_buf_avail(b));
    ASSERT_EQ(op, want_op);
    return body;
}

/* The encoder wrote exactly one frame of op whose body is json; the buffer is emptied. */
static void expect_frame(struct rdzv_buf *b, int put_result, uint8_t op, const char *json)
{
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(put_result);
    body = frame_body(b, op, &len);
    ASSERT_BYTES_STR(body, len, json);
    rdzv_buf_free(b);
}

#define BODY(s) (const uint8_t *)(s), strlen(s)

/* A body the decoder must refuse with -EBADMSG and a reason. */
#define ASSERT_REFUSED(call)                                                                       \
    do {                                                                                           \
        err[0] = '\0';                                                                             \
        ASSERT_EQ((call), -EBADMSG);                                                               \
        ASSERT_TRUE(err[0] != '\0');                                                               \
    } while (0)

/* Byte for byte what rdzvd-job-wire.c, agent-client.c and rdzv-agent.c packed inline before. */
static void test_encoders_bytes(void)
{
    struct rdzv_buf b = {0};
    struct rdzv_nccl_id *n = calloc(1, sizeof(*n));

    ASSERT_NOT_NULL(n);
    expect_frame(&b,
                 rdzv_msg_put_joined(&b, &(struct rdzv_joined){.run_id = "job1", .waiting = 2,
                                                                .resumed = true,
                                                                .generation = 3,
                                                                .recovery = "restart"}),
                 RDZV_MSG_JOINED,
                 "{\"run_id\":\"job1\",\"waiting\":2,\"spare\":false,\"resumed\":true,"
                 "\"generation\":3,\"recovery\":\"restart\"}"); /* protocol 1.1: "recovery" */
    expect_frame(&b, rdzv_msg_put_nccl_request(&b, &(struct rdzv_nccl_request){4, 2}),
                 RDZV_MSG_NCCL_REQUEST, "{\"generation\":4,\"count\":2}");
    expect_frame(&b, rdzv_msg_put_heartbeat(&b, &(struct rdzv_heartbeat){7}), RDZV_MSG_HEARTBEAT,
                 "{\"generation\":7}");
    expect_frame(&b, rdzv_msg_put_ready(&b, &(struct rdzv_ready){8}), RDZV_MSG_READY,
                 "{\"generation\":8}");
    expect_frame(&b, rdzv_msg_put_leave(&b, &(struct rdzv_leave){9, true}), RDZV_MSG_LEAVE,
                 "{\"generation\":9,\"status\":\"succeeded\"}");
    expect_frame(&b, rdzv_msg_put_leave(&b, &(struct rdzv_leave){9, false}), RDZV_MSG_LEAVE,
                 "{\"generation\":9,\"status\":\"failed\"}");
    expect_frame(&b, rdzv_msg_put_status(&b), RDZV_MSG_STATUS, "{}");
    expect_frame(&b, rdzv_msg_put_error(&b, "node rank %d is taken", 1), RDZV_MSG_ERROR,
                 "{\"error\":\"node rank 1 is taken\"}");
    n->generation = 5;
    n->failed = true;
    snprintf(n->error, sizeof(n->error), "no libnccl");
    expect_frame(&b, rdzv_msg_put_nccl_id(&b, n), RDZV_MSG_NCCL_ID,
                 "{\"generation\":5,\"error\":\"no libnccl\"}");
    n->failed = false;
    n->n_ids = 2;
    memcpy(n->ids[0], HEX256, sizeof(HEX256));
    memcpy(n->ids[1], HEX256, sizeof(HEX256));
    expect_frame(&b, rdzv_msg_put_nccl_id(&b, n), RDZV_MSG_NCCL_ID,
                 "{\"generation\":5,\"ids\":[\"" HEX256 "\",\"" HEX256 "\"]}");
    expect_frame(&b,
                 rdzv_msg_put_worker_exit(&b, &(struct rdzv_worker_exit){.generation = 1,
                                                                         .rank = 5,
                                                                         .local_rank = 1,
                                                                         .exit_code = 137,
                                                                         .signal = 9,
                                                                         .time = 2.5,
                                                                         .host = "nodeB"}),
                 RDZV_MSG_WORKER_EXIT,
                 "{\"generation\":1,\"rank\":5,\"local_rank\":1,\"exit_code\":137,\"signal\":9,"
                 "\"time\":2.5,\"host\":\"nodeB\"}");
    free(n);
}

static void test_joined(void)
{
    struct rdzv_joined a = {.run_id = "r", .waiting = 3, .spare = true, .generation = 12}, b;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_joined(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOINED, &len);
    ASSERT_OK(rdzv_msg_parse_joined(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(strcmp(b.run_id, "r"), 0);
    ASSERT_EQ(b.waiting, 3);
    ASSERT_TRUE(b.spare && !b.resumed);
    ASSERT_EQ(b.generation, 12);
    rdzv_buf_free(&out);
    /* Only spare and resumed are acted on: every member may be missing. */
    ASSERT_OK(rdzv_msg_parse_joined(BODY("{}"), &b, err, sizeof(err)));
    ASSERT_TRUE(!b.spare && !b.resumed && b.run_id[0] == '\0');
    ASSERT_OK(rdzv_msg_parse_joined(BODY("{\"resumed\":true,\"x\":[1]}"), &b, err, sizeof(err)));
    ASSERT_TRUE(b.resumed);
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"spare\":1}"), &b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("[true]"), &b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"spare\":true"), &b, err, sizeof(err)));
    /* recovery (protocol 1.1): absent from an older rdzvd, which an in-place agent refuses */
    ASSERT_EQ(strcmp(b.recovery, ""), 0);
    snprintf(a.recovery, sizeof(a.recovery), "inplace");
    ASSERT_OK(rdzv_msg_put_joined(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOINED, &len);
    ASSERT_OK(rdzv_msg_parse_joined(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(strcmp(b.recovery, "inplace"), 0);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"recovery\":\"later\"}"), &b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"recovery\":1}"), &b, err, sizeof(err)));
}

static void test_nccl_request(void)
{
    struct rdzv_nccl_request q;

    ASSERT_OK(rdzv_msg_parse_nccl_request(BODY("{\"generation\":3,\"count\":64}"), &q, err,
                                          sizeof(err)));
    ASSERT_EQ(q.generation, 3);
    ASSERT_EQ(q.count, 64);
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY("{\"generation\":3,\"count\":0}"), &q, err,
                                               sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY("{\"generation\":3,\"count\":65}"), &q, err,
                                               sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY("{\"generation\":3}"), &q, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY("{\"count\":1}"), &q, err, sizeof(err)));
    ASSERT_TRUE(!q.store);
    /* 1.4: "store" asks node rank 0 for the generation's store; then no id may be asked. */
    ASSERT_OK(rdzv_msg_parse_nccl_request(BODY("{\"generation\":4,\"count\":0,\"store\":true}"),
                                          &q, err, sizeof(err)));
    ASSERT_TRUE(q.store);
    ASSERT_EQ(q.count, 0);
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY("{\"generation\":4,\"count\":0,\"store\":1}"),
                                               &q, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_request(
        BODY("{\"generation\":4,\"count\":65,\"store\":true}"), &q, err, sizeof(err)));
    /* store_allow: rdzvd's --allow-store-from, for the agent's store; printable, bounded. */
    {
        struct rdzv_nccl_request a = {.generation = 9, .count = 0, .store = true}, b;
        struct rdzv_buf out = {0};
        const uint8_t *body;
        uint32_t len;
        char big[400];

        snprintf(a.store_allow, sizeof(a.store_allow), "10.0.0.0/8, ::1");
        ASSERT_OK(rdzv_msg_put_nccl_request(&out, &a));
        body = frame_body(&out, RDZV_MSG_NCCL_REQUEST, &len);
        ASSERT_OK(rdzv_msg_parse_nccl_request(body, len, &b, err, sizeof(err)));
        ASSERT_EQ(strcmp(b.store_allow, "10.0.0.0/8, ::1"), 0);
        ASSERT_TRUE(b.store && b.count == 0);
        rdzv_buf_free(&out);
        ASSERT_REFUSED(rdzv_msg_parse_nccl_request(
            BODY("{\"generation\":4,\"count\":0,\"store\":true,\"store_allow\":\"a\\nb\"}"), &b,
            err, sizeof(err)));
        snprintf(big, sizeof(big), "{\"generation\":4,\"count\":0,\"store\":true,"
                 "\"store_allow\":\"%0300d\"}", 0);
        ASSERT_REFUSED(rdzv_msg_parse_nccl_request(BODY(big), &b, err, sizeof(err)));
    }
}

/* 1.4: NCCL_ID names where node rank 0 opened the store, with or without ids, in either form. */
static void test_nccl_id_store(void)
{
    struct rdzv_nccl_id *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_TRUE(a && b);
    a->generation = 5;
    snprintf(a->store_addr, sizeof(a->store_addr), "10.1.2.3");
    a->store_port = 40001;
    ASSERT_OK(rdzv_msg_put_nccl_id(&out, a));
    body = frame_body(&out, RDZV_MSG_NCCL_ID, &len);
    ASSERT_OK(rdzv_msg_parse_nccl_id(body, len, b, err, sizeof(err)));
    ASSERT_TRUE(!b->failed);
    ASSERT_EQ(b->n_ids, 0);
    ASSERT_EQ(strcmp(b->store_addr, "10.1.2.3"), 0);
    ASSERT_EQ(b->store_port, 40001);
    rdzv_buf_free(&out);
    a->failed = true;
    snprintf(a->error, sizeof(a->error), "no NCCL here");
    snprintf(a->store_addr, sizeof(a->store_addr), "fd00::7");
    ASSERT_OK(rdzv_msg_put_nccl_id(&out, a));
    body = frame_body(&out, RDZV_MSG_NCCL_ID, &len);
    ASSERT_OK(rdzv_msg_parse_nccl_id(body, len, b, err, sizeof(err)));
    ASSERT_TRUE(b->failed);
    ASSERT_EQ(strcmp(b->store_addr, "fd00::7"), 0);
    rdzv_buf_free(&out);
    /* No store: an empty id list is still refused. */
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"ids\":[]}"), b, err,
                                          sizeof(err)));
    /* What workers would get as MASTER_ADDR is a numeric address, and comes with its port. */
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(
        BODY("{\"generation\":1,\"ids\":[],\"store_addr\":\"evil.example\",\"store_port\":1}"),
        b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(
        BODY("{\"generation\":1,\"ids\":[],\"store_addr\":\"10.0.0.1\"}"), b, err,
        sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(
        BODY("{\"generation\":1,\"ids\":[],\"store_port\":5}"), b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(
        BODY("{\"generation\":1,\"ids\":[],\"store_addr\":\"10.0.0.1\",\"store_port\":65536}"),
        b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(
        BODY("{\"generation\":1,\"ids\":[],\"store_addr\":\"10.0.0.1\\n\",\"store_port\":5}"),
        b, err, sizeof(err)));
    free(a);
    free(b);
}

static void test_nccl_id(void)
{
    struct rdzv_nccl_id *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *body;
    char big[2048];
    uint32_t len;

    ASSERT_TRUE(a && b);
    a->generation = 2;
    a->n_ids = RDZV_MAX_NCCL_IDS;
    for (unsigned i = 0; i < a->n_ids; i++) {
        memcpy(a->ids[i], HEX256, sizeof(HEX256));
        a->ids[i][i % RDZV_NCCL_HEX_LEN] = 'f';
    }
    ASSERT_OK(rdzv_msg_put_nccl_id(&out, a));
    body = frame_body(&out, RDZV_MSG_NCCL_ID, &len);
    ASSERT_OK(rdzv_msg_parse_nccl_id(body, len, b, err, sizeof(err)));
    ASSERT_TRUE(!b->failed);
    ASSERT_EQ(b->generation, 2);
    ASSERT_EQ(b->n_ids, RDZV_MAX_NCCL_IDS);
    for (unsigned i = 0; i < b->n_ids; i++)
        ASSERT_EQ(strcmp(a->ids[i], b->ids[i]), 0);
    rdzv_buf_free(&out);

    /* The error form: ids are not looked at, a long text is cut on a character boundary. */
    ASSERT_OK(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"error\":\"no\",\"ids\":7}"), b, err,
                                     sizeof(err)));
    ASSERT_TRUE(b->failed && b->n_ids == 0);
    ASSERT_EQ(strcmp(b->error, "no"), 0);
    snprintf(big, sizeof(big), "{\"generation\":1,\"error\":\"");
    for (unsigned i = 0; i < 600; i++)
        strcat(big, "\xc3\xa9"); /* e-acute: two bytes, so 511 bytes would cut one in half */
    strcat(big, "\"}");
    ASSERT_OK(rdzv_msg_parse_nccl_id(BODY(big), b, err, sizeof(err)));
    ASSERT_EQ(strlen(b->error), 510);

    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1}"), b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"ids\":[]}"), b, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"ids\":\"" HEX256 "\"}"), b,
                                          err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"ids\":[\"abc\"]}"), b, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"ids\":[1]}"), b, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"generation\":1,\"error\":5}"), b, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY("{\"ids\":[\"" HEX256 "\"]}"), b, err,
                                          sizeof(err)));
    /* Upper-case hex, and one id too many. */
    a->n_ids = 1;
    a->ids[0][0] = 'A';
    ASSERT_OK(rdzv_msg_put_nccl_id(&out, a));
    body = frame_body(&out, RDZV_MSG_NCCL_ID, &len);
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id(body, len, b, err, sizeof(err)));
    rdzv_buf_free(&out);
    a->ids[0][0] = 'a';
    a->n_ids = RDZV_MAX_NCCL_IDS;
    ASSERT_OK(rdzv_msg_put_nccl_id(&out, a));
    /* Append one more id by hand: the array is the last member, just before "]}". */
    {
        const uint8_t *p = frame_body(&out, RDZV_MSG_NCCL_ID, &len);
        char *s = malloc(len + sizeof(HEX256) + 8);

        ASSERT_NOT_NULL(s);
        memcpy(s, p, len - 2);
        snprintf(s + len - 2, sizeof(HEX256) + 8, ",\"%s\"]}", HEX256);
        ASSERT_REFUSED(rdzv_msg_parse_nccl_id(BODY(s), b, err, sizeof(err)));
        free(s);
    }
    rdzv_buf_free(&out);
    free(a);
    free(b);
}

/* What the daemon reads of NCCL_ID before it knows whether the message is stale. */
static void test_nccl_id_generation(void)
{
    uint64_t gen = 0;

    ASSERT_OK(rdzv_msg_parse_nccl_id_generation(BODY("{\"generation\":7,\"ids\":[\"abc\"]}"),
                                                &gen, err, sizeof(err)));
    ASSERT_EQ(gen, 7);
    ASSERT_OK(rdzv_msg_parse_nccl_id_generation(BODY("{\"generation\":8,\"error\":\"no\"}"),
                                                &gen, err, sizeof(err)));
    ASSERT_EQ(gen, 8);
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id_generation(BODY("{\"generation\":1,\"error\":5}"),
                                                     &gen, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id_generation(BODY("{\"ids\":[]}"), &gen, err,
                                                     sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_nccl_id_generation(BODY("[1]"), &gen, err, sizeof(err)));
    /* A load failure names the message, as the daemon's refusals did before the codec. */
    ASSERT_TRUE(strncmp(err, "NCCL_ID: bad JSON", 17) == 0);
}

static void test_generation_only(void)
{
    struct rdzv_heartbeat h;
    struct rdzv_ready r;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_heartbeat(&out, &(struct rdzv_heartbeat){UINT64_C(1) << 40}));
    body = frame_body(&out, RDZV_MSG_HEARTBEAT, &len);
    ASSERT_OK(rdzv_msg_parse_heartbeat(body, len, &h, err, sizeof(err)));
    ASSERT_EQ(h.generation, UINT64_C(1) << 40);
    rdzv_buf_free(&out);
    ASSERT_OK(rdzv_msg_put_ready(&out, &(struct rdzv_ready){0}));
    body = frame_body(&out, RDZV_MSG_READY, &len);
    ASSERT_OK(rdzv_msg_parse_ready(body, len, &r, err, sizeof(err)));
    ASSERT_EQ(r.generation, 0);
    rdzv_buf_free(&out);

    ASSERT_REFUSED(rdzv_msg_parse_heartbeat(BODY("{}"), &h, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_heartbeat(BODY(""), &h, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_ready(BODY("{\"generation\":1.5}"), &r, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_ready(BODY("{\"generation\":\"1\"}"), &r, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_ready(BODY("{\"generation\":1,\"generation\":2}"), &r, err,
                                        sizeof(err)));
}

/* HEARTBEAT's optional progress: its bytes, the round trip, and its limits. */
static void test_heartbeat_progress(void)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h)), *h2 = calloc(1, sizeof(*h2));
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    size_t cap;
    char *big, *p;

    ASSERT_NOT_NULL(h);
    ASSERT_NOT_NULL(h2);
    h->generation = 3;
    h->n_progress = 2;
    h->progress[0] = (struct rdzv_rank_progress){.local_rank = 1, .step = 12, .age_ms = 250};
    h->progress[1] = (struct rdzv_rank_progress){.local_rank = 0, .step = 0, .age_ms = 0};
    expect_frame(&out, rdzv_msg_put_heartbeat(&out, h), RDZV_MSG_HEARTBEAT,
                 "{\"generation\":3,\"progress\":[{\"local_rank\":1,\"step\":12,\"age_ms\":250},"
                 "{\"local_rank\":0,\"step\":0,\"age_ms\":0}]}");
    ASSERT_OK(rdzv_msg_put_heartbeat(&out, h));
    body = frame_body(&out, RDZV_MSG_HEARTBEAT, &len);
    h2->n_progress = 99;
    ASSERT_OK(rdzv_msg_parse_heartbeat(body, len, h2, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(h2->generation, 3);
    ASSERT_EQ(h2->n_progress, 2);
    ASSERT_EQ(h2->progress[0].local_rank, 1);
    ASSERT_EQ(h2->progress[0].step, 12);
    ASSERT_EQ(h2->progress[0].age_ms, 250);
    ASSERT_EQ(h2->progress[1].local_rank, 0);
    ASSERT_EQ(h2->progress[0].timeout_ms, 0);
    /* 1.5: a rank's progress timeout, written only when it has one, read back. */
    h->progress[0].timeout_ms = 2500;
    expect_frame(&out, rdzv_msg_put_heartbeat(&out, h), RDZV_MSG_HEARTBEAT,
                 "{\"generation\":3,\"progress\":[{\"local_rank\":1,\"step\":12,\"age_ms\":250,"
                 "\"timeout_ms\":2500},{\"local_rank\":0,\"step\":0,\"age_ms\":0}]}");
    ASSERT_OK(rdzv_msg_put_heartbeat(&out, h));
    body = frame_body(&out, RDZV_MSG_HEARTBEAT, &len);
    ASSERT_OK(rdzv_msg_parse_heartbeat(body, len, h2, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(h2->progress[0].timeout_ms, 2500);
    ASSERT_EQ(h2->progress[1].timeout_ms, 0);
    ASSERT_REFUSED(rdzv_msg_parse_heartbeat(
        BODY("{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1,\"age_ms\":0,"
             "\"timeout_ms\":-1}]}"),
        h2, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_heartbeat(
        BODY("{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1,\"age_ms\":0,"
             "\"timeout_ms\":31536000001}]}"),
        h2, err, sizeof(err)));
    /* An old agent's heartbeat: no progress. */
    ASSERT_OK(rdzv_msg_parse_heartbeat(BODY("{\"generation\":4}"), h2, err, sizeof(err)));
    ASSERT_EQ(h2->n_progress, 0);
    ASSERT_OK(
        rdzv_msg_parse_heartbeat(BODY("{\"generation\":4,\"progress\":[]}"), h2, err, sizeof(err)));
    ASSERT_EQ(h2->n_progress, 0);
    /* The limits: the largest values pass, one past them is refused. */
    ASSERT_OK(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"progress\":[{\"local_rank\":1023,"
                                            "\"step\":9223372036854775807,"
                                            "\"age_ms\":31536000000}]}"),
                                       h2, err, sizeof(err)));
    ASSERT_EQ(h2->progress[0].local_rank, RDZV_PROGRESS_MAX - 1);
    ASSERT_EQ(h2->progress[0].age_ms, RDZV_PROGRESS_AGE_MAX_MS);
    static const char *const bad[] = {
        "{\"generation\":1,\"progress\":{}}",
        "{\"generation\":1,\"progress\":[1]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":\"1\",\"age_ms\":0}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":-1,\"step\":1,\"age_ms\":0}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":1024,\"step\":1,\"age_ms\":0}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":-1,\"age_ms\":0}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1,\"age_ms\":-1}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1,\"age_ms\":31536000001}]}",
        "{\"generation\":1,\"progress\":[{\"local_rank\":2,\"step\":1,\"age_ms\":0},"
        "{\"local_rank\":2,\"step\":3,\"age_ms\":0}]}",
    };
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ASSERT_REFUSED(rdzv_msg_parse_heartbeat(BODY(bad[i]), h2, err, sizeof(err)));
    /* More entries than RDZV_PROGRESS_MAX (distinct local ranks would pass but for the count). */
    cap = 64 + (RDZV_PROGRESS_MAX + 1) * 64;
    big = malloc(cap);
    ASSERT_NOT_NULL(big);
    p = big + sprintf(big, "{\"generation\":1,\"progress\":[");
    for (int i = 0; i <= RDZV_PROGRESS_MAX; i++)
        p += sprintf(p, "%s{\"local_rank\":%d,\"step\":1,\"age_ms\":0}", i ? "," : "",
                     i % RDZV_PROGRESS_MAX);
    sprintf(p, "]}");
    ASSERT_REFUSED(rdzv_msg_parse_heartbeat(BODY(big), h2, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "at most") != NULL);
    free(big);
    /* The encoder refuses what the decoder would. */
    h->n_progress = RDZV_PROGRESS_MAX + 1;
    ASSERT_EQ(rdzv_msg_put_heartbeat(&out, h), -EMSGSIZE);
    rdzv_buf_free(&out);
    free(h);
    free(h2);
}

/* 1.10: a rank's compute time, written only when it has one, read back; bounded; optional. */
static void test_heartbeat_compute(void)
{
    struct rdzv_heartbeat *h = calloc(1, sizeof(*h)), *h2 = calloc(1, sizeof(*h2));
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_NOT_NULL(h);
    ASSERT_NOT_NULL(h2);
    h->generation = 3;
    h->n_progress = 2;
    h->progress[0] = (struct rdzv_rank_progress){
        .local_rank = 1, .step = 12, .age_ms = 250, .has_compute = true, .compute_ms = 153};
    h->progress[1] = (struct rdzv_rank_progress){
        .local_rank = 0, .step = 4, .has_compute = true, .compute_ms = RDZV_COMPUTE_MS_MAX};
    expect_frame(&out, rdzv_msg_put_heartbeat(&out, h), RDZV_MSG_HEARTBEAT,
                 "{\"generation\":3,\"progress\":[{\"local_rank\":1,\"step\":12,\"age_ms\":250,"
                 "\"compute_ms\":153},{\"local_rank\":0,\"step\":4,\"age_ms\":0,"
                 "\"compute_ms\":3600000}]}");
    ASSERT_OK(rdzv_msg_put_heartbeat(&out, h));
    body = frame_body(&out, RDZV_MSG_HEARTBEAT, &len);
    ASSERT_OK(rdzv_msg_parse_heartbeat(body, len, h2, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_TRUE(h2->progress[0].has_compute);
    ASSERT_EQ(h2->progress[0].compute_ms, 153);
    ASSERT_EQ(h2->progress[1].compute_ms, RDZV_COMPUTE_MS_MAX);
    /* An agent that predates it: no compute time, not an error. */
    ASSERT_OK(rdzv_msg_parse_heartbeat(BODY("{\"generation\":1,\"progress\":[{\"local_rank\":0,"
                                            "\"step\":1,\"age_ms\":0}]}"),
                                       h2, err, sizeof(err)));
    ASSERT_FALSE(h2->progress[0].has_compute);
    static const char *const bad[] = {"-1", "3600001", "\"5\"", "1.5", "null"};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char b[160];

        snprintf(b, sizeof(b),
                 "{\"generation\":1,\"progress\":[{\"local_rank\":0,\"step\":1,\"age_ms\":0,"
                 "\"compute_ms\":%s}]}",
                 bad[i]);
        ASSERT_REFUSED(rdzv_msg_parse_heartbeat(BODY(b), h2, err, sizeof(err)));
    }
    free(h);
    free(h2);
}

static void test_leave(void)
{
    struct rdzv_leave l;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_leave(&out, &(struct rdzv_leave){4, true}));
    body = frame_body(&out, RDZV_MSG_LEAVE, &len);
    ASSERT_OK(rdzv_msg_parse_leave(body, len, &l, err, sizeof(err)));
    ASSERT_TRUE(l.succeeded);
    ASSERT_EQ(l.generation, 4);
    rdzv_buf_free(&out);
    /* Any other status is "not succeeded", as the daemon reads it. */
    ASSERT_OK(rdzv_msg_parse_leave(BODY("{\"generation\":4,\"status\":\"maybe\"}"), &l, err,
                                   sizeof(err)));
    ASSERT_FALSE(l.succeeded);
    ASSERT_REFUSED(rdzv_msg_parse_leave(BODY("{\"generation\":4}"), &l, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_leave(BODY("{\"status\":\"succeeded\"}"), &l, err, sizeof(err)));
}

static void test_status_and_error(void)
{
    struct rdzv_error e;
    char big[1200];

    ASSERT_OK(rdzv_msg_parse_status(BODY("{}"), err, sizeof(err)));
    ASSERT_OK(rdzv_msg_parse_status(BODY("{\"verbose\":true}"), err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_status(BODY("[]"), err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_status(BODY(""), err, sizeof(err)));

    ASSERT_OK(rdzv_msg_parse_error(BODY("{\"error\":\"authentication required\"}"), &e, err,
                                   sizeof(err)));
    ASSERT_EQ(strcmp(e.error, "authentication required"), 0);
    snprintf(big, sizeof(big), "{\"error\":\"%0*d\"}", 1000, 0);
    ASSERT_OK(rdzv_msg_parse_error(BODY(big), &e, err, sizeof(err)));
    ASSERT_EQ(strlen(e.error), RDZV_ERROR_MAX);
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY("{\"error\":1}"), &e, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY("{}"), &e, err, sizeof(err)));
}

static void test_join_round_trip(void)
{
    struct rdzv_join a = {.run_id = "job", .node_id = "n-1", .host = "h", .nproc = 8,
                          .node_rank = -1, .min = 1, .max = 4, .last_call_ms = 3000,
                          .max_restarts = 2, .nccl = RDZV_NCCL_REQUIRED, .nccl_ids = 3,
                          .heartbeat_timeout_ms = 5000, .join_timeout_ms = 600000,
                          .scale_up_now = true, .bad_node_window_s = 60,
                          .restart_backoff_s = 30,
                          .resume = {.generation = 3, .node_rank = 1, .nnodes = 2,
                                     .rank_offset = 8, .world_size = 16, .restart_count = 1,
                                     .master_port = 4000, .left = true}};
    struct rdzv_join b;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(memcmp(&a.resume, &b.resume, sizeof(a.resume)), 0);
    ASSERT_TRUE(b.nccl == RDZV_NCCL_REQUIRED && b.scale_up_now && b.nccl_ids == 3);
    ASSERT_TRUE(b.bad_node_window_s == 60 && b.restart_backoff_s == 30);
    ASSERT_EQ(strcmp(b.node_id, "n-1"), 0);
    ASSERT_TRUE(!b.inplace);
    rdzv_buf_free(&out);
    a.inplace = true;
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    ASSERT_TRUE(b.inplace);
    rdzv_buf_free(&out);
    /* An agent from before protocol 1.1 sends no "recovery": restart. A value other than
     * restart or inplace is refused. */
    ASSERT_OK(rdzv_msg_parse_join(BODY("{\"run_id\":\"j\",\"node_id\":\"n\",\"host\":\"h\","
                                       "\"nproc\":1,\"node_rank\":-1,\"min\":1,\"max\":1,"
                                       "\"last_call_ms\":0,\"max_restarts\":0}"),
                                  &b, err, sizeof(err)));
    ASSERT_TRUE(!b.inplace);
    ASSERT_REFUSED(rdzv_msg_parse_join(BODY("{\"run_id\":\"j\",\"node_id\":\"n\",\"host\":\"h\","
                                            "\"nproc\":1,\"node_rank\":-1,\"min\":1,\"max\":1,"
                                            "\"last_call_ms\":0,\"max_restarts\":0,"
                                            "\"recovery\":\"sometimes\"}"),
                                       &b, err, sizeof(err)));
    a.nproc = 0;
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_REFUSED(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    rdzv_buf_free(&out);
}

static void test_round_round_trip(void)
{
    struct rdzv_round *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_TRUE(a && b);
    *a = (struct rdzv_round){.generation = 2, .node_rank = 1, .nnodes = 2, .rank_offset = 4,
                             .world_size = 8, .master_addr = "10.0.0.1", .master_port = 29501,
                             .restart_count = 1, .max_restarts = 3, .n_ids = 1};
    memcpy(a->ids[0], HEX256, sizeof(HEX256));
    ASSERT_OK(rdzv_msg_put_round(&out, a));
    body = frame_body(&out, RDZV_MSG_ROUND, &len);
    ASSERT_OK(rdzv_msg_parse_round(body, len, b, err, sizeof(err)));
    ASSERT_EQ(b->n_ids, 1);
    ASSERT_EQ(strcmp(b->ids[0], HEX256), 0);
    ASSERT_EQ(strcmp(b->master_addr, "10.0.0.1"), 0);
    ASSERT_TRUE(b->generation == 2 && b->rank_offset == 4 && b->restart_count == 1);
    rdzv_buf_free(&out);
    a->ids[0][7] = 'x';
    ASSERT_OK(rdzv_msg_put_round(&out, a));
    body = frame_body(&out, RDZV_MSG_ROUND, &len);
    ASSERT_REFUSED(rdzv_msg_parse_round(body, len, b, err, sizeof(err)));
    rdzv_buf_free(&out);
    free(a);
    free(b);
}

static void test_worker_exit_and_event(void)
{
    struct rdzv_worker_exit w = {.generation = 3, .rank = 2, .local_rank = 0, .exit_code = 1,
                                 .time = 1763784970.25, .host = "n"},
                            w2;
    struct rdzv_event e = {.type = "restart", .generation = 3, .summary = "root cause: x"}, e2;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_worker_exit(&out, &w));
    body = frame_body(&out, RDZV_MSG_WORKER_EXIT, &len);
    ASSERT_OK(rdzv_msg_parse_worker_exit(body, len, &w2, err, sizeof(err)));
    ASSERT_TRUE(w2.time == w.time && w2.generation == 3 && w2.rank == 2);
    rdzv_buf_free(&out);
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    body = frame_body(&out, RDZV_MSG_EVENT, &len);
    ASSERT_OK(rdzv_msg_parse_event(body, len, &e2, err, sizeof(err)));
    ASSERT_EQ(strcmp(e2.summary, e.summary), 0);
    ASSERT_EQ(strcmp(e2.type, "restart"), 0);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_worker_exit(BODY("{\"generation\":1,\"rank\":0,\"local_rank\":0,"
                                                   "\"exit_code\":1,\"signal\":0,\"time\":-1}"),
                                              &w2, err, sizeof(err)));
}

/* WORKER_EXIT's optional reason: sent only when set (the bytes of a report without one are
 * unchanged), read back, bounded. */
static void test_worker_exit_reason(void)
{
    struct rdzv_worker_exit w = {.generation = 4, .rank = 5, .local_rank = 1, .exit_code = 137,
                                 .signal = 9, .time = 1.5, .host = "nodeB",
                                 .reason = "made no progress for 60 s after step 1234"},
                            w2;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char big[400];

    ASSERT_OK(rdzv_msg_put_worker_exit(&out, &w));
    body = frame_body(&out, RDZV_MSG_WORKER_EXIT, &len);
    ASSERT_OK(rdzv_msg_parse_worker_exit(body, len, &w2, err, sizeof(err)));
    ASSERT_EQ(strcmp(w2.reason, w.reason), 0);
    ASSERT_EQ(strcmp(w2.host, "nodeB"), 0);
    rdzv_buf_free(&out);
    w.reason[0] = '\0';
    ASSERT_OK(rdzv_msg_put_worker_exit(&out, &w));
    body = frame_body(&out, RDZV_MSG_WORKER_EXIT, &len);
    ASSERT_TRUE(memmem(body, len, "reason", 6) == NULL);
    ASSERT_OK(rdzv_msg_parse_worker_exit(body, len, &w2, err, sizeof(err)));
    ASSERT_EQ(w2.reason[0], '\0');
    rdzv_buf_free(&out);
    memset(big, 'x', sizeof(big));
    snprintf(big, sizeof(big), "{\"generation\":1,\"rank\":0,\"local_rank\":0,\"exit_code\":1,"
             "\"signal\":0,\"reason\":\"%0300d\"}", 0);
    ASSERT_REFUSED(rdzv_msg_parse_worker_exit(BODY(big), &w2, err, sizeof(err)));
}


/* base with the first `from` replaced by `to` (a fresh string to free). */
static char *with(const char *base, const char *from, const char *to)
{
    const char *at = strstr(base, from);
    size_t n = strlen(base) + strlen(to) + 1;
    char *out = malloc(n);

    ASSERT_NOT_NULL(at);
    ASSERT_NOT_NULL(out);
    snprintf(out, n, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    return out;
}

/* "x" repeated n times, as a JSON string member value (no quotes), to free. */
static char *xs(size_t n)
{
    char *out = malloc(n + 1);

    ASSERT_NOT_NULL(out);
    memset(out, 'x', n);
    out[n] = '\0';
    return out;
}

typedef int (*parse_fn)(const char *body);

/* Each {from, to} edit of base must be refused by parse (and base itself accepted: parsed
 * last, so its values are what the caller's struct holds). */
struct edit {
    const char *from, *to;
};
static void assert_edits_refused(parse_fn parse, const char *base, const struct edit *e, size_t n)
{
    ASSERT_OK(parse(base));
    for (size_t i = 0; i < n; i++) {
        char *b = with(base, e[i].from, e[i].to);

        snprintf(tap_note, sizeof(tap_note), "edit %zu: %s -> %s", i, e[i].from, e[i].to);
        err[0] = '\0';
        ASSERT_EQ(parse(b), -EBADMSG);
        ASSERT_TRUE(err[0] != '\0');
        free(b);
    }
    tap_note[0] = '\0';
    ASSERT_OK(parse(base)); /* leave base's values in the caller's struct */
}

static void test_hello(void)
{
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char text[128];

    ASSERT_OK(rdzv_msg_put_hello(&out, "agent 1"));
    body = frame_body(&out, RDZV_MSG_HELLO, &len);
    ASSERT_OK(rdzv_msg_parse_hello(body, len, err, sizeof(err)));
    ASSERT_TRUE(memmem(body, len, "\"peer\":\"agent 1\"", 16) != NULL);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY(""), err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY("[]"), err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY("{\"magic\":\"rdzv\"}"), err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY("{\"magic\":1,\"version\":1}"), err, sizeof(err)));
    snprintf(text, sizeof(text), "{\"magic\":\"rdzx\",\"version\":%d}", RDZV_PROTO_VERSION);
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY(text), err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "bad magic 'rdzx'") != NULL);
    snprintf(text, sizeof(text), "{\"magic\":\"rdzv\",\"version\":%d}", RDZV_PROTO_VERSION + 1);
    ASSERT_REFUSED(rdzv_msg_parse_hello(BODY(text), err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "protocol version") != NULL);
    snprintf(text, sizeof(text), "{\"magic\":\"rdzv\",\"version\":%d}", RDZV_PROTO_VERSION);
    ASSERT_OK(rdzv_msg_parse_hello(BODY(text), err, sizeof(err)));
}

static void test_nccl_mode_names(void)
{
    enum rdzv_nccl_mode m;

    for (int i = RDZV_NCCL_OFF; i <= RDZV_NCCL_REQUIRED; i++) {
        ASSERT_OK(rdzv_nccl_mode_parse(rdzv_nccl_mode_name((enum rdzv_nccl_mode)i), &m));
        ASSERT_EQ(m, i);
    }
    ASSERT_EQ(strcmp(rdzv_nccl_mode_name((enum rdzv_nccl_mode)3), "?"), 0);
    ASSERT_EQ(rdzv_nccl_mode_parse("?", &m), -EINVAL);
    ASSERT_EQ(rdzv_nccl_mode_parse("Auto", &m), -EINVAL);
}

#define SECRET64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define JOIN_OK                                                                                    \
    "{\"run_id\":\"j\",\"node_id\":\"n\",\"host\":\"h\",\"nproc\":1,\"node_rank\":-1,\"min\":1,"  \
    "\"max\":1,\"last_call_ms\":0,\"max_restarts\":0,\"nccl\":\"off\",\"nccl_ids\":1,"             \
    "\"heartbeat_timeout_ms\":100,\"join_timeout_ms\":0,\"secret\":\"" SECRET64 "\","             \
    "\"resume\":{\"generation\":1,\"node_rank\":0,\"nnodes\":1,\"rank_offset\":0,"                 \
    "\"world_size\":1,\"restart_count\":0,\"master_port\":0}}"

static struct rdzv_join join_out;
static int parse_join(const char *b)
{
    return rdzv_msg_parse_join(BODY(b), &join_out, err, sizeof(err));
}

static void test_join_fields(void)
{
    static const struct edit bad[] = {
        {"\"run_id\":\"j\"", "\"run_id\":\"\""},
        {"\"run_id\":\"j\"", "\"run_id\":1"},
        {"\"node_id\":\"n\",", ""},
        {"\"nproc\":1", "\"nproc\":0"},
        {"\"nproc\":1", "\"nproc\":1025"},
        {"\"node_rank\":-1", "\"node_rank\":-2"},
        {"\"min\":1", "\"min\":0"},
        {"\"max\":1", "\"max\":0"},
        {"\"min\":1,\"max\":1", "\"min\":100001,\"max\":100001"},
        {"\"last_call_ms\":0", "\"last_call_ms\":-1"},
        {"\"max_restarts\":0", "\"max_restarts\":-1"},
        {"\"nccl\":\"off\"", "\"nccl\":\"on\""},
        {"\"nccl_ids\":1", "\"nccl_ids\":0"},
        {"\"nccl_ids\":1", "\"nccl_ids\":65"},
        {"\"heartbeat_timeout_ms\":100", "\"heartbeat_timeout_ms\":99"},
        {"\"heartbeat_timeout_ms\":100", "\"heartbeat_timeout_ms\":3600001"},
        {"\"join_timeout_ms\":0", "\"join_timeout_ms\":-1"},
        {"\"join_timeout_ms\":0", "\"join_timeout_ms\":86400001"},
        {"\"secret\":\"0", "\"secret\":\""},      /* 63 digits */
        {"\"secret\":\"0", "\"secret\":\"A"},     /* upper case */
        {"\"secret\":\"0", "\"secret\":\"00"},    /* 65 digits */
        {"\"generation\":1", "\"generation\":0"},
        {"\"nnodes\":1", "\"nnodes\":0"},
        {"\"node_rank\":0,\"nnodes\":1", "\"node_rank\":-1,\"nnodes\":1"},
        {"\"node_rank\":0,\"nnodes\":1", "\"node_rank\":1,\"nnodes\":1"},
        {"\"rank_offset\":0", "\"rank_offset\":-1"},
        {"\"world_size\":1", "\"world_size\":0"},
        {"\"rank_offset\":0", "\"rank_offset\":1"}, /* offset >= world size */
        {"\"restart_count\":0", "\"restart_count\":-1"},
        {"\"master_port\":0", "\"master_port\":-1"},
        {"\"master_port\":0", "\"master_port\":65536"},
        {"\"restart_count\":0,", ""},
        {"\"resume\":{", "\"resume\":{\"left\":1,"},
        {"\"max_restarts\":0", "\"max_restarts\":0,\"bad_node_window\":-1"},
        {"\"max_restarts\":0", "\"max_restarts\":0,\"bad_node_window\":2592001"},
        {"\"max_restarts\":0", "\"max_restarts\":0,\"bad_node_window\":1,\"bad_node_failures\":33"},
        {"\"max_restarts\":0", "\"max_restarts\":0,\"restart_backoff\":-1"},
        {"\"max_restarts\":0", "\"max_restarts\":0,\"restart_backoff\":3601"},
    };
    char *b, *x;

    assert_edits_refused(parse_join, JOIN_OK, bad, sizeof(bad) / sizeof(bad[0]));
    ASSERT_EQ(strcmp(join_out.secret, SECRET64), 0);
    ASSERT_EQ(join_out.resume.generation, 1);
    ASSERT_EQ(join_out.nccl, RDZV_NCCL_OFF);
    ASSERT_EQ(join_out.heartbeat_timeout_ms, 100);
    /* The other ends of the ranges are accepted. */
    b = with(JOIN_OK, "\"nproc\":1", "\"nproc\":1024");
    ASSERT_OK(parse_join(b));
    ASSERT_EQ(join_out.nproc, RDZV_NPROC_MAX);
    free(b);
    b = with(JOIN_OK, "\"heartbeat_timeout_ms\":100,\"join_timeout_ms\":0",
             "\"heartbeat_timeout_ms\":3600000,\"join_timeout_ms\":86400000,\"nccl_ids\":64,"
             "\"max\":100000");
    x = with(b, "\"nccl_ids\":1,", "");
    free(b);
    b = with(x, "\"max\":1,", "");
    free(x);
    ASSERT_OK(parse_join(b));
    ASSERT_TRUE(join_out.heartbeat_timeout_ms == 3600000 && join_out.join_timeout_ms == 86400000);
    ASSERT_TRUE(join_out.nccl_ids == RDZV_MAX_NCCL_IDS && join_out.max == 100000);
    free(b);
    b = with(JOIN_OK, "\"master_port\":0", "\"master_port\":65535,\"left\":true");
    ASSERT_OK(parse_join(b));
    ASSERT_TRUE(join_out.resume.master_port == 65535 && join_out.resume.left);
    free(b);
    /* Strings one byte past their fields; at the limit they pass. */
    {
        static const struct {
            const char *from, *name;
            size_t max;
        } f[] = {{"\"run_id\":\"j\"", "run_id", RDZV_ID_MAX},
                 {"\"node_id\":\"n\"", "node_id", RDZV_ID_MAX},
                 {"\"host\":\"h\"", "host", RDZV_HOST_MAX}};
        for (size_t i = 0; i < 3; i++)
            for (size_t extra = 0; extra < 2; extra++) {
                char *v = xs(f[i].max + extra), to[400];

                snprintf(to, sizeof(to), "\"%s\":\"%s\"", f[i].name, v);
                b = with(JOIN_OK, f[i].from, to);
                if (extra) {
                    ASSERT_EQ(parse_join(b), -EBADMSG);
                    ASSERT_TRUE(strstr(err, f[i].name) != NULL);
                } else {
                    ASSERT_OK(parse_join(b));
                    ASSERT_EQ(strcmp(i == 0 ? join_out.run_id : i == 1 ? join_out.node_id
                                                                       : join_out.host, v), 0);
                }
                free(b);
                free(v);
            }
    }
}

/* JOIN's "straggler": put and parsed back; absent (an older agent): nobody scored; out of
 * range, refused. */
static void test_join_straggler(void)
{
    static const struct edit bad[] = {
        {"\"factor\":1.5", "\"factor\":1.0"},
        {"\"factor\":1.5", "\"factor\":100.5"},
        {"\"factor\":1.5", "\"factor\":\"big\""},
        {"\"window_ms\":30000", "\"window_ms\":999"},
        {"\"window_ms\":30000", "\"window_ms\":86400001"},
        {"\"action\":\"aside\"", "\"action\":\"kill\""},
        {"\"action\":\"aside\"", "\"action\":1"},
        {",\"action\":\"aside\"", ""},
    };
    struct rdzv_join a = {.run_id = "job", .node_id = "n-1", .host = "h", .nproc = 1,
                          .node_rank = -1, .min = 1, .max = 4, .nccl_ids = 1,
                          .heartbeat_timeout_ms = 5000, .straggler_factor = 1.25,
                          .straggler_window_ms = 5000, .straggler_aside = true};
    struct rdzv_join b;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char *j;

    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    ASSERT_TRUE(b.straggler_factor == 1.25 && b.straggler_window_ms == 5000 && b.straggler_aside);
    rdzv_buf_free(&out);
    ASSERT_OK(parse_join(JOIN_OK));
    ASSERT_TRUE(join_out.straggler_factor == 0 && !join_out.straggler_aside);
    j = with(JOIN_OK, "\"nproc\":1", "\"nproc\":1,\"straggler\":{\"factor\":1.5,"
                                     "\"window_ms\":30000,\"action\":\"aside\"}");
    assert_edits_refused(parse_join, j, bad, sizeof(bad) / sizeof(bad[0]));
    ASSERT_TRUE(join_out.straggler_factor == 1.5 && join_out.straggler_window_ms == 30000);
    free(j);
}

/* JOIN's secret and a fresh join (no resume) survive put and parse. */
static void test_join_secret_round_trip(void)
{
    struct rdzv_join a = {.run_id = "job", .node_id = "n-2", .host = "h2", .nproc = 2,
                          .node_rank = 0, .min = 1, .max = 2, .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1, .rank_hint = true, .heartbeat_timeout_ms = 100,
                          .join_timeout_ms = 0, .secret = SECRET64},
                     b;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_TRUE(memmem(body, len, "resume", 6) == NULL);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(strcmp(b.secret, SECRET64), 0);
    ASSERT_EQ(b.resume.generation, 0);
    ASSERT_TRUE(b.rank_hint && !b.scale_up_now && b.nccl == RDZV_NCCL_OFF);
    ASSERT_EQ(b.node_rank, 0);
    ASSERT_EQ(strcmp(b.host, "h2"), 0);
    /* No secret: none on the wire, "" back. */
    a.secret[0] = '\0';
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_TRUE(memmem(body, len, "secret", 6) == NULL);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(b.secret[0], '\0');
    ASSERT_TRUE(!b.host_store);
    ASSERT_TRUE(memmem(body, len, "host_store", 10) == NULL);
    rdzv_buf_free(&out);
    /* 1.4: host_store, sent only when set. */
    a.host_store = true;
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOIN, &len);
    ASSERT_OK(rdzv_msg_parse_join(body, len, &b, err, sizeof(err)));
    ASSERT_TRUE(b.host_store);
    rdzv_buf_free(&out);
}

/* JOINED's secret (1.2): sent only when set, read back, its form checked. */
static void test_joined_secret(void)
{
    struct rdzv_joined a = {.run_id = "r", .waiting = 1, .generation = 2, .recovery = "restart",
                            .secret = SECRET64},
                       b;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char *big, text[400];

    ASSERT_OK(rdzv_msg_put_joined(&out, &a));
    body = frame_body(&out, RDZV_MSG_JOINED, &len);
    ASSERT_OK(rdzv_msg_parse_joined(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(strcmp(b.secret, SECRET64), 0);
    ASSERT_EQ(strcmp(b.recovery, "restart"), 0);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"secret\":\"abc\"}"), &b, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"secret\":\"" SECRET64 "0\"}"), &b, err,
                                         sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY("{\"secret\":1}"), &b, err, sizeof(err)));
    big = xs(RDZV_ID_MAX + 1);
    snprintf(text, sizeof(text), "{\"run_id\":\"%s\"}", big);
    ASSERT_REFUSED(rdzv_msg_parse_joined(BODY(text), &b, err, sizeof(err)));
    free(big);
}

#define ROUND_OK                                                                                   \
    "{\"generation\":0,\"node_rank\":0,\"nnodes\":1,\"rank_offset\":0,\"world_size\":1,"           \
    "\"master_addr\":\"a\",\"master_port\":1,\"restart_count\":0,\"max_restarts\":0,"              \
    "\"nccl_ids\":[]}"

static struct rdzv_round *round_out;
static int parse_round(const char *b)
{
    return rdzv_msg_parse_round(BODY(b), round_out, err, sizeof(err));
}

static void test_round_fields(void)
{
    static const struct edit bad[] = {
        {"\"generation\":0", "\"generation\":-1"},
        {"\"node_rank\":0", "\"node_rank\":-1"},
        {"\"nnodes\":1", "\"nnodes\":0"},
        {"\"node_rank\":0", "\"node_rank\":1"},
        {"\"rank_offset\":0", "\"rank_offset\":-1"},
        {"\"world_size\":1", "\"world_size\":0"},
        {"\"master_port\":1", "\"master_port\":0"},
        {"\"master_port\":1", "\"master_port\":65536"},
        {"\"nccl_ids\":[]", "\"nccl_ids\":{}"},
        {"\"nccl_ids\":[]", "\"nccl_ids\":[\"\"]"},
        {"\"master_addr\":\"a\"", "\"master_addr\":null"},
        {"\"max_restarts\":0,", ""},
    };
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char *b, *v, to[400];

    round_out = calloc(2, sizeof(*round_out));
    ASSERT_NOT_NULL(round_out);
    assert_edits_refused(parse_round, ROUND_OK, bad, sizeof(bad) / sizeof(bad[0]));
    ASSERT_EQ(round_out->n_ids, 0);
    ASSERT_EQ(round_out->master_port, 1);
    b = with(ROUND_OK, "\"master_port\":1", "\"master_port\":65535");
    ASSERT_OK(parse_round(b));
    ASSERT_EQ(round_out->master_port, 65535);
    free(b);
    /* master_addr at its limit and one past it. */
    v = xs(RDZV_HOST_MAX);
    snprintf(to, sizeof(to), "\"master_addr\":\"%s\"", v);
    b = with(ROUND_OK, "\"master_addr\":\"a\"", to);
    ASSERT_OK(parse_round(b));
    ASSERT_EQ(strcmp(round_out->master_addr, v), 0);
    free(b);
    snprintf(to, sizeof(to), "\"master_addr\":\"%sx\"", v);
    b = with(ROUND_OK, "\"master_addr\":\"a\"", to);
    ASSERT_EQ(parse_round(b), -EBADMSG);
    free(b);
    free(v);
    /* The most ids round-trip; one more is refused. */
    round_out[1] = (struct rdzv_round){.generation = 9, .nnodes = 1, .world_size = 1,
                                       .master_addr = "m", .master_port = 2,
                                       .n_ids = RDZV_MAX_NCCL_IDS};
    for (unsigned i = 0; i < RDZV_MAX_NCCL_IDS; i++) {
        memcpy(round_out[1].ids[i], HEX256, sizeof(HEX256));
        round_out[1].ids[i][0] = "0123456789abcdef"[i % 16];
    }
    ASSERT_OK(rdzv_msg_put_round(&out, &round_out[1]));
    body = frame_body(&out, RDZV_MSG_ROUND, &len);
    ASSERT_OK(rdzv_msg_parse_round(body, len, round_out, err, sizeof(err)));
    ASSERT_EQ(round_out->n_ids, RDZV_MAX_NCCL_IDS);
    for (unsigned i = 0; i < RDZV_MAX_NCCL_IDS; i++)
        ASSERT_EQ(strcmp(round_out->ids[i], round_out[1].ids[i]), 0);
    ASSERT_EQ(round_out->generation, 9);
    {
        char *s = malloc(len + sizeof(HEX256) + 8);

        ASSERT_NOT_NULL(s);
        memcpy(s, body, len - 2);
        snprintf(s + len - 2, sizeof(HEX256) + 8, ",\"%s\"]}", HEX256);
        ASSERT_EQ(parse_round(s), -EBADMSG);
        free(s);
    }
    rdzv_buf_free(&out);
    free(round_out);
}

#define EXIT_OK                                                                                    \
    "{\"generation\":0,\"rank\":0,\"local_rank\":0,\"exit_code\":255,\"signal\":64,"               \
    "\"time\":0,\"host\":\"h\",\"reason\":\"r\"}"

static struct rdzv_worker_exit exit_out;
static int parse_exit(const char *b)
{
    return rdzv_msg_parse_worker_exit(BODY(b), &exit_out, err, sizeof(err));
}

static void test_worker_exit_fields(void)
{
    static const struct edit bad[] = {
        {"\"generation\":0", "\"generation\":-1"},
        {"\"rank\":0", "\"rank\":-1"},
        {"\"local_rank\":0", "\"local_rank\":-1"},
        {"\"exit_code\":255", "\"exit_code\":256"},
        {"\"exit_code\":255", "\"exit_code\":-1"},
        {"\"signal\":64", "\"signal\":65"},
        {"\"signal\":64", "\"signal\":-1"},
        {"\"host\":\"h\"", "\"host\":\"h\\u0001\""},
        {"\"reason\":\"r\"", "\"reason\":\"r\\n\""},
        {"\"time\":0", "\"time\":1e11"},
        {"\"time\":0", "\"time\":\"0\""},
        {"\"host\":\"h\"", "\"host\":1"},
        {"\"signal\":64,", ""},
    };
    char *v, to[400], *b;

    assert_edits_refused(parse_exit, EXIT_OK, bad, sizeof(bad) / sizeof(bad[0]));
    ASSERT_TRUE(exit_out.exit_code == 255 && exit_out.signal == 64 && exit_out.time == 0);
    ASSERT_EQ(strcmp(exit_out.reason, "r"), 0);
    v = xs(RDZV_HOST_MAX + 1);
    snprintf(to, sizeof(to), "\"host\":\"%s\"", v);
    b = with(EXIT_OK, "\"host\":\"h\"", to);
    ASSERT_EQ(parse_exit(b), -EBADMSG);
    ASSERT_TRUE(strstr(err, "'host'") != NULL);
    free(b);
    free(v);
}

static void test_event_fields(void)
{
    struct rdzv_event e = {.type = "failed", .generation = 7, .exit_code = 3}, e2;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char big[RDZV_SUMMARY_MAX + 200];

    /* A summary cut in the middle of a character is trimmed before it is sent. */
    memset(e.summary, 'a', sizeof(e.summary));
    memcpy(e.summary + sizeof(e.summary) - 2, "\xc3\xa9", 2);
    ASSERT_OK(rdzv_msg_put_event(&out, &e));
    body = frame_body(&out, RDZV_MSG_EVENT, &len);
    ASSERT_OK(rdzv_msg_parse_event(body, len, &e2, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(strlen(e2.summary), sizeof(e.summary) - 2);
    ASSERT_EQ(e2.exit_code, 3);
    ASSERT_EQ(e2.generation, 7);
    ASSERT_EQ(strcmp(e2.type, "failed"), 0);
    /* Optional members; a long summary is cut on receipt too. */
    ASSERT_OK(rdzv_msg_parse_event(BODY("{\"type\":\"restart\",\"generation\":1}"), &e2, err,
                                   sizeof(err)));
    ASSERT_TRUE(e2.exit_code == 0 && e2.summary[0] == '\0');
    snprintf(big, sizeof(big), "{\"type\":\"failed\",\"generation\":1,\"summary\":\"%0*d\"}",
             RDZV_SUMMARY_MAX + 50, 0);
    ASSERT_OK(rdzv_msg_parse_event(BODY(big), &e2, err, sizeof(err)));
    ASSERT_EQ(strlen(e2.summary), RDZV_SUMMARY_MAX);
    ASSERT_REFUSED(rdzv_msg_parse_event(BODY("{\"type\":\"0123456789abcdef\",\"generation\":1}"),
                                        &e2, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_event(BODY("{\"generation\":1}"), &e2, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_event(BODY("{\"type\":\"failed\"}"), &e2, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_event(BODY("[]"), &e2, err, sizeof(err)));
}

/* A follower's ERROR (1.3): "leader" round-trips; its type, length and characters are checked. */
static void test_redirect(void)
{
    struct rdzv_error e;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char leader[RDZV_ENDPOINT_MAX + 2], text[400];

    ASSERT_OK(rdzv_msg_put_redirect(&out, "10.0.0.2:29400", "not the leader (%d)", 3));
    body = frame_body(&out, RDZV_MSG_ERROR, &len);
    ASSERT_OK(rdzv_msg_parse_error(body, len, &e, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_TRUE(e.redirect);
    ASSERT_EQ(strcmp(e.leader, "10.0.0.2:29400"), 0);
    ASSERT_EQ(strcmp(e.error, "not the leader (3)"), 0);
    /* No leader known yet: still a redirect. */
    ASSERT_OK(rdzv_msg_put_redirect(&out, "", "electing"));
    body = frame_body(&out, RDZV_MSG_ERROR, &len);
    ASSERT_OK(rdzv_msg_parse_error(body, len, &e, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_TRUE(e.redirect && e.leader[0] == '\0');
    /* A plain ERROR is none. */
    ASSERT_OK(rdzv_msg_parse_error(BODY("{\"error\":\"x\"}"), &e, err, sizeof(err)));
    ASSERT_FALSE(e.redirect);
    /* The longest leader passes both ways; one more byte is refused both ways. */
    memset(leader, 'l', RDZV_ENDPOINT_MAX);
    leader[RDZV_ENDPOINT_MAX] = '\0';
    ASSERT_OK(rdzv_msg_put_redirect(&out, leader, "x"));
    body = frame_body(&out, RDZV_MSG_ERROR, &len);
    ASSERT_OK(rdzv_msg_parse_error(body, len, &e, err, sizeof(err)));
    ASSERT_EQ(strcmp(e.leader, leader), 0);
    rdzv_buf_free(&out);
    strcat(leader, "l");
    ASSERT_EQ(rdzv_msg_put_redirect(&out, leader, "x"), -EINVAL);
    ASSERT_EQ(rdzv_buf_avail(&out), 0);
    snprintf(text, sizeof(text), "{\"error\":\"x\",\"leader\":\"%s\"}", leader);
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY(text), &e, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY("{\"error\":\"x\",\"leader\":5}"), &e, err,
                                        sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY("{\"error\":\"x\",\"leader\":\"h\\u0007:1\"}"), &e,
                                        err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_error(BODY("{\"error\":\"x\",\"leader\":\"h:1\\u007f\"}"), &e,
                                        err, sizeof(err)));
}

/* REPLICA both ways and REPLICAS (1.5): what each side sends decodes to the same struct, and
 * what the receiver relies on is checked (ids, ports, endpoints an agent may connect to). */
static void test_replica(void)
{
    struct rdzv_replica q = {.id = 4, .port = 29400, .replicas = 3}, a;
    struct rdzv_replicas rs = {.n = 2}, rb;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    uint32_t len;
    char many[512];

    ASSERT_OK(rdzv_msg_put_replica(&out, &q));
    body = frame_body(&out, RDZV_MSG_REPLICA, &len);
    ASSERT_EQ(memcmp(body, "{\"id\":4,\"port\":29400,\"replicas\":3}", len), 0);
    ASSERT_OK(rdzv_msg_parse_replica(body, len, &a, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(memcmp(&a, &q, sizeof(q)), 0);
    /* The agent's answers: where it listens, or why it cannot. */
    ASSERT_OK(rdzv_msg_parse_replica(BODY("{\"id\":4,\"endpoint\":\"[fd00::4]:29400\"}"), &a,
                                     err, sizeof(err)));
    ASSERT_TRUE(a.id == 4 && a.port == 0 && !a.failed);
    ASSERT_EQ(strcmp(a.endpoint, "[fd00::4]:29400"), 0);
    ASSERT_OK(rdzv_msg_parse_replica(BODY("{\"id\":4,\"error\":\"no rdzvd\"}"), &a, err,
                                     sizeof(err)));
    ASSERT_TRUE(a.failed && strcmp(a.error, "no rdzvd") == 0 && !a.endpoint[0]);
    ASSERT_OK(rdzv_msg_put_replica(&out, &a));
    body = frame_body(&out, RDZV_MSG_REPLICA, &len);
    ASSERT_EQ(memcmp(body, "{\"id\":4,\"error\":\"no rdzvd\"}", len), 0);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":4}"), &a, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":0,\"port\":1,\"replicas\":3}"), &a,
                                          err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":1073741825,\"port\":1,\"replicas\":3}"),
                                          &a, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"port\":65535,\"replicas\":3}"), &a,
                                          err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"port\":29400}"), &a, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"port\":29400,\"replicas\":8}"), &a,
                                          err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"endpoint\":\"h\"}"), &a, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"endpoint\":\"a,b:1\"}"), &a, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"endpoint\":\"h:65536\"}"), &a, err,
                                          sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replica(BODY("{\"id\":2,\"endpoint\":\"h :1\"}"), &a, err,
                                          sizeof(err)));
    /* REPLICAS */
    snprintf(rs.endpoint[0], sizeof(rs.endpoint[0]), "10.0.0.1:29400");
    snprintf(rs.endpoint[1], sizeof(rs.endpoint[1]), "node2:29400");
    ASSERT_OK(rdzv_msg_put_replicas(&out, &rs));
    body = frame_body(&out, RDZV_MSG_REPLICAS, &len);
    ASSERT_EQ(memcmp(body, "{\"endpoints\":[\"10.0.0.1:29400\",\"node2:29400\"]}", len), 0);
    ASSERT_OK(rdzv_msg_parse_replicas(body, len, &rb, err, sizeof(err)));
    rdzv_buf_free(&out);
    ASSERT_EQ(memcmp(&rb, &rs, sizeof(rs)), 0);
    ASSERT_REFUSED(rdzv_msg_parse_replicas(BODY("{\"endpoints\":[]}"), &rb, err, sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replicas(BODY("{\"endpoints\":\"h:1\"}"), &rb, err,
                                           sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_replicas(BODY("{\"endpoints\":[1]}"), &rb, err, sizeof(err)));
    snprintf(many, sizeof(many), "{\"endpoints\":[%s]}",
             "\"h:1\",\"h:2\",\"h:3\",\"h:4\",\"h:5\",\"h:6\",\"h:7\",\"h:8\"");
    ASSERT_REFUSED(rdzv_msg_parse_replicas(BODY(many), &rb, err, sizeof(err)));
    /* JOIN host_replica: sent only when set, read back. */
    {
        struct rdzv_join j = {.run_id = "r", .node_id = "n", .host = "h", .nproc = 1,
                              .node_rank = -1, .min = 1, .max = 1, .nccl_ids = 1,
                              .heartbeat_timeout_ms = 5000, .host_replica = true}, k;

        ASSERT_OK(rdzv_msg_put_join(&out, &j));
        body = frame_body(&out, RDZV_MSG_JOIN, &len);
        ASSERT_TRUE(memmem(body, len, "\"host_replica\":true", 19) != NULL);
        ASSERT_OK(rdzv_msg_parse_join(body, len, &k, err, sizeof(err)));
        rdzv_buf_free(&out);
        ASSERT_TRUE(k.host_replica);
        j.host_replica = false;
        ASSERT_OK(rdzv_msg_put_join(&out, &j));
        body = frame_body(&out, RDZV_MSG_JOIN, &len);
        ASSERT_TRUE(memmem(body, len, "host_replica", 12) == NULL);
        rdzv_buf_free(&out);
    }
}

/* CANCEL_JOB and its reply (1.7, the operator's): round trip, the run id's bounds, a reason cut
 * rather than refused, the reply's error optional. */
static void test_cancel_job(void)
{
    struct rdzv_cancel_job a = {.run_id = "job-7", .reason = "maintenance"}, b;
    struct rdzv_cancel_job_reply ra = {.cancelled = false, .error = "no such job"}, rb;
    struct rdzv_buf out = {0};
    const uint8_t *body;
    char big[RDZV_ID_MAX + 40];
    uint32_t len;

    ASSERT_OK(rdzv_msg_put_cancel_job(&out, &a));
    body = frame_body(&out, RDZV_MSG_CANCEL_JOB, &len);
    ASSERT_OK(rdzv_msg_parse_cancel_job(body, len, &b, err, sizeof(err)));
    ASSERT_EQ(strcmp(b.run_id, "job-7"), 0);
    ASSERT_EQ(strcmp(b.reason, "maintenance"), 0);
    rdzv_buf_free(&out);
    ASSERT_REFUSED(rdzv_msg_parse_cancel_job(BODY("{\"run_id\":\"\",\"reason\":\"\"}"), &b, err,
                                             sizeof(err)));
    ASSERT_REFUSED(rdzv_msg_parse_cancel_job(BODY("{\"run_id\":\"j\"}"), &b, err, sizeof(err)));
    snprintf(big, sizeof(big), "{\"run_id\":\"%0*d\",\"reason\":\"\"}", RDZV_ID_MAX + 1, 0);
    ASSERT_REFUSED(rdzv_msg_parse_cancel_job((const uint8_t *)big, strlen(big), &b, err,
                                             sizeof(err)));
    ASSERT_OK(rdzv_msg_put_cancel_job_reply(&out, &ra));
    body = frame_body(&out, RDZV_MSG_CANCEL_JOB_REPLY, &len);
    ASSERT_OK(rdzv_msg_parse_cancel_job_reply(body, len, &rb, err, sizeof(err)));
    ASSERT_TRUE(!rb.cancelled && strcmp(rb.error, "no such job") == 0 && !rb.denied);
    rdzv_buf_free(&out);
    /* 1.13: refused as not the operator's (rdzvctl exits 4), both ways, for both replies. */
    ra.denied = true;
    ASSERT_OK(rdzv_msg_put_cancel_job_reply(&out, &ra));
    body = frame_body(&out, RDZV_MSG_CANCEL_JOB_REPLY, &len);
    ASSERT_OK(rdzv_msg_parse_cancel_job_reply(body, len, &rb, err, sizeof(err)));
    ASSERT_TRUE(!rb.cancelled && rb.denied);
    rdzv_buf_free(&out);
    {
        struct rdzv_release_reply qa = {.error = "not yours", .denied = true}, qb;

        ASSERT_OK(rdzv_msg_put_release_reply(&out, &qa));
        body = frame_body(&out, RDZV_MSG_RELEASE_REPLY, &len);
        ASSERT_OK(rdzv_msg_parse_release_reply(body, len, &qb, err, sizeof(err)));
        ASSERT_TRUE(qb.denied && qb.released == 0 && strcmp(qb.error, "not yours") == 0);
        rdzv_buf_free(&out);
        ASSERT_OK(rdzv_msg_parse_release_reply(BODY("{\"released\":0}"), &qb, err, sizeof(err)));
        ASSERT_TRUE(!qb.denied);
    }
    ASSERT_OK(rdzv_msg_parse_cancel_job_reply(BODY("{\"cancelled\":true}"), &rb, err,
                                              sizeof(err)));
    ASSERT_TRUE(rb.cancelled && rb.error[0] == '\0' && !rb.denied);
    ASSERT_REFUSED(rdzv_msg_parse_cancel_job_reply(BODY("{\"cancelled\":1}"), &rb, err,
                                                   sizeof(err)));
    ASSERT_EQ(rdzv_msg_max_body(RDZV_MSG_CANCEL_JOB), 4u << 10);
    ASSERT_EQ(strcmp(rdzv_msg_name(RDZV_MSG_CANCEL_JOB_REPLY), "CANCEL_JOB_REPLY"), 0);
}

int main(void)
{
    TEST(test_cancel_job);
    TEST(test_encoders_bytes);
    TEST(test_joined);
    TEST(test_nccl_request);
    TEST(test_nccl_id);
    TEST(test_nccl_id_generation);
    TEST(test_nccl_id_store);
    TEST(test_generation_only);
    TEST(test_heartbeat_progress);
    TEST(test_heartbeat_compute);
    TEST(test_leave);
    TEST(test_status_and_error);
    TEST(test_join_round_trip);
    TEST(test_round_round_trip);
    TEST(test_worker_exit_and_event);
    TEST(test_worker_exit_reason);
    TEST(test_hello);
    TEST(test_nccl_mode_names);
    TEST(test_join_fields);
    TEST(test_join_straggler);
    TEST(test_join_secret_round_trip);
    TEST(test_joined_secret);
    TEST(test_round_fields);
    TEST(test_worker_exit_fields);
    TEST(test_event_fields);
    TEST(test_redirect);
    TEST(test_replica);
    return tap_done();
}
