/* SPDX-License-Identifier: Apache-2.0 */
/* test-log.c: every log line is one line: peer strings are escaped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "../tap.h"

static void expect_escape(const char *in, const char *want)
{
    char out[256];

    ASSERT_EQ(rdzv_escape(out, sizeof(out), in), strlen(want));
    ASSERT_TRUE(strcmp(out, want) == 0);
}

static void test_escape(void)
{
    expect_escape("plain job-1 node_a:29500", "plain job-1 node_a:29500");
    expect_escape("a\nb\rc\td", "a\\nb\\rc\\td");
    expect_escape("back\\slash", "back\\\\slash");
    expect_escape("\x1b[31mred\x7f", "\\x1b[31mred\\x7f");
    expect_escape("caf\xc3\xa9", "caf\\xc3\\xa9");
    expect_escape("", "");
}

static void test_escape_truncates_whole_escapes(void)
{
    char out[6];

    /* "ab" and "\n" fit (5 bytes with the NUL); "\x01" would not: left out whole. */
    ASSERT_EQ(rdzv_escape(out, sizeof(out), "ab\n\x01z"), 4);
    ASSERT_TRUE(strcmp(out, "ab\\n") == 0);
    ASSERT_EQ(rdzv_escape(out, 1, "abc"), 0);
    ASSERT_EQ(out[0], 0);
}

/* What rdzv_log writes for a message and a context that carry newlines: exactly one line. */
static void test_log_line_is_one_line(void)
{
    char path[] = "/tmp/test-log-XXXXXX", buf[4096];
    int fd = mkstemp(path), saved = dup(2);
    size_t n, lines = 0;
    FILE *f;

    ASSERT_TRUE(fd >= 0 && saved >= 0);
    fflush(stderr);
    ASSERT_EQ(dup2(fd, 2), 2);
    rdzv_log_set_context("job=%s", "evil\n2026-01-01T00:00:00.000Z rdzvd[info]: ctx");
    log_info("JOIN from host %s", "h\n2026-01-01T00:00:00.000Z rdzvd[error]: forged");
    log_warn_errno(-5, "node %s", "n\r\x1b[2K");
    rdzv_log_set_context(NULL);
    fflush(stderr);
    ASSERT_EQ(dup2(saved, 2), 2);
    close(saved);
    f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    close(fd);
    unlink(path);
    buf[n] = '\0';
    /* Two calls, two lines: each ends in the only newline it has. */
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    ASSERT_EQ(lines, 2);
    ASSERT_EQ(buf[n - 1], '\n');
    ASSERT_NOT_NULL(strstr(buf, "job=evil\\n2026-01-01T00:00:00.000Z rdzvd[info]: ctx JOIN "
                                "from host h\\n2026-01-01T00:00:00.000Z rdzvd[error]: forged\n"));
    ASSERT_NOT_NULL(strstr(buf, "node n\\r\\x1b[2K: Input/output error\n"));
    ASSERT_NULL(strchr(buf, '\r'));
    ASSERT_NULL(strchr(buf, '\x1b'));
}

int main(void)
{
    rdzv_log_setup("test-log", RDZV_LOG_INFO);
    TEST(test_escape);
    TEST(test_escape_truncates_whole_escapes);
    TEST(test_log_line_is_one_line);
    return tap_done();
}
