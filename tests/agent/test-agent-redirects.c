/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-redirects.c: torchrun's --redirects/--tee and --local-ranks-filter values
 * (agent-redirects.h), pure functions. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent/group/agent-redirects.h"
#include "../tap.h"

#define ASSERT_MASKS(m, ...)                                                                       \
    do {                                                                                           \
        const uint8_t want_[] = {__VA_ARGS__};                                                     \
        for (size_t i_ = 0; i_ < sizeof(want_); i_++)                                              \
            ASSERT_EQ((m)[i_], want_[i_]);                                                         \
    } while (0)

/* One value for every local rank. */
static void test_redirects_single_value(void)
{
    uint8_t m[4];

    for (char c = '0'; c <= '3'; c++) {
        char s[2] = {c, '\0'};

        memset(m, 9, sizeof(m));
        ASSERT_OK(agent_redirects_parse(s, 4, m, NULL));
        ASSERT_MASKS(m, c - '0', c - '0', c - '0', c - '0');
    }
    ASSERT_EQ(AGENT_STD_OUT | AGENT_STD_ERR, 3);
}

/* Per local rank: those not named get 0; ranks past nproc are ignored (torch ignores them). */
static void test_redirects_mapping(void)
{
    uint8_t m[4];

    memset(m, 9, sizeof(m));
    ASSERT_OK(agent_redirects_parse("0:1,1:2", 4, m, NULL));
    ASSERT_MASKS(m, 1, 2, 0, 0);
    ASSERT_OK(agent_redirects_parse("3:3,0:0,12:1", 4, m, NULL));
    ASSERT_MASKS(m, 0, 0, 0, 3);
    ASSERT_OK(agent_redirects_parse("2:1,2:2", 4, m, NULL)); /* the last one wins */
    ASSERT_MASKS(m, 0, 0, 2, 0);
}

/* Anything else is refused, with a message, and the array left alone. */
static void test_redirects_invalid(void)
{
    static const char *const bad[] = {
        "",     "4",       "01", "-1",   "1:",   ":1",  "0:4",           "0:1,",
        ",0:1", "0:1;1:2", "a",  "0:1 ", "0:12", "1,2", "99999999999:1", NULL};
    uint8_t m[2] = {7, 7};
    const char *msg;

    for (size_t i = 0; bad[i]; i++) {
        snprintf(tap_note, sizeof(tap_note), "value \"%s\"", bad[i]);
        msg = NULL;
        ASSERT_EQ(agent_redirects_parse(bad[i], 2, m, &msg), -EINVAL);
        ASSERT_TRUE(msg && strstr(msg, "0:1,1:2"));
        ASSERT_MASKS(m, 7, 7);
    }
    tap_note[0] = '\0';
    ASSERT_EQ(agent_redirects_parse(NULL, 2, m, NULL), -EINVAL);
}

static void test_ranks_filter(void)
{
    static const char *const bad[] = {"", ",", "0,", ",1", "a", "1;2", "-1", " 1", NULL};
    bool shown[4];
    const char *msg;

    memset(shown, 1, sizeof(shown));
    ASSERT_OK(agent_ranks_filter_parse("0", 4, shown, NULL));
    ASSERT_TRUE(shown[0] && !shown[1] && !shown[2] && !shown[3]);
    ASSERT_OK(agent_ranks_filter_parse("3,1,17,1", 4, shown, NULL));
    ASSERT_TRUE(!shown[0] && shown[1] && !shown[2] && shown[3]);
    for (size_t i = 0; bad[i]; i++) {
        snprintf(tap_note, sizeof(tap_note), "value \"%s\"", bad[i]);
        msg = NULL;
        ASSERT_EQ(agent_ranks_filter_parse(bad[i], 4, shown, &msg), -EINVAL);
        ASSERT_TRUE(msg != NULL);
        ASSERT_TRUE(!shown[0] && shown[1] && !shown[2] && shown[3]);
    }
    tap_note[0] = '\0';
}

int main(void)
{
    TEST(test_redirects_single_value);
    TEST(test_redirects_mapping);
    TEST(test_redirects_invalid);
    TEST(test_ranks_filter);
    return tap_done();
}
