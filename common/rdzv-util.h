/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-util.h: small helpers: time, number parsing, hashing, host:port parsing. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDZV_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Monotonic clock in milliseconds / nanoseconds. */
uint64_t rdzv_now_ms(void);
uint64_t rdzv_now_ns(void);

/* Parse a whole decimal unsigned number. Returns 0, -EINVAL (not a number) or -ERANGE. */
int rdzv_parse_u64(const char *s, uint64_t *ret);
/* Like rdzv_parse_u64 but accepts a K/M/G/KiB/MiB/GiB suffix (powers of 1024). */
int rdzv_parse_size(const char *s, uint64_t *ret);
/* Parse a decimal int64 held in n bytes (no NUL needed), as PyTorch's ADD stores it.
 * Accepts an optional sign, digits only. Returns 0, -EINVAL or -ERANGE. */
int rdzv_parse_i64n(const uint8_t *p, size_t n, int64_t *ret);
/* Parse a TCP port 0..65535. Returns 0 or -EINVAL. */
int rdzv_parse_port(const char *s, uint16_t *ret);
/* Split "host:port", "[v6]:port" or "host" (port left as default). host is copied into hostbuf.
 * Returns 0 or -EINVAL. */
int rdzv_parse_hostport(const char *s, char *hostbuf, size_t hostlen, uint16_t *port);

/* The environment variable for a long option: "PREFIX_" + the name upper-cased, '-' -> '_'. */
void rdzv_env_name(const char *prefix, const char *opt, char *buf, size_t len);

/* 64-bit keyed hash of n bytes (wyhash-style mixing; not cryptographic). */
uint64_t rdzv_hash64(uint64_t seed, const void *p, size_t n);

/* Seed from the kernel's random pool; falls back to time and pid. */
uint64_t rdzv_random_u64(void);

/* Cut an incomplete UTF-8 sequence off the end of s (left there by a byte-wise truncation such
 * as snprintf's), so that JSON encoders accept it. Returns s. */
char *rdzv_utf8_trim(char *s);

/* The first executable file called name in $PATH, written to buf. 0, -ENOENT, or -ENAMETOOLONG. */
int rdzv_find_in_path(const char *name, char *buf, size_t len);

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void rdzv_hex(const uint8_t *p, size_t n, char *out);
