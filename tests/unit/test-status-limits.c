/* SPDX-License-Identifier: Apache-2.0 */
/* test-status-limits.c: the status's figures of what rdzvd holds against its limits
 * (proto/rdzv-status-limits.c, rdzv-status.h): written only with a limit, read back, bounded. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/rdzv-status.h"
#include "../tap.h"

#define BODY(s) (const uint8_t *)(s), strlen(s)
#define NO_JOBS_HEAD                                                                               \
    "{\"daemon\":\"rdzvd\",\"version\":\"1\",\"port\":1,\"uptime_s\":3,\"stats\":"                 \
    "{\"connections\":0,\"accepted\":0,\"rejected\":0,\"protocol_errors\":0,\"requests\":0,"       \
    "\"main_store_keys\":0},\"jobs\":"

/* st as rdzvd sends it, compact; the caller frees it. */
static char *dump(const struct rdzv_status *st)
{
    json_t *o = rdzv_status_to_json(st);
    char *t = json_dumps(o, JSON_COMPACT);

    json_decref(o);
    ASSERT_NOT_NULL(t);
    return t;
}

/* What rdzvd holds against each limit: written only with a limit, read back, a negative or
 * malformed figure refused, and absent (an older rdzvd) read as 0. */
static void test_held_against_limits_round_trip(void)
{
    struct rdzv_status a, b;
    char err[256], *t;

    ASSERT_OK(rdzv_status_parse(BODY(NO_JOBS_HEAD "[]}"), &a, err, sizeof(err)));
    ASSERT_EQ(a.store_limit + a.fds_limit + a.input_limit + a.jobs_limit, 0);
    a.store_held = 96, a.store_limit = 4096, a.fds_held = 7, a.fds_limit = 400;
    a.input_held = 12, a.input_limit = 1 << 20, a.jobs_held = 3, a.jobs_waiting = 1;
    a.jobs_limit = 8;
    t = dump(&a);
    ASSERT_TRUE(strstr(t, "\"descriptors\":{\"held\":7,\"limit\":400}") != NULL);
    ASSERT_TRUE(strstr(t, "\"jobs_held\":{\"held\":3,\"waiting\":1,\"limit\":8}") != NULL);
    ASSERT_OK(rdzv_status_parse(BODY(t), &b, err, sizeof(err)));
    ASSERT_EQ(b.store_held, 96);
    ASSERT_EQ(b.fds_held, 7);
    ASSERT_EQ(b.fds_limit, 400);
    ASSERT_EQ(b.input_held, 12);
    ASSERT_EQ(b.input_limit, 1 << 20);
    ASSERT_EQ(b.jobs_waiting, 1);
    ASSERT_EQ(b.jobs_limit, 8);
    rdzv_status_free(&b);
    free(t);
    ASSERT_EQ(rdzv_status_parse(BODY(NO_JOBS_HEAD "[],\"descriptors\":{\"held\":-1,\"limit\":4}}"),
                                &b, err, sizeof(err)),
              -EBADMSG);
    ASSERT_TRUE(strstr(err, "descriptors") != NULL);
    rdzv_status_free(&b);
    ASSERT_EQ(rdzv_status_parse(BODY(NO_JOBS_HEAD "[],\"input_bytes\":{\"held\":\"x\"}}"), &b, err,
                                sizeof(err)),
              -EBADMSG);
    rdzv_status_free(&b);
    rdzv_status_free(&a);
}

/* Connections closed for their output: written once there is one, read back; absent (an older
 * rdzvd, or none yet) read as 0; negative refused. */
static void test_outbuf_closes_round_trip(void)
{
    struct rdzv_status a, b;
    char err[256], *t;

    ASSERT_OK(rdzv_status_parse(BODY(NO_JOBS_HEAD "[]}"), &a, err, sizeof(err)));
    ASSERT_EQ(a.outbuf_closes, 0);
    t = dump(&a);
    ASSERT_TRUE(strstr(t, "outbuf_closes") == NULL);
    free(t);
    a.outbuf_closes = 9;
    t = dump(&a);
    ASSERT_TRUE(strstr(t, "\"main_store_keys\":0,\"outbuf_closes\":9}") != NULL);
    ASSERT_OK(rdzv_status_parse(BODY(t), &b, err, sizeof(err)));
    ASSERT_EQ(b.outbuf_closes, 9);
    rdzv_status_free(&b);
    free(t);
    ASSERT_EQ(rdzv_status_parse(BODY("{\"daemon\":\"rdzvd\",\"version\":\"1\",\"port\":1,"
                                     "\"uptime_s\":3,\"stats\":{\"connections\":0,\"accepted\":0,"
                                     "\"rejected\":0,\"protocol_errors\":0,\"requests\":0,"
                                     "\"main_store_keys\":0,\"outbuf_closes\":-1},\"jobs\":[]}"),
                                &b, err, sizeof(err)),
              -EBADMSG);
    ASSERT_TRUE(strstr(err, "outbuf_closes") != NULL);
    rdzv_status_free(&b);
    rdzv_status_free(&a);
}

int main(void)
{
    TEST(test_held_against_limits_round_trip);
    TEST(test_outbuf_closes_round_trip);
    return tap_done();
}
