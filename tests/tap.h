/* SPDX-License-Identifier: Apache-2.0 */
/* tap.h: assertions that are never compiled out, and a TAP runner for static test functions. */
#pragma once
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Each test is a `static void test_<behaviour>(void)` that asserts and returns; a failing
 * assertion prints file:line and both values, then abort()s, so the whole executable fails.
 * main() runs the tests with TEST(test_x) and ends with `return tap_done();`.
 * These do not depend on NDEBUG (unlike assert()).
 */

static unsigned tap_count;
static const char *tap_current = "";
/* Optional context printed with a failure (a random seed, a step number). */
static char tap_note[256];

static inline void tap_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static inline void tap_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fprintf(stderr, "%s:%d: assertion failed: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (tap_note[0])
        fprintf(stderr, "  (%s)\n", tap_note);
    printf("not ok %u - %s\n", tap_count + 1, tap_current);
    fflush(stdout);
    abort();
}

#define ASSERT_TRUE(expr)                                                                          \
    do {                                                                                           \
        if (!(expr))                                                                               \
            tap_fail(__FILE__, __LINE__, "%s", #expr);                                             \
    } while (0)

#define ASSERT_FALSE(expr) ASSERT_TRUE(!(expr))

/* Integers of any width and signedness: compared modulo 2^64, printed signed and as hex. */
#define ASSERT_EQ(a, b)                                                                            \
    do {                                                                                           \
        unsigned long long tap_a_ = (unsigned long long)(a);                                       \
        unsigned long long tap_b_ = (unsigned long long)(b);                                       \
        if (tap_a_ != tap_b_)                                                                      \
            tap_fail(__FILE__, __LINE__, "%s == %s: %lld (0x%llx) != %lld (0x%llx)", #a, #b,       \
                     (long long)tap_a_, tap_a_, (long long)tap_b_, tap_b_);                        \
    } while (0)

#define ASSERT_NE(a, b)                                                                            \
    do {                                                                                           \
        unsigned long long tap_a_ = (unsigned long long)(a);                                       \
        unsigned long long tap_b_ = (unsigned long long)(b);                                       \
        if (tap_a_ == tap_b_)                                                                      \
            tap_fail(__FILE__, __LINE__, "%s != %s: both %lld (0x%llx)", #a, #b,                   \
                     (long long)tap_a_, tap_a_);                                                   \
    } while (0)

/* Signed ordering, for sizes and counts that fit in 63 bits. */
#define ASSERT_LE(a, b)                                                                            \
    do {                                                                                           \
        long long tap_a_ = (long long)(a), tap_b_ = (long long)(b);                                \
        if (!(tap_a_ <= tap_b_))                                                                   \
            tap_fail(__FILE__, __LINE__, "%s <= %s: %lld > %lld", #a, #b, tap_a_, tap_b_);         \
    } while (0)

/* A negative-errno style result: r >= 0. */
#define ASSERT_OK(r)                                                                               \
    do {                                                                                           \
        long long tap_r_ = (long long)(r);                                                         \
        if (tap_r_ < 0)                                                                            \
            tap_fail(__FILE__, __LINE__, "%s: %lld (%s)", #r, tap_r_,                              \
                     tap_r_ >= -4095 ? strerror((int)-tap_r_) : "?");                              \
    } while (0)

#define ASSERT_NULL(p) ASSERT_TRUE((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT_TRUE((p) != NULL)

/* n bytes at a equal n bytes at b; prints the first difference. */
#define ASSERT_MEMEQ(a, b, n)                                                                      \
    do {                                                                                           \
        const unsigned char *tap_pa_ = (const unsigned char *)(a);                                 \
        const unsigned char *tap_pb_ = (const unsigned char *)(b);                                 \
        size_t tap_n_ = (size_t)(n);                                                               \
        for (size_t tap_i_ = 0; tap_i_ < tap_n_; tap_i_++)                                         \
            if (tap_pa_[tap_i_] != tap_pb_[tap_i_])                                                \
                tap_fail(__FILE__, __LINE__,                                                       \
                         "%s == %s (%zu bytes): differ at %zu: 0x%02x != 0x%02x", #a, #b, tap_n_,  \
                         tap_i_, tap_pa_[tap_i_], tap_pb_[tap_i_]);                                \
    } while (0)

/* A length-counted byte string equals a C string literal or NUL-terminated string. */
#define ASSERT_BYTES_STR(p, len, s)                                                                \
    do {                                                                                           \
        size_t tap_l_ = (size_t)(len);                                                             \
        const char *tap_s_ = (s);                                                                  \
        if (tap_l_ != strlen(tap_s_) || (tap_l_ && memcmp((p), tap_s_, tap_l_) != 0))              \
            tap_fail(__FILE__, __LINE__, "%s == \"%s\": got \"%.*s\" (%zu bytes)", #p, tap_s_,     \
                     (int)(tap_l_ > 200 ? 200 : tap_l_), (const char *)(p), tap_l_);               \
    } while (0)

/* Run one test function and print its TAP line. */
#define TEST(fn)                                                                                   \
    do {                                                                                           \
        tap_current = #fn;                                                                         \
        fn();                                                                                      \
        printf("ok %u - %s\n", ++tap_count, #fn);                                                  \
        fflush(stdout);                                                                            \
    } while (0)

/* Print the plan (at the end, which TAP allows) and return main()'s exit status. */
static inline int tap_done(void)
{
    printf("1..%u\n", tap_count);
    return 0;
}
