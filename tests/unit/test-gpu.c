/* SPDX-License-Identifier: Apache-2.0 */
/* test-gpu.c: GPU UUIDs (proto/rdzv-gpu.h) and JOIN's gpu_uuids (protocol 1.8): the shape each
 * parser takes and refuses, sets (each UUID once, bounded), and JOIN with and without them both
 * ways (an agent that predates them sends none; one that has them adds one member only). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "../tap.h"

#define U1 "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab"
#define U2 "GPU-00000000-1111-2222-3333-444444444444"

static char err[512];

/* JOIN's last member, as the agent writes it. */
#define WANT ",\"gpu_uuids\":[\"" U1 "\",\"" U2 "\"]}"

static struct rdzv_gpu_uuid uuid(const char *s)
{
    struct rdzv_gpu_uuid u;

    ASSERT_OK(rdzv_gpu_uuid_parse(s, strlen(s), &u));
    return u;
}

/* The shape, exactly: either case reads the same and prints lowercase; anything else is refused. */
static void test_uuid_shape(void)
{
    static const char *const bad[] = {
        "",
        "GPU-",
        "gpu-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab",
        "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789a",   /* short */
        "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789abc", /* long */
        "GPU-5f2e1a3b00c4d-4e5f-8a9b-0123456789ab",  /* a dash missing */
        "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ag",  /* not hex */
        "MIG-5f2e1a3b-0c4d-4e5f-8a9b-0123456789ab",  /* a MIG device: not a GPU */
        "GPU-5f2e1a3b-0c4d-4e5f-8a9b-0123456789a\n",
    };
    struct rdzv_gpu_uuid u = uuid("GPU-5F2E1A3B-0C4D-4E5F-8A9B-0123456789AB"), v = {{7}};
    char text[RDZV_GPU_UUID_LEN + 1];

    rdzv_gpu_uuid_format(&u, text);
    ASSERT_EQ(strcmp(text, U1), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(rdzv_gpu_uuid_parse(bad[i], strlen(bad[i]), &v), -EINVAL);
        ASSERT_EQ(v.b[0], 7); /* untouched */
    }
    /* Only len bytes are read: a prefix of a longer string. */
    ASSERT_OK(rdzv_gpu_uuid_parse(U1 "junk", RDZV_GPU_UUID_LEN, &v));
    ASSERT_EQ(memcmp(&u, &v, sizeof(u)), 0);
}

/* A set holds each UUID once, at most RDZV_GPU_UUIDS_MAX; common finds a shared one. */
static void test_set(void)
{
    struct rdzv_gpu_set a = {0}, b = {0};
    struct rdzv_gpu_uuid u1 = uuid(U1), u2 = uuid(U2), x;

    ASSERT_EQ(rdzv_gpu_set_add(&a, &u1), 0);
    ASSERT_EQ(rdzv_gpu_set_add(&a, &u1), 1);
    ASSERT_EQ(a.n, 1);
    ASSERT_EQ(rdzv_gpu_set_common(&a, &b), -1);
    ASSERT_EQ(rdzv_gpu_set_add(&b, &u2), 0);
    ASSERT_EQ(rdzv_gpu_set_common(&a, &b), -1);
    ASSERT_EQ(rdzv_gpu_set_add(&b, &u1), 0);
    ASSERT_EQ(rdzv_gpu_set_common(&a, &b), 0);
    ASSERT_EQ(rdzv_gpu_set_common(&b, &a), 1);
    ASSERT_TRUE(rdzv_gpu_set_remove(&b, &u2));
    ASSERT_FALSE(rdzv_gpu_set_remove(&b, &u2));
    ASSERT_EQ(b.n, 1);
    ASSERT_TRUE(rdzv_gpu_set_has(&b, &u1));
    for (unsigned i = a.n; i < RDZV_GPU_UUIDS_MAX; i++) {
        memset(&x, 0, sizeof(x));
        x.b[15] = (uint8_t)i;
        x.b[0] = 1;
        ASSERT_EQ(rdzv_gpu_set_add(&a, &x), 0);
    }
    x.b[14] = 1;
    ASSERT_EQ(rdzv_gpu_set_add(&a, &x), -ENOSPC);
    ASSERT_EQ(a.n, RDZV_GPU_UUIDS_MAX);
    ASSERT_TRUE(rdzv_gpu_set_valid(&a));
    a.u[1] = a.u[0];
    ASSERT_FALSE(rdzv_gpu_set_valid(&a));
    a.n = RDZV_GPU_UUIDS_MAX + 1;
    ASSERT_FALSE(rdzv_gpu_set_valid(&a));
}

/* RDZV_GPU_UUIDS: comma-separated, blanks and empty entries skipped, a UUID twice counted once;
 * a malformed entry or too many is refused, saying which. */
static void test_parse_list(void)
{
    struct rdzv_gpu_set s = {.n = 99};
    char *many;
    size_t off = 0;

    ASSERT_OK(rdzv_gpu_set_parse_list(" " U1 " ,, " U2 ",\t" U1 "\n", &s, err, sizeof(err)));
    ASSERT_EQ(s.n, 2);
    ASSERT_OK(rdzv_gpu_set_parse_list("", &s, err, sizeof(err)));
    ASSERT_EQ(s.n, 0);
    s.n = 5;
    ASSERT_EQ(rdzv_gpu_set_parse_list(U1 ",GPU-12", &s, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "entry 2, 'GPU-12', is not a GPU UUID") != NULL);
    ASSERT_EQ(s.n, 5); /* untouched */
    ASSERT_EQ(rdzv_gpu_set_parse_list("0,1", &s, err, sizeof(err)), -EINVAL);
    many = malloc((RDZV_GPU_UUIDS_MAX + 1) * (RDZV_GPU_UUID_LEN + 1) + 1);
    ASSERT_NOT_NULL(many);
    for (unsigned i = 0; i <= RDZV_GPU_UUIDS_MAX; i++)
        off += (size_t)sprintf(many + off, "%sGPU-00000000-0000-0000-0000-%012x", i ? "," : "", i);
    ASSERT_EQ(rdzv_gpu_set_parse_list(many, &s, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "more than 64 GPU UUIDs") != NULL);
    many[off - RDZV_GPU_UUID_LEN - 1] = '\0'; /* 64: the limit */
    ASSERT_OK(rdzv_gpu_set_parse_list(many, &s, err, sizeof(err)));
    ASSERT_EQ(s.n, RDZV_GPU_UUIDS_MAX);
    free(many);
}

static const char *const join_old =
    "{\"run_id\":\"j\",\"node_id\":\"n\",\"host\":\"h\",\"nproc\":1,\"node_rank\":-1,\"min\":1,"
    "\"max\":1,\"last_call_ms\":0,\"max_restarts\":0";

/* JOIN with gpu_uuids + "}" (or none), parsed. */
static int parse_join_with(const char *gpus, struct rdzv_join *j)
{
    char body[8192];

    snprintf(body, sizeof(body), "%s%s%s}", join_old, gpus ? ",\"gpu_uuids\":" : "",
             gpus ? gpus : "");
    err[0] = '\0';
    return rdzv_msg_parse_join((const uint8_t *)body, strlen(body), j, err, sizeof(err));
}

/* JOIN's gpu_uuids: written only when there are any (an older rdzvd ignores the member), read
 * back as sent; a JOIN without it (an older agent) has none; a malformed list refuses the JOIN
 * with a reason, never more than RDZV_GPU_UUIDS_MAX. */
static void test_join_gpu_uuids(void)
{
    struct rdzv_join a = {.run_id = "job",
                          .node_id = "n-1",
                          .host = "h",
                          .nproc = 8,
                          .node_rank = -1,
                          .min = 1,
                          .max = 4,
                          .max_restarts = 2,
                          .nccl = RDZV_NCCL_OFF,
                          .nccl_ids = 1,
                          .heartbeat_timeout_ms = 5000,
                          .join_timeout_ms = 600000};
    struct rdzv_join *b = calloc(1, sizeof(*b));
    struct rdzv_buf out = {0};
    const uint8_t *body = NULL;
    uint32_t len = 0;
    uint8_t op = 0;
    const char *why = NULL;
    char many[4096];
    size_t off = 0;

    ASSERT_NOT_NULL(b);
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    ASSERT_EQ(rdzv_frame_peek(rdzv_buf_head(&out), rdzv_buf_avail(&out), RDZV_MAX_MSG, &op, &body,
                              &len, &why),
              (ssize_t)rdzv_buf_avail(&out));
    ASSERT_TRUE(memmem(body, len, "gpu_uuids", 9) == NULL);
    ASSERT_OK(rdzv_msg_parse_join(body, len, b, err, sizeof(err)));
    ASSERT_EQ(b->gpus.n, 0);
    rdzv_buf_free(&out);
    a.gpus.u[0] = uuid(U1);
    a.gpus.u[1] = uuid(U2);
    a.gpus.n = 2;
    ASSERT_OK(rdzv_msg_put_join(&out, &a));
    ASSERT_EQ(rdzv_frame_peek(rdzv_buf_head(&out), rdzv_buf_avail(&out), RDZV_MAX_MSG, &op, &body,
                              &len, &why),
              (ssize_t)rdzv_buf_avail(&out));
    ASSERT_TRUE(memmem(body, len, WANT, strlen(WANT)) != NULL);
    ASSERT_OK(rdzv_msg_parse_join(body, len, b, err, sizeof(err)));
    ASSERT_EQ(b->gpus.n, 2);
    ASSERT_EQ(memcmp(&b->gpus.u[1], &a.gpus.u[1], sizeof(a.gpus.u[1])), 0);
    rdzv_buf_free(&out);
    /* An older agent's JOIN: none. Upper case reads the same. */
    ASSERT_OK(parse_join_with(NULL, b));
    ASSERT_EQ(b->gpus.n, 0);
    ASSERT_OK(parse_join_with("[\"GPU-5F2E1A3B-0C4D-4E5F-8A9B-0123456789AB\"]", b));
    ASSERT_EQ(memcmp(&b->gpus.u[0], &a.gpus.u[0], sizeof(a.gpus.u[0])), 0);
    ASSERT_OK(parse_join_with("[]", b));
    ASSERT_EQ(b->gpus.n, 0);
    /* Refused, saying why. */
    ASSERT_EQ(parse_join_with("\"" U1 "\"", b), -EBADMSG);
    ASSERT_TRUE(strstr(err, "'gpu_uuids' must be an array") != NULL);
    ASSERT_EQ(parse_join_with("[\"" U1 "\",7]", b), -EBADMSG);
    ASSERT_TRUE(strstr(err, "'gpu_uuids'[1] is not a GPU UUID") != NULL);
    ASSERT_EQ(parse_join_with("[\"GPU-1\"]", b), -EBADMSG);
    ASSERT_EQ(parse_join_with("[\"" U1 "\",\"" U1 "\"]", b), -EBADMSG);
    ASSERT_TRUE(strstr(err, "'gpu_uuids'[1] is given twice") != NULL);
    many[off++] = '[';
    for (unsigned i = 0; i <= RDZV_GPU_UUIDS_MAX; i++)
        off += (size_t)snprintf(many + off, sizeof(many) - off,
                                "%s\"GPU-00000000-0000-0000-0000-%012x\"", i ? "," : "", i);
    snprintf(many + off, sizeof(many) - off, "]");
    ASSERT_EQ(parse_join_with(many, b), -EBADMSG);
    ASSERT_TRUE(strstr(err, "at most 64") != NULL);
    free(b);
}

int main(void)
{
    TEST(test_uuid_shape);
    TEST(test_set);
    TEST(test_parse_list);
    TEST(test_join_gpu_uuids);
    return tap_done();
}
